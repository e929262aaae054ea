"""scikit-learn estimators on top of ``gbflow.train``: ``GBFlowRegressor``, ``GBFlowClassifier``."""
from __future__ import annotations

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassifierMixin,
    RegressorMixin,
    TransformerMixin,
    is_regressor,
)
from sklearn.utils import TransformerTags
from sklearn.utils.validation import check_is_fitted

from .api import train
from .evaluation import cost_metric
from .objectives import MULTICLASS
from .sklearn_data import PREDICTION_COLUMN, adapter_for, eval_sets
from .sklearn_xgboost import SklearnObjective, XGBoostConventions, rounds, train_params

__all__ = ["GBFlowClassifier", "GBFlowRegressor"]

# Attributes a fit sets; a new fit drops the old ones first so that nothing stale survives it.
_FITTED = ("booster_", "classes_", "n_classes_", "best_iteration_", "best_score_",
           "evals_result_")
# The classifier's objectives of two classes; the multi-class ones (MULTICLASS) take any number.
_BINARY = ("binary:logistic", "binary:logitraw", "binary:hinge")


def _store(estimator, values: dict) -> None:
    """scikit-learn's contract: ``__init__`` stores every parameter of its signature as is;
    XGBoost's extra keyword arguments, when given, as ``kwargs``."""
    for name in estimator._get_param_names():
        setattr(estimator, name, values[name])
    if values.get("kwargs"):
        estimator.kwargs = dict(values["kwargs"])


class _GBFlowModel(XGBoostConventions, TransformerMixin, BaseEstimator):
    """Shared parameters, fitting and prediction of the gbflow estimators: scikit-learn's
    estimator contract, and XGBoost's scikit-learn wrapper where that contract leaves room
    (``eval_set`` named ``validation_0``, ...; ``early_stopping_rounds`` as a constructor
    parameter; ``**kwargs`` for further training parameters; ``get_booster()``;
    ``evals_result()``; ``feature_importances_`` of ``importance_type``). Each call hands its
    data to the adapter of the data's kind (``sklearn_data.adapter_for``). The subclasses'
    ``__init__`` lists the parameters; ``_OBJECTIVE`` is the default objective."""

    _OBJECTIVE = "reg:squarederror"
    _callable_metrics = staticmethod(cost_metric)  # eval_metric's callables as custom_metric

    # -- scikit-learn protocol -------------------------------------------------------------
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # NaN is a missing value, routed by each split
        tags.input_tags.sparse = True  # CSR: absent entries are missing values
        # transform() appends the prediction: a transformer too (float64 out for float64 in,
        # except for a classifier's non-numeric labels).
        tags.transformer_tags = TransformerTags(
            preserves_dtype=[] if isinstance(self, ClassifierMixin) else ["float64"])
        return tags

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "booster_")

    # -- parameters --------------------------------------------------------------------------
    def _train_params(self, **fixed) -> dict:
        """The ``params`` dict for ``gbflow.train``: ``sklearn_xgboost.train_params``."""
        return train_params(self, self._OBJECTIVE, fixed)

    # -- fitting -----------------------------------------------------------------------------
    def _clear_fit(self) -> None:
        for name in _FITTED:
            if name in self.__dict__:
                delattr(self, name)

    def _target(self, adapter, y):
        """The checked training y -> (gbflow's label, the params for gbflow.train)."""
        raise NotImplementedError

    def _classes(self):
        """The class labels the target is encoded against (None: a numeric target)."""
        return None

    def _check_objective(self):  # the regressor refuses the classifier's objective
        pass

    def fit(self, X, y, sample_weight=None, eval_set=None, sample_weight_eval_set=None,
            verbose=None, base_margin=None, base_margin_eval_set=None, xgb_model=None):
        """Train the model.

        X : pandas DataFrame, array-like or scipy sparse matrix of shape (n_samples,
            n_features), or Dask DataFrame
            Numeric (or pandas ``category``) features; NaN (and an entry absent from a sparse
            matrix, and ``missing``) means missing. A DataFrame's columns are the features
            named ``str(name)``, as XGBoost names them. With a Dask DataFrame, y,
            sample_weight and the eval_set entries are Dask collections partitioned like it,
            and training runs where the partitions live (``gbflow.train`` on Dask).
        y : array-like or Series of shape (n_samples,)
            The regressor's numeric target (in [0, 1] for objective "binary:logistic"); the
            classifier's class labels of any sortable type, at least two distinct classes.
        sample_weight : array-like of shape (n_samples,), optional
            Non-negative row weights.
        eval_set : list of (X, y) pairs, optional
            Validation sets (a classifier's labels among the training classes), evaluated after
            every round and named "validation_0", "validation_1", ...; the last one drives
            ``early_stopping_rounds``.
        sample_weight_eval_set : list of array-like or None, optional
            One weight array (or None) per ``eval_set`` entry.
        verbose : bool or int, optional
            Progress lines of this fit (default: the estimator's ``verbose``).
        base_margin : array-like of shape (n_samples,) or (n_samples, n_classes), optional
            XGBoost's: each row's starting margin (an offset) in place of the base score.
            In-memory data only for now.
        base_margin_eval_set : list of array-like or None, optional
            One base margin (or None: the base score) per ``eval_set`` entry.
        xgb_model : gbflow.Booster, fitted gbflow estimator or model file path, optional
            XGBoost's: a model to continue (``gbflow.train``'s ``xgb_model``): its rounds are
            kept and ``n_estimators`` more are added.

        Returns self.
        """
        return self._fit(X, y, sample_weight, eval_set, sample_weight_eval_set, verbose,
                         base_margin, base_margin_eval_set=base_margin_eval_set,
                         xgb_model=xgb_model)

    def _fit(self, X, y, sample_weight, eval_set, sample_weight_eval_set, verbose, base_margin,
             qid=None, eval_qid=None, base_margin_eval_set=None, xgb_model=None):
        """``fit``; qid / eval_qid (the ranker's): (n,) query ids of X and of each eval_set."""
        self._clear_fit()
        self._check_objective()
        n_rounds = rounds(self.n_estimators)
        adapter = adapter_for(X, self)
        data, y = adapter.fit_data(X, y, y_numeric=is_regressor(self))
        label, params = self._target(adapter, y)
        training = adapter.training(data, label, sample_weight)
        evals = eval_sets(adapter, eval_set, sample_weight_eval_set, self._classes(),
                          sample_weight is not None, eval_qid, base_margin_eval_set)
        if self.early_stopping_rounds is not None and not evals:
            raise ValueError("early_stopping_rounds needs a validation set: pass "
                             "eval_set=[(X_valid, y_valid)] to fit")
        # XGBoost's: a callable eval_metric (alone, or among names) is f(y_true, y_pred),
        # minimised unless its name is a maximised metric's (auc..., ndcg...); a callable
        # objective f(y_true, y_pred) -> (grad, hess) replaces the objective's gradients
        given = self.eval_metric if isinstance(self.eval_metric, (list, tuple)) else \
            [self.eval_metric]
        callables = [m for m in given if callable(m)]
        custom = self._callable_metrics(*callables) if callables else None
        obj = SklearnObjective(self.objective) if callable(self.objective) else None
        if verbose is None:
            verbose = False if self.verbose is None else self.verbose
        if hasattr(xgb_model, "get_booster"):  # a fitted estimator, as XGBoost's takes
            xgb_model = xgb_model.get_booster()
        booster = train(**training, base_margin=base_margin, qid=qid, params=params,
                        num_boost_round=n_rounds, evals=evals or None,
                        early_stopping_rounds=self.early_stopping_rounds, verbose=verbose,
                        obj=obj, custom_metric=custom, callbacks=self.callbacks,
                        xgb_model=xgb_model)
        self.booster_ = booster = adapter.trained(booster)
        self.evals_result_ = {name: {m: list(v) for m, v in per.items()}
                              for name, per in booster.evals_result.items()}
        self._best_from(booster)
        return self

    def _best_from(self, booster) -> None:
        """best_iteration_ and best_score_ from the booster's, each where it has one (a file
        may hold a best round without its score)."""
        if booster.best_iteration is not None:
            self.best_iteration_ = int(booster.best_iteration)
        if booster.best_score is not None:
            self.best_score_ = float(booster.best_score)

    def fit_transform(self, X, y, **fit_params):
        """``fit(X, y, **fit_params)`` then ``transform(X)`` (X with the prediction appended)."""
        return self.fit(X, y, **fit_params).transform(X)

    # -- fitted model --------------------------------------------------------------------------
    def _fitted_adapter(self, X):
        check_is_fitted(self)
        return adapter_for(X, self)

    def transform(self, X):
        """X with ``predict(X)`` appended as its last column.

        For a pandas DataFrame: a new DataFrame, X's columns and index plus a column "prediction"
        (float64, or the classifier's ``classes_`` dtype); X itself is not changed. For arrays:
        ``np.column_stack((X, predict(X)))`` of shape (n_samples, n_features_in_ + 1): NumPy's
        common dtype (float64 for float64 X), an object array (features as numbers, then the
        labels) for non-numeric class labels, e.g. strings. For a Dask DataFrame: a lazy Dask
        DataFrame, X's columns plus "prediction". A regressor of k quantiles appends k
        columns, "prediction_0", ... in the order of ``quantile_alpha``."""
        return self._fitted_adapter(X).transform(X, self._classes())

    def get_booster(self):
        """The trained ``gbflow.Booster`` (``booster_``); raises NotFittedError before fit."""
        check_is_fitted(self)
        return self.booster_

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        """The columns of ``transform``'s output: the input features, then "prediction"
        ("prediction_0", ... for a regressor of several quantiles; what
        ``set_output(transform="pandas")`` names its DataFrame's columns)."""
        check_is_fitted(self)
        names = getattr(self, "feature_names_in_", None)
        if names is None:
            names = [f"x{i}" for i in range(self.n_features_in_)]
        if input_features is not None:
            if len(input_features) != self.n_features_in_:
                raise ValueError(f"input_features has {len(input_features)} names, the "
                                 f"estimator {self.n_features_in_} features")
            if hasattr(self, "feature_names_in_") and \
                    list(map(str, input_features)) != list(map(str, names)):
                raise ValueError(f"input_features is not equal to feature_names_in_: "  # sklearn's
                                 f"{list(input_features)} against {list(names)}")
            names = input_features
        added = [PREDICTION_COLUMN] if self._classes() is not None else \
            self.booster_.output_columns(PREDICTION_COLUMN)
        return np.asarray([*map(str, names), *added], dtype=object)

    def _iteration_range(self, iteration_range):
        """XGBoost's wrapper's rule: a range ending at 0 ((0, 0) included), or None, is the
        rounds up to ``best_iteration_`` where early stopping recorded one (Booster.predict's
        (0, 0) is every round: the estimators differ from it as XGBoost's do)."""
        if (iteration_range is None or iteration_range[1] == 0) and \
                hasattr(self, "best_iteration_"):
            return (0, self.best_iteration_ + 1)
        return iteration_range

    def apply(self, X, iteration_range=None) -> np.ndarray:
        """The leaf each row reaches in each tree: int32 ndarray (n_samples, n_trees), node
        ids within each tree as in the model file (XGBoost's ``apply``: the rounds up to
        ``best_iteration_`` after early stopping, unless ``iteration_range`` says otherwise)."""
        return self._fitted_adapter(X).predict(
            X, pred_leaf=True, iteration_range=self._iteration_range(iteration_range))

    def save_model(self, path, format=None) -> None:
        """Write the trained booster (``Booster.save_model``: gbflow's JSON file, or
        ``format="xgboost"`` for XGBoost's)."""
        self.get_booster().save_model(path, format=format)

    def load_model(self, path):
        """Load a model written by ``save_model`` (gbflow's format) into this estimator, ready
        to predict; returns self. A classifier's ``classes_`` become 0..n_classes-1 (the
        labels themselves are not in the model file), as XGBoost's do."""
        from .booster import load_model
        booster = load_model(path)
        self._clear_fit()
        self.booster_ = booster
        self.n_features_in_ = booster.num_features()
        if not booster.made_up_names:  # a frame's columns, whatever they are called
            self.feature_names_in_ = np.asarray(booster.feature_names, dtype=object)
        elif "feature_names_in_" in self.__dict__:
            del self.feature_names_in_
        self.evals_result_ = {}
        self._best_from(booster)
        self._loaded(booster)
        return self

    def _loaded(self, booster) -> None:
        """What a loaded booster sets besides the common attributes (the classifier's
        classes)."""


class GBFlowRegressor(RegressorMixin, _GBFlowModel):
    """Gradient-boosted trees for regression, scikit-learn style (training on gbflow's CPU or GPU
    engine, see ``device``; in memory, or on Dask for a Dask DataFrame X).

    Parameters (XGBoost's names and meanings; checked at fit time, not here; None for any of
    them means its default, as in XGBoost's wrapper)
    ----------
    objective : str or callable, default "reg:squarederror"
        The loss, any of XGBoost's regression ones gbflow has (``objectives.OBJECTIVES``:
        "count:poisson", "reg:tweedie", "binary:logistic" for a target in [0, 1], ...;
        "reg:quantileerror" with several ``quantile_alpha`` has one output per quantile). A
        callable ``obj(y_true, y_pred[, sample_weight]) -> (grad, hess)`` (XGBoost's wrapper's:
        y_pred the raw margins) replaces the gradients of "reg:squarederror" (the
        classifier's: of its default objective), whose link the predictions keep.
    n_estimators : int, default 100
        Boosting rounds (one tree per round).
    max_depth, max_leaves, grow_policy : int, int, str, default 6, 0 and "depthwise"
        XGBoost's (0: no limit; not both): under a binding max_leaves, "lossguide" splits the
        leaf of the largest gain first (LightGBM's leaf-wise growth), "depthwise" the shallowest.
    learning_rate : float, default 0.3
    min_child_weight : float, default 1.0
        Minimum hessian sum of a child.
    gamma : float, default 0.0
        Minimum loss reduction of a split.
    reg_lambda, reg_alpha : float, default 1.0 and 0.0
        L2 and L1 regularization of leaf values.
    subsample, colsample_bytree, colsample_bylevel, colsample_bynode : float, default 1.0
        Share of rows per round, of features per tree, of the tree's features per depth, and
        of the depth's features per node.
    sampling_method : {"uniform", "gradient_based"}, default "uniform"
        How ``subsample`` draws rows (XGBoost's): "gradient_based" keeps rows with probability
        growing with their gradients, reweighted (see the training parameters).
    max_bin : int, default 256
        Histogram bins per feature.
    random_state : int, RandomState, Generator or None, default 0
        gbflow's ``seed`` (None means 0: training is deterministic; a RandomState/Generator is
        drawn from once per fit).
    base_score : float or None, default None
        Starting prediction; None estimates it from the (weighted) target mean.
    eval_metric : str, list of str, callable or None, default None
        XGBoost's metric names (default: the objective's); the last drives early stopping,
        which keeps the trees up to the best round. Callables f(y_true, y_pred), alone or in
        the list (as XGBoost's wrapper: on the host, after the named metrics; y_true encoded
        labels; minimised unless the name is a maximised metric's, such as "ndcg_...").
    early_stopping_rounds : int or None, default None: rounds without improvement to stop at
    device : {"auto", "cpu", "cuda"} (or XGBoost's "gpu"), default "auto"
    sparse_threshold : float or None, default None
        Storage routing only; never changes the model (None: sparse where that saves memory).
    verbose : bool or int, default False
        Progress lines (the "gbflow" logger; True: about 20, an int: every that many rounds).
        ``fit(verbose=...)`` overrides it for one fit, as in XGBoost.
    n_jobs : int or None, default None
        CPU threads of training (XGBoost's ``n_jobs``, gbflow's ``nthread``; None: every core).
    enable_categorical, max_cat_to_onehot, max_cat_threshold, cat_smooth, cat_l2, cat_noise_penalty
        Categorical features (pandas/cuDF ``category`` columns), XGBoost's and LightGBM's names
        (cat_noise_penalty is gbflow's) and gbflow's defaults (True, 4, 64, 10.0, 10.0, 1.0):
        see the training parameters.
    feature_types : list of str or None, default None
        XGBoost's: one type per feature; "c" makes a numeric column (or an array's column) a
        categorical feature whose values are its categories.
    verbosity : int, default 1
        XGBoost's; 0 silences gbflow's warnings during fit.
    quantile_alpha : float or list of floats, default 0.5
        The quantile of objective "reg:quantileerror" (and of the "quantile" metric), each in
        (0, 1]; a list of k trains one output per quantile: ``predict`` then gives (n_samples,
        k), one column per quantile in the list's order (XGBoost's).
    max_delta_step : float or None, default None
        XGBoost's cap on each leaf weight's size before the learning rate (0: none; None:
        0.7 for "count:poisson", else none).
    monotone_constraints : list, str, dict or None, default None
        XGBoost's: per feature 1 (predictions never decrease as it grows), -1 (never
        increase) or 0, by position ("(1,0,-1)" or a list) or by feature name (a dict).
    interaction_constraints : list of lists, str or None, default None
        XGBoost's: sets of features (positions or names) that may split on one path together.
    missing : float, default np.nan
        XGBoost's: a feature value that means missing, besides NaN.
    scale_pos_weight : float or None, default None
        XGBoost's weight factor of the rows labelled 1 (binary objectives); None: 1.0, or a
        continued model's (``fit(xgb_model=)``).
    tree_method : str, default "hist"
        XGBoost's; gbflow grows histogram trees ("hist", or "auto"; others are refused).
    importance_type : str or None, default "gain"
        What ``feature_importances_`` measures (XGBoost's names; see there).
    callbacks : list of gbflow.callback.TrainingCallback or None, default None
        ``gbflow.train``'s callbacks (XGBoost's interface), run in every fit as given.
    **kwargs
        Further training parameters by gbflow's or XGBoost's names (``gbflow.Params``, e.g.
        ``huber_slope``, ``eta``): XGBoost's wrapper's ``**kwargs``, kept by ``get_params``,
        ``set_params`` and ``clone``; an unknown name fails at fit, named.

    Attributes
    ----------
    booster_ : gbflow.Booster
    n_features_in_ : int
    feature_names_in_ : (n_features_in_,) object ndarray of str, only when X was a DataFrame:
        ``str(name)`` of each column (XGBoost's feature names: "0", "1", ... for
        ``pd.DataFrame(array)``), which predict, apply, transform and eval_set frames must have.
    feature_importances_ : (n_features_in_,) float64 ndarray, normalized ``importance_type``.
    evals_result_ : dict, ``{"validation_i": {metric: [value per round]}}``.
    best_iteration_ : int, 0-based best round (only when early stopping ran); the booster keeps
        every round trained and predicts with the first ``best_iteration_ + 1``.
    best_score_ : float, the watched metric at ``best_iteration_`` (only with early stopping).
    """

    def __init__(self, *, objective="reg:squarederror", n_estimators=100, max_depth=6,
                 learning_rate=0.3, min_child_weight=1.0, gamma=0.0, reg_lambda=1.0, reg_alpha=0.0,
                 subsample=1.0, sampling_method="uniform", colsample_bytree=1.0,
                 colsample_bylevel=1.0, colsample_bynode=1.0, max_bin=256, random_state=0,
                 base_score=None, eval_metric=None, early_stopping_rounds=None, device="auto",
                 sparse_threshold=None, verbose=False, n_jobs=None, enable_categorical=True,
                 max_cat_to_onehot=4, max_cat_threshold=64, cat_smooth=10.0, cat_l2=10.0,
                 cat_noise_penalty=1.0, feature_types=None,
                 verbosity=1, quantile_alpha=0.5, max_delta_step=None, monotone_constraints=None,
                 interaction_constraints=None, max_leaves=0, grow_policy="depthwise",
                 missing=np.nan, scale_pos_weight=None, tree_method="hist", importance_type="gain",
                 callbacks=None, **kwargs):
        _store(self, locals())

    def _check_objective(self):
        if self.objective in ("multi:softprob", "multi:softmax"):
            raise ValueError(f"GBFlowRegressor does not take objective {self.objective!r}; "
                             "use GBFlowClassifier for class labels")

    def _target(self, adapter, y):
        return adapter.encode(y, None, "fit"), self._train_params()

    def predict(self, X, output_margin=False, iteration_range=None, base_margin=None):
        """Predicted targets: float64 ndarray of shape (n_samples,), or (n_samples, k) for k
        quantiles (``quantile_alpha`` a list), one column per quantile.

        X : pandas DataFrame or array-like of shape (n_samples, n_features_in_), the training
        features in training order (a DataFrame fitted with string column names must have the
        same names). Raises NotFittedError before fit. For a Dask DataFrame: a lazy float64 Dask
        Series named "prediction" with X's index and divisions. output_margin: the raw margins
        (before the objective's link). iteration_range: as ``Booster.predict``'s, but a range
        ending at 0, (0, 0) included, is the rounds up to ``best_iteration_`` after early
        stopping, as in XGBoost's wrapper (``_iteration_range``). base_margin: each row's
        starting margin, as given to fit.
        """
        return self._fitted_adapter(X).predict(
            X, output_margin=output_margin,
            iteration_range=self._iteration_range(iteration_range), base_margin=base_margin)


class GBFlowClassifier(ClassifierMixin, _GBFlowModel):
    """Gradient-boosted trees for classification, scikit-learn style (engines and data as
    ``GBFlowRegressor``).

    Any labels work (strings, ints, bools...): ``classes_`` is ``np.unique(y)`` and the model is
    trained on their positions 0..k-1, with objective "binary:logistic" for two classes and
    "multi:softprob" (``num_class=k``) for more. ``predict`` returns the original labels.

    Parameters: as ``GBFlowRegressor`` but ``quantile_alpha``. ``objective`` (XGBoost's) may
    be None (it follows from the classes), "multi:softprob" or "multi:softmax" (any number of
    classes; ``num_class`` is set for you), "binary:logistic", "binary:logitraw" or
    "binary:hinge" (two classes; for more, "multi:softprob" as XGBoost's wrapper switches to,
    so that its ``get_params()`` pass on), or a callable (as the regressor's, on the default
    objective's link). ``predict_proba`` of multi:softmax is the softmax of the margins (as
    XGBoost's), of binary:logitraw the sigmoid of its margin (XGBoost's returns the margin
    itself), of binary:hinge 0 or 1. For two classes ``base_score`` is a probability of
    ``classes_[1]`` (a margin for binary:logitraw); ``eval_metric`` must fit the objective
    ("logloss", "auc", "rmse" for two classes; "mlogloss" for more).

    Attributes: as ``GBFlowRegressor``, plus ``classes_`` ((n_classes,) ndarray of the sorted
    labels) and ``n_classes_`` (int).
    """

    def __init__(self, *, objective=None, n_estimators=100, max_depth=6, learning_rate=0.3,
                 min_child_weight=1.0, gamma=0.0, reg_lambda=1.0, reg_alpha=0.0, subsample=1.0,
                 sampling_method="uniform", colsample_bytree=1.0, colsample_bylevel=1.0,
                 colsample_bynode=1.0, max_bin=256, random_state=0, base_score=None,
                 eval_metric=None, early_stopping_rounds=None, device="auto", sparse_threshold=None,
                 verbose=False, n_jobs=None, enable_categorical=True, max_cat_to_onehot=4,
                 max_cat_threshold=64, cat_smooth=10.0, cat_l2=10.0,
                 cat_noise_penalty=1.0, feature_types=None, verbosity=1,
                 max_delta_step=None, monotone_constraints=None, interaction_constraints=None,
                 max_leaves=0, grow_policy="depthwise", missing=np.nan, scale_pos_weight=None,
                 tree_method="hist", importance_type="gain", callbacks=None, **kwargs):
        _store(self, locals())

    def _target(self, adapter, y):
        classes = adapter.classes(y)
        k = len(classes)
        if k < 2:
            raise ValueError(f"GBFlowClassifier needs at least 2 classes in y, but y has only "
                             f"{k} class: {classes.tolist()}")
        objective = self.objective
        if objective is None or callable(objective):  # XGBoost's: the classes' own
            objective = "binary:logistic" if k == 2 else "multi:softprob"
        elif objective not in _BINARY + MULTICLASS:
            raise ValueError(f"GBFlowClassifier takes a classification objective "
                             f"({', '.join(_BINARY + MULTICLASS)}), a callable or None, got "
                             f"{objective!r}; use GBFlowRegressor for other objectives")
        elif objective in _BINARY and k > 2:  # XGBoost's wrapper switches, as its default
            objective = "multi:softprob"     # objective is binary:logistic whatever y holds
        self.classes_, self.n_classes_ = classes, k
        fixed = dict(objective=objective, num_class=k) if objective in MULTICLASS else \
            dict(objective=objective)
        return adapter.encode(y, classes, "fit"), self._train_params(**fixed)

    def _classes(self):
        return self.classes_

    def _loaded(self, booster) -> None:
        self.n_classes_ = max(booster.n_groups, 2)
        self.classes_ = np.arange(self.n_classes_)

    def predict_proba(self, X, iteration_range=None, base_margin=None):
        """Class probabilities: float64 ndarray of shape (n_samples, n_classes_), columns in the
        order of ``classes_``, rows summing to 1 (two classes: ``[1 - p, p]`` with p the
        probability of ``classes_[1]``). Raises NotFittedError before fit. For a Dask DataFrame:
        a lazy Dask DataFrame with X's index, one column per class named ``str(class)``.
        iteration_range: as the regressor's; base_margin: as fit's."""
        adapter = self._fitted_adapter(X)
        return adapter.proba(X, self.classes_,
                             iteration_range=self._iteration_range(iteration_range),
                             base_margin=base_margin)

    def predict(self, X, output_margin=False, iteration_range=None, base_margin=None):
        """Predicted labels: ndarray of shape (n_samples,) with ``classes_``'s dtype, the most
        probable class of each row (two classes: ``classes_[1]`` when its probability is > 0.5).
        Raises NotFittedError before fit. For a Dask DataFrame: a lazy Dask Series named
        "prediction" with X's index and divisions. output_margin: the raw margins instead
        (float64 (n_samples,), or (n_samples, n_classes_) for the multi-class objectives), as
        in XGBoost. iteration_range: as the regressor's; base_margin: as fit's."""
        adapter = self._fitted_adapter(X)
        if output_margin:
            return adapter.predict(X, output_margin=True,
                                   iteration_range=self._iteration_range(iteration_range),
                                   base_margin=base_margin)
        return adapter.labels(X, self.classes_,
                              iteration_range=self._iteration_range(iteration_range),
                              base_margin=base_margin)

    def transform(self, X):
        """X with ``predict(X)``, the labels, appended (as ``GBFlowRegressor.transform``)."""
        adapter = self._fitted_adapter(X)
        return adapter.transform(X, self.classes_)
