"""scikit-learn estimators on top of ``gbflow.train``: ``GBFlowRegressor``, ``GBFlowClassifier``."""
from __future__ import annotations

import numbers

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, is_regressor
from sklearn.utils import TransformerTags
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_consistent_length, check_is_fitted, column_or_1d

try:
    from sklearn.utils.validation import validate_data
except ImportError as e:  # scikit-learn < 1.6
    raise ImportError("gbflow's scikit-learn estimators need scikit-learn >= 1.6") from e

from .api import train
from .evaluation import cost_metric
from .inputs import is_dask_collection

__all__ = ["GBFlowClassifier", "GBFlowRegressor"]

# How every feature matrix is checked: dense or CSR, numeric, NaN allowed (a missing value), at
# least one row and one feature. dtype "numeric" keeps float32/float64/int/bool arrays as they are
# (gbflow converts them to float32 itself) and converts object arrays to float64.
_CHECK_X = dict(accept_sparse="csr", dtype="numeric", ensure_all_finite="allow-nan",
                ensure_min_samples=1, ensure_min_features=1)

_PREDICTION_COLUMN = "prediction"

# Attributes a fit sets; a new fit drops the old ones first so that nothing stale survives it.
_FITTED = ("booster_", "classes_", "n_classes_", "best_iteration_", "best_score_",
           "evals_result_")

# Constructor parameters that are not entries of gbflow.train's params: its own arguments
# (num_boost_round, early_stopping_rounds, verbose), and random_state, which becomes the
# params' "seed" through _seed().
_NOT_PARAMS = ("n_estimators", "early_stopping_rounds", "verbose", "random_state")


def _adapter(X, estimator):
    """The adapter for X's kind: ``gbflow.dask.estimators.DaskAdapter`` for Dask collections
    (imported only then: dask is optional), ``_InMemoryAdapter`` for anything else."""
    if is_dask_collection(X):
        from .dask.estimators import DaskAdapter
        return DaskAdapter(estimator, _PREDICTION_COLUMN)
    return _InMemoryAdapter(estimator)


def _weights(weight, n_rows: int, what: str, match: str = "") -> np.ndarray:
    """Row weights as a float64 (n_rows,) array; ValueError naming ``what`` otherwise."""
    weight = np.asarray(weight, dtype=np.float64)
    if weight.ndim != 1 or len(weight) != n_rows:
        raise ValueError(f"{what} must have shape ({n_rows},){match}, got shape {weight.shape}")
    return weight


def _labels(p: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Probabilities (n,) of ``classes[1]`` or (n, k) per class -> (n,) most probable labels."""
    return classes[(p > 0.5).astype(np.intp) if p.ndim == 1 else np.argmax(p, axis=1)]


class _InMemoryAdapter:
    """pandas DataFrames, NumPy arrays and scipy sparse matrices (taken as CSR, absent entries
    being missing values), checked by scikit-learn's ``validate_data``. A DataFrame with string
    column names reaches gbflow as a frame, so the booster knows the feature names; anything else
    as the checked array (features f0, f1, ...): float32 features either way, as in
    ``gbflow.train``. ``gbflow.dask.estimators.DaskAdapter`` offers the same methods; ``classes``
    is None for a numeric target (the regressor), else the sorted class labels.
    """

    def __init__(self, estimator):
        self.estimator = estimator

    def _data(self, X, X_checked):
        """What gbflow gets: a frame as it is when fitted with string column names (which
        ``validate_data`` has checked X has, in order), else the checked array."""
        if isinstance(X, pd.DataFrame) and hasattr(self.estimator, "feature_names_in_"):
            return X
        return X_checked

    def _checked(self, X):
        """X checked against the training features -> (checked array, gbflow data)."""
        X_checked = validate_data(self.estimator, X, reset=False, **_CHECK_X)
        return X_checked, self._data(X, X_checked)

    # -- fit -------------------------------------------------------------------------------------
    def fit_data(self, X, y, y_numeric: bool = False):
        """X and y checked for training (this records ``n_features_in_`` and, for string column
        names, ``feature_names_in_``) -> (gbflow data, (n,) y)."""
        X_checked, y = validate_data(self.estimator, X, y, reset=True, y_numeric=y_numeric,
                                     **_CHECK_X)
        return self._data(X, X_checked), y

    def classes(self, y) -> np.ndarray:
        """The sorted distinct labels of a classification target."""
        check_classification_targets(y)
        return np.unique(y)

    def encode(self, y, classes, what: str) -> np.ndarray:
        """y -> gbflow's float64 (n,) label: the numbers themselves (``classes`` None), or the
        positions in ``classes``; a label not in ``classes`` is an error."""
        name = "y" if what == "fit" else f"y of {what}"
        y = column_or_1d(y, warn=True)
        if classes is None:
            try:
                return np.asarray(y, dtype=np.float64)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{name} must be numeric, got dtype {y.dtype}") from e
        try:
            index = np.clip(np.searchsorted(classes, y), 0, len(classes) - 1)
            known = np.asarray(classes[index] == y, dtype=bool)
        except TypeError:  # labels of a type that cannot be compared with the classes
            index, known = None, np.zeros(len(y), dtype=bool)
        if known.shape != y.shape:
            known = np.zeros(len(y), dtype=bool)
        if not known.all():
            unseen = list(dict.fromkeys(y[~known].tolist()))
            raise ValueError(f"{name} has label(s) {unseen[:5]} that are not among the classes "
                             f"seen in the training y: {classes.tolist()}")
        return index.astype(np.float64)

    def training(self, data, y, sample_weight) -> dict:
        """``gbflow.train``'s data, label and weight arguments."""
        if sample_weight is not None:
            sample_weight = _weights(sample_weight, data.shape[0], "sample_weight", " to match X")
        return dict(data=data, label=y, weight=sample_weight)

    def eval_data(self, X, y, weight, index: int, classes, weighted: bool) -> tuple:
        """``eval_set[index]`` as the data of one of gbflow's evals: (X, y[, weight])."""
        X_checked = validate_data(self.estimator, X, reset=False, **_CHECK_X)
        y = self.encode(y, classes, f"eval_set[{index}]")
        check_consistent_length(X_checked, y)
        data = (self._data(X, X_checked), y)
        if weight is None:
            return data
        return data + (_weights(weight, X_checked.shape[0], f"sample_weight_eval_set[{index}]"),)

    def trained(self, booster):
        return booster

    # -- fitted model ------------------------------------------------------------------------------
    def predict(self, X) -> np.ndarray:
        """The booster's float64 prediction: (n,), or (n, n_classes) for multi:softprob."""
        return np.asarray(self.estimator.booster_.predict(self._checked(X)[1]), dtype=np.float64)

    def labels(self, X, classes) -> np.ndarray:
        return _labels(self.predict(X), classes)

    def proba(self, X, classes) -> np.ndarray:
        """(n, n_classes) float64; for two classes ``[1 - p, p]``."""
        p = self.predict(X)
        return np.column_stack((1.0 - p, p)) if p.ndim == 1 else p

    def transform(self, X, classes):
        """X with the prediction (``classes`` None) or the predicted label appended: a new frame
        with a "prediction" column for a DataFrame, else a column of the checked array."""
        X_checked, data = self._checked(X)
        booster = self.estimator.booster_
        if classes is None and data is X:  # a frame whose names the booster knows: its transform
            return booster.transform(X, name=_PREDICTION_COLUMN)
        values = np.asarray(booster.predict(data), dtype=np.float64)
        if classes is not None:
            values = _labels(values, classes)
        if isinstance(X, pd.DataFrame):
            if _PREDICTION_COLUMN in X.columns:
                raise ValueError(f"transform: X already has a column {_PREDICTION_COLUMN!r}")
            out = X.copy()
            out[_PREDICTION_COLUMN] = values
            return out
        if hasattr(X_checked, "tocsr"):  # scipy sparse: the prediction becomes one more column
            if values.dtype.kind not in "biuf":
                raise TypeError("transform: a sparse X cannot hold non-numeric class labels; use "
                                "predict()")
            import scipy.sparse
            return scipy.sparse.hstack([X_checked, scipy.sparse.csr_matrix(values[:, None])],
                                       format="csr")
        if values.dtype.kind not in "biuf":  # e.g. string labels: keep the features as numbers
            X_checked = X_checked.astype(object)
            values = values.astype(object)
        return np.column_stack((X_checked, values))


def _store(estimator, values: dict) -> None:
    """scikit-learn's contract: ``__init__`` stores every parameter of its signature as is."""
    for name in estimator._get_param_names():
        setattr(estimator, name, values[name])


class _GBFlowModel(BaseEstimator):
    """Shared parameters, fitting and prediction of the gbflow estimators: scikit-learn's
    estimator contract, and XGBoost's scikit-learn wrapper where that contract leaves room
    (``eval_set`` named ``validation_0``, ...; ``early_stopping_rounds`` as a constructor
    parameter; ``get_booster()``; ``evals_result()``; ``feature_importances_`` as normalized
    "gain"). Each call hands its data to the adapter of the data's kind (``_adapter``)."""

    def __init__(self, *, n_estimators=100, max_depth=6, learning_rate=0.3, min_child_weight=1.0,
                 gamma=0.0, reg_lambda=1.0, reg_alpha=0.0, subsample=1.0, colsample_bytree=1.0,
                 max_bin=256, random_state=0, base_score=None, eval_metric=None,
                 early_stopping_rounds=None, device="auto", sparse_threshold=None, verbose=False):
        _store(self, locals())

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
    def _seed(self) -> int:
        """``random_state`` as gbflow's integer ``seed``: None -> 0 (gbflow is deterministic),
        an int as is, a ``np.random.RandomState``/``Generator`` -> one draw from it."""
        rs = self.random_state
        if rs is None:
            return 0
        if isinstance(rs, numbers.Integral) and not isinstance(rs, (bool, np.bool_)):
            return int(rs)
        if isinstance(rs, np.random.RandomState):
            return int(rs.randint(np.iinfo(np.int32).max))
        if isinstance(rs, np.random.Generator):
            return int(rs.integers(np.iinfo(np.int32).max))
        raise ValueError(f"random_state must be None, an int, a numpy RandomState or Generator, "
                         f"got {rs!r}")

    def _train_params(self, **fixed) -> dict:
        """The ``params`` dict for ``gbflow.train`` (validated there): the constructor's
        parameters but ``_NOT_PARAMS``, ``seed``, and ``fixed`` (what follows from the target)."""
        params = {name: value for name, value in self.get_params(deep=False).items()
                  if name not in _NOT_PARAMS}
        return {**params, "seed": self._seed(), **fixed}

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

    def fit(self, X, y, sample_weight=None, eval_set=None, sample_weight_eval_set=None):
        """Train the model.

        X : pandas DataFrame, array-like or scipy sparse matrix of shape (n_samples,
            n_features), or Dask DataFrame
            Numeric features; NaN (and an entry absent from a sparse matrix) means missing.
            With a Dask DataFrame, y, sample_weight and the eval_set entries are Dask
            collections partitioned like it, and training runs where the partitions live
            (``gbflow.train`` on Dask).
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

        Returns self.
        """
        self._clear_fit()
        self._check_objective()
        adapter = _adapter(X, self)
        data, y = adapter.fit_data(X, y, y_numeric=is_regressor(self))
        label, params = self._target(adapter, y)
        training = adapter.training(data, label, sample_weight)
        evals = self._eval_sets(adapter, eval_set, sample_weight_eval_set,
                                weighted=sample_weight is not None)
        if self.early_stopping_rounds is not None and not evals:
            raise ValueError("early_stopping_rounds needs a validation set: pass "
                             "eval_set=[(X_valid, y_valid)] to fit")
        custom = None
        if callable(self.eval_metric):  # XGBoost's: a cost f(y_true, y_pred), minimised
            params = {**params, "eval_metric": None}
            custom = cost_metric(self.eval_metric)
        booster = train(**training, params=params, num_boost_round=self.n_estimators,
                        evals=evals or None, early_stopping_rounds=self.early_stopping_rounds,
                        verbose=self.verbose, custom_metric=custom,
                        maximize=False if custom is not None else None)
        self.booster_ = booster = adapter.trained(booster)
        self.evals_result_ = {name: {m: list(v) for m, v in per.items()}
                              for name, per in booster.evals_result.items()}
        if booster.best_iteration is not None:
            self.best_iteration_ = int(booster.best_iteration)
            self.best_score_ = float(booster.best_score)
        return self

    def _eval_sets(self, adapter, eval_set, sample_weight_eval_set, weighted: bool) -> list:
        """``eval_set`` as gbflow's evals: [(data, "validation_i"), ...], each entry checked and
        prepared by the adapter (weighted: the training has weights)."""
        if eval_set is None:
            if sample_weight_eval_set is not None:
                raise ValueError("sample_weight_eval_set was given without eval_set")
            return []
        if isinstance(eval_set, tuple) and len(eval_set) == 2 and not \
                isinstance(eval_set[0], tuple):
            raise TypeError("eval_set must be a list of (X, y) pairs, e.g. [(X_valid, y_valid)]")
        eval_set = list(eval_set)
        weights = [None] * len(eval_set) if sample_weight_eval_set is None else \
            list(sample_weight_eval_set)
        if len(weights) != len(eval_set):
            raise ValueError(f"sample_weight_eval_set has {len(weights)} entries but eval_set "
                             f"has {len(eval_set)}")
        evals = []
        for i, (pair, weight) in enumerate(zip(eval_set, weights)):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise TypeError(f"eval_set[{i}] must be an (X, y) pair, got "
                                f"{type(pair).__name__}")
            data = adapter.eval_data(*pair, weight, i, self._classes(), weighted)
            evals.append((data, f"validation_{i}"))
        return evals

    def fit_transform(self, X, y, **fit_params):
        """``fit(X, y, **fit_params)`` then ``transform(X)`` (X with the prediction appended)."""
        return self.fit(X, y, **fit_params).transform(X)

    # -- fitted model --------------------------------------------------------------------------
    def _fitted_adapter(self, X):
        check_is_fitted(self)
        return _adapter(X, self)

    def transform(self, X):
        """X with ``predict(X)`` appended as its last column.

        For a pandas DataFrame: a new DataFrame, X's columns and index plus a column "prediction"
        (float64, or the classifier's ``classes_`` dtype); X itself is not changed. For arrays:
        ``np.column_stack((X, predict(X)))`` of shape (n_samples, n_features_in_ + 1): NumPy's
        common dtype (float64 for float64 X), an object array (features as numbers, then the
        labels) for non-numeric class labels, e.g. strings. For a Dask DataFrame: a lazy Dask
        DataFrame, X's columns plus "prediction"."""
        return self._fitted_adapter(X).transform(X, self._classes())

    def get_booster(self):
        """The trained ``gbflow.Booster`` (``booster_``); raises NotFittedError before fit."""
        check_is_fitted(self)
        return self.booster_

    def evals_result(self) -> dict:
        """Metric history of the eval_set, as XGBoost gives it:
        ``{"validation_0": {"rmse": [round 1, round 2, ...]}, ...}`` ({} without eval_set)."""
        check_is_fitted(self)
        return self.evals_result_

    @property
    def feature_importances_(self) -> np.ndarray:
        """(n_features_in_,) float64 "gain" importances (mean loss reduction of the feature's
        splits), in training column order, 0.0 for features no split uses, normalized to sum to 1
        (all zeros when the model has no split). Raises NotFittedError before fit."""
        check_is_fitted(self)
        booster = self.booster_
        gain = booster.feature_importances("gain")
        values = np.array([gain.get(name, 0.0) for name in booster.feature_names],
                          dtype=np.float64)
        total = values.sum()
        return values / total if total > 0 else values


class GBFlowRegressor(RegressorMixin, _GBFlowModel):
    """Gradient-boosted trees for regression, scikit-learn style (training on gbflow's CPU or GPU
    engine, see ``device``; in memory, or on Dask for a Dask DataFrame X).

    Parameters (XGBoost's names and meanings; checked at fit time, not here)
    ----------
    objective : str, default "reg:squarederror"
        The loss, any of XGBoost's single-output ones gbflow has (``objectives.OBJECTIVES``:
        "count:poisson", "reg:tweedie", "binary:logistic" for a target in [0, 1], ...).
    n_estimators : int, default 100
        Boosting rounds (one tree per round).
    max_depth : int, default 6
    learning_rate : float, default 0.3
    min_child_weight : float, default 1.0
        Minimum hessian sum of a child.
    gamma : float, default 0.0
        Minimum loss reduction of a split.
    reg_lambda, reg_alpha : float, default 1.0 and 0.0
        L2 and L1 regularization of leaf values.
    subsample, colsample_bytree : float, default 1.0
        Share of rows per round and of features per tree.
    max_bin : int, default 256
        Histogram bins per feature.
    random_state : int, RandomState, Generator or None, default 0
        gbflow's ``seed`` (None means 0: training is deterministic; a RandomState/Generator is
        drawn from once per fit).
    base_score : float or None, default None
        Starting prediction; None estimates it from the (weighted) target mean.
    eval_metric : str, list of str, callable or None, default None
        XGBoost's metric names (default: the objective's); the last drives early stopping,
        which keeps the trees up to the best round. A callable f(y_true, y_pred) (as XGBoost's
        wrapper: a cost, on the host, after the default metric; y_true encoded labels).
    early_stopping_rounds : int or None, default None: rounds without improvement to stop at
    device : {"auto", "cpu", "cuda"}, default "auto"
    sparse_threshold : float or None, default None
        Storage routing only; never changes the model (None: sparse where that saves memory).
    verbose : bool or int, default False
        Progress lines on stderr (True: about 20, an int: every that many rounds).

    Attributes
    ----------
    booster_ : gbflow.Booster
    n_features_in_ : int
    feature_names_in_ : (n_features_in_,) object ndarray, only when X was a DataFrame whose
        column names are all strings (always the case for a Dask DataFrame).
    feature_importances_ : (n_features_in_,) float64 ndarray, normalized "gain".
    evals_result_ : dict, ``{"validation_i": {metric: [value per round]}}``.
    best_iteration_ : int, 0-based best round (only when early stopping ran); the booster keeps
        every round trained and predicts with the first ``best_iteration_ + 1``.
    best_score_ : float, the watched metric at ``best_iteration_`` (only with early stopping).
    """

    def __init__(self, *, objective="reg:squarederror", n_estimators=100, max_depth=6,
                 learning_rate=0.3, min_child_weight=1.0, gamma=0.0, reg_lambda=1.0,
                 reg_alpha=0.0, subsample=1.0, colsample_bytree=1.0, max_bin=256, random_state=0,
                 base_score=None, eval_metric=None, early_stopping_rounds=None, device="auto",
                 sparse_threshold=None, verbose=False):
        _store(self, locals())

    def _check_objective(self):
        if self.objective in ("multi:softprob", "multi:softmax"):
            raise ValueError(f"GBFlowRegressor does not take objective {self.objective!r}; "
                             "use GBFlowClassifier for class labels")

    def _target(self, adapter, y):
        return adapter.encode(y, None, "fit"), self._train_params()

    def predict(self, X):
        """Predicted targets: float64 ndarray of shape (n_samples,).

        X : pandas DataFrame or array-like of shape (n_samples, n_features_in_), the training
        features in training order (a DataFrame fitted with string column names must have the
        same names). Raises NotFittedError before fit. For a Dask DataFrame: a lazy float64 Dask
        Series named "prediction" with X's index and divisions.
        """
        return self._fitted_adapter(X).predict(X)


class GBFlowClassifier(ClassifierMixin, _GBFlowModel):
    """Gradient-boosted trees for classification, scikit-learn style (engines and data as
    ``GBFlowRegressor``).

    Any labels work (strings, ints, bools...): ``classes_`` is ``np.unique(y)`` and the model is
    trained on their positions 0..k-1, with objective "binary:logistic" for two classes and
    "multi:softprob" (``num_class=k``) for more. ``predict`` returns the original labels.

    Parameters: as ``GBFlowRegressor`` (without ``objective``, which follows from the classes).
    For two classes ``base_score`` is a probability of ``classes_[1]``; ``eval_metric`` must fit
    the objective ("logloss", "auc", "rmse" for two classes; "mlogloss" for more).

    Attributes: as ``GBFlowRegressor``, plus ``classes_`` ((n_classes,) ndarray of the sorted
    labels) and ``n_classes_`` (int).
    """

    def _target(self, adapter, y):
        classes = adapter.classes(y)
        if len(classes) < 2:
            raise ValueError(f"GBFlowClassifier needs at least 2 classes in y, but y has only "
                             f"{len(classes)} class: {classes.tolist()}")
        self.classes_ = classes
        self.n_classes_ = len(classes)
        if self.n_classes_ == 2:
            params = self._train_params(objective="binary:logistic")
        else:
            params = self._train_params(objective="multi:softprob", num_class=self.n_classes_)
        return adapter.encode(y, classes, "fit"), params

    def _classes(self):
        return self.classes_

    def predict_proba(self, X):
        """Class probabilities: float64 ndarray of shape (n_samples, n_classes_), columns in the
        order of ``classes_``, rows summing to 1 (two classes: ``[1 - p, p]`` with p the
        probability of ``classes_[1]``). Raises NotFittedError before fit. For a Dask DataFrame:
        a lazy Dask DataFrame with X's index, one column per class named ``str(class)``."""
        return self._fitted_adapter(X).proba(X, self.classes_)

    def predict(self, X):
        """Predicted labels: ndarray of shape (n_samples,) with ``classes_``'s dtype, the most
        probable class of each row (two classes: ``classes_[1]`` when its probability is > 0.5).
        Raises NotFittedError before fit. For a Dask DataFrame: a lazy Dask Series named
        "prediction" with X's index and divisions."""
        return self._fitted_adapter(X).labels(X, self.classes_)
