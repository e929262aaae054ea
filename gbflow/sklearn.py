"""scikit-learn estimators: ``GBFlowRegressor`` and ``GBFlowClassifier`` on top of ``gbflow.train``.

They follow scikit-learn's estimator contract (parameters stored verbatim by ``__init__``, so
``clone``, ``get_params``/``set_params``, pipelines, grid searches and cross-validation work) and
XGBoost's scikit-learn wrapper where that contract leaves room (``eval_set`` named
``validation_0``, ``validation_1``, ...; ``early_stopping_rounds`` as a constructor parameter;
``get_booster()``; ``evals_result()``; ``feature_importances_`` as normalized "gain").

Dask DataFrames work too (X a Dask DataFrame, y and weights Dask Series partitioned like it):
training then runs as ``gbflow.train`` does on Dask (on the active ``distributed.Client``'s
workers), and predictions are lazy Dask collections; the Dask plumbing lives in
``gbflow.dask.estimators``.

Inputs are checked by scikit-learn's ``validate_data`` (NaN is allowed and means missing; +-inf
and non-numeric features are refused; a scipy sparse matrix is taken as CSR, its absent entries
being missing values as in ``gbflow.train``). A pandas DataFrame whose column names are
all strings is handed to gbflow as a frame, so the booster knows the feature names; any other
input is handed over as the checked NumPy array (features named f0, f1, ...). Either way gbflow
uses float32 features, exactly as ``gbflow.train`` does for the same data.

scikit-learn is a test/optional dependency: only this module imports it.
"""
from __future__ import annotations

import numbers

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils import TransformerTags
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_consistent_length, check_is_fitted, column_or_1d

try:
    from sklearn.utils.validation import validate_data
except ImportError as e:  # scikit-learn < 1.6
    raise ImportError("gbflow's scikit-learn estimators need scikit-learn >= 1.6") from e

from .api import train

__all__ = ["GBFlowClassifier", "GBFlowRegressor"]

# How every feature matrix is checked: dense, numeric, NaN allowed (a missing value), at least
# one row and one feature. dtype "numeric" keeps float32/float64/int/bool arrays as they are
# (gbflow converts them to float32 itself) and converts object arrays to float64.
_CHECK_X = dict(accept_sparse="csr", dtype="numeric", ensure_all_finite="allow-nan",
                ensure_min_samples=1, ensure_min_features=1)

_PREDICTION_COLUMN = "prediction"


def _is_dask(data) -> bool:
    # Found without importing dask (only gbflow.dask imports it).
    return type(data).__module__.split(".")[0] in ("dask", "dask_cudf", "dask_expr")

# Attributes a fit sets; a new fit drops the old ones first so that nothing stale survives it.
_FITTED = ("booster_", "classes_", "n_classes_", "best_iteration_", "best_score_",
           "evals_result_")


def _append_column(X, X_checked, values):
    """``X`` with ``values`` (n,) appended: a new frame with a "prediction" column for a pandas
    DataFrame (same index and columns), ``np.column_stack`` of the checked array otherwise."""
    if isinstance(X, pd.DataFrame):
        if _PREDICTION_COLUMN in X.columns:
            raise ValueError(f"transform: X already has a column {_PREDICTION_COLUMN!r}")
        out = X.copy()
        out[_PREDICTION_COLUMN] = values
        return out
    values = np.asarray(values)
    if hasattr(X_checked, "tocsr"):  # scipy sparse: the prediction becomes one more column
        if values.dtype.kind not in "biuf":
            raise TypeError("transform: a sparse X cannot hold non-numeric class labels; use "
                            "predict()")
        import scipy.sparse
        return scipy.sparse.hstack([X_checked, scipy.sparse.csr_matrix(values[:, None])],
                                   format="csr")
    if values.dtype.kind not in "biuf":  # e.g. string class labels: keep the features as numbers
        X_checked = X_checked.astype(object)
        values = values.astype(object)
    return np.column_stack((X_checked, values))


class _GBFlowModel(BaseEstimator):
    """Shared parameters, fitting and prediction plumbing of the gbflow estimators."""

    def __init__(self, *, n_estimators=100, max_depth=6, learning_rate=0.3, min_child_weight=1.0,
                 gamma=0.0, reg_lambda=1.0, reg_alpha=0.0, subsample=1.0, colsample_bytree=1.0,
                 max_bin=256, random_state=0, base_score=None, eval_metric=None,
                 early_stopping_rounds=None, device="auto", sparse_threshold=0.8, verbose=False):
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.min_child_weight = min_child_weight
        self.gamma = gamma
        self.reg_lambda = reg_lambda
        self.reg_alpha = reg_alpha
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.max_bin = max_bin
        self.random_state = random_state
        self.base_score = base_score
        self.eval_metric = eval_metric
        self.early_stopping_rounds = early_stopping_rounds
        self.device = device
        self.sparse_threshold = sparse_threshold
        self.verbose = verbose

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

    def _train_params(self, objective: str, num_class: int | None = None) -> dict:
        """The ``params`` dict for ``gbflow.train`` (validated there)."""
        params = {
            "objective": objective,
            "learning_rate": self.learning_rate,
            "max_depth": self.max_depth,
            "min_child_weight": self.min_child_weight,
            "gamma": self.gamma,
            "reg_lambda": self.reg_lambda,
            "reg_alpha": self.reg_alpha,
            "subsample": self.subsample,
            "colsample_bytree": self.colsample_bytree,
            "max_bin": self.max_bin,
            "seed": self._seed(),
            "base_score": self.base_score,
            "eval_metric": self.eval_metric,
            "device": self.device,
            "sparse_threshold": self.sparse_threshold,
        }
        if num_class is not None:
            params["num_class"] = num_class
        return params

    # -- data plumbing -----------------------------------------------------------------------
    def _booster_data(self, X, X_checked):
        """What gbflow gets: the frame itself when it was fitted on a frame with string column
        names (``validate_data`` has checked that X has exactly those names, in that order), else
        the checked array (columns by position)."""
        if isinstance(X, pd.DataFrame) and hasattr(self, "feature_names_in_"):
            return X
        return X_checked

    def _check_X(self, X):
        """Fitted-ness, then X checked against the training features; -> (X_checked, gbflow data)."""
        check_is_fitted(self)
        X_checked = validate_data(self, X, reset=False, **_CHECK_X)
        return X_checked, self._booster_data(X, X_checked)

    def _encode_target(self, y, what: str) -> np.ndarray:  # overridden per estimator
        raise NotImplementedError

    def _clear_fit(self) -> None:
        for name in _FITTED:
            if name in self.__dict__:
                delattr(self, name)

    def _fit_booster(self, X, X_checked, y_train, sample_weight, eval_set,
                     sample_weight_eval_set, params: dict):
        """Train the booster on checked data; ``y_train`` already in gbflow's label encoding."""
        n_rows = X_checked.shape[0]
        if sample_weight is not None:
            sample_weight = np.asarray(sample_weight, dtype=np.float64)
            if sample_weight.ndim != 1 or len(sample_weight) != n_rows:
                raise ValueError(f"sample_weight must have shape ({n_rows},) to match X, got "
                                 f"shape {sample_weight.shape}")
        evals = self._eval_sets(eval_set, sample_weight_eval_set)
        if self.early_stopping_rounds is not None and not evals:
            raise ValueError("early_stopping_rounds needs a validation set: pass "
                             "eval_set=[(X_valid, y_valid)] to fit")
        booster = train(self._booster_data(X, X_checked), label=y_train, params=params,
                        num_boost_round=self.n_estimators, evals=evals or None,
                        early_stopping_rounds=self.early_stopping_rounds, weight=sample_weight,
                        verbose=self.verbose)
        return self._keep(booster)

    def _keep(self, booster):
        """Store the trained booster and what scikit-learn users read from it; returns self."""
        self.booster_ = booster
        self.evals_result_ = {name: {m: list(v) for m, v in per.items()}
                              for name, per in booster.evals_result.items()}
        if booster.best_iteration is not None:
            self.best_iteration_ = int(booster.best_iteration)
            self.best_score_ = float(booster.best_score)
        return self

    # -- Dask collections ----------------------------------------------------------------------
    def _dask_target(self, y):  # overridden per estimator: (encoded y, params)
        raise NotImplementedError

    def _encode_dask(self, y, what: str):  # overridden per estimator
        raise NotImplementedError

    def _fit_dask(self, X, y, sample_weight, eval_set, sample_weight_eval_set):
        """fit() for a Dask DataFrame X with Dask Series y (and weights): one frame with label and
        weight columns, trained by ``gbflow.train`` on Dask; nothing is computed here except the
        classifier's distinct labels."""
        from .dask import estimators as dask_est
        X = dask_est.check_features(X)
        y_train, params = self._dask_target(y)
        weighted = sample_weight is not None
        frame = dask_est.training_frame(X, y_train, sample_weight, "fit", weighted)
        if eval_set is None and sample_weight_eval_set is not None:
            raise ValueError("sample_weight_eval_set was given without eval_set")
        eval_set = list(eval_set or [])
        weights = list(sample_weight_eval_set) if sample_weight_eval_set is not None else \
            [None] * len(eval_set)
        if len(weights) != len(eval_set):
            raise ValueError(f"sample_weight_eval_set has {len(weights)} entries but eval_set "
                             f"has {len(eval_set)}")
        evals = []
        for i, (pair, w) in enumerate(zip(eval_set, weights)):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise TypeError(f"eval_set[{i}] must be an (X, y) pair, got "
                                f"{type(pair).__name__}")
            what = f"eval_set[{i}]"
            evals.append((dask_est.training_frame(pair[0], self._encode_dask(pair[1], what), w,
                                                  what, weighted), f"validation_{i}"))
        if self.early_stopping_rounds is not None and not evals:
            raise ValueError("early_stopping_rounds needs a validation set: pass "
                             "eval_set=[(X_valid, y_valid)] to fit")
        self.n_features_in_ = len(X.columns)
        self.feature_names_in_ = np.asarray(list(X.columns), dtype=object)
        booster = train(frame, label=dask_est.LABEL,
                        weight=dask_est.WEIGHT if weighted else None, params=params,
                        num_boost_round=self.n_estimators, evals=evals or None,
                        early_stopping_rounds=self.early_stopping_rounds, verbose=self.verbose)
        # The label and weight columns were ours, not the user's: the model is then the same as
        # one fitted on in-memory arrays.
        booster.label_name = booster.weight_name = None
        return self._keep(booster)

    def _check_dask(self, X):
        """Fitted-ness and a Dask DataFrame X (its columns are checked by the booster)."""
        from .dask import estimators as dask_est
        check_is_fitted(self)
        return dask_est.check_features(X)

    def _eval_sets(self, eval_set, sample_weight_eval_set) -> list:
        """``eval_set`` as gbflow's evals: [((X, y[, w]), "validation_i"), ...], each checked."""
        if eval_set is None:
            if sample_weight_eval_set is not None:
                raise ValueError("sample_weight_eval_set was given without eval_set")
            return []
        if isinstance(eval_set, tuple) and len(eval_set) == 2 and not \
                isinstance(eval_set[0], tuple):
            raise TypeError("eval_set must be a list of (X, y) pairs, e.g. [(X_valid, y_valid)]")
        eval_set = list(eval_set)
        if sample_weight_eval_set is not None:
            sample_weight_eval_set = list(sample_weight_eval_set)
            if len(sample_weight_eval_set) != len(eval_set):
                raise ValueError(f"sample_weight_eval_set has {len(sample_weight_eval_set)} "
                                 f"entries but eval_set has {len(eval_set)}")
        evals = []
        for i, pair in enumerate(eval_set):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise TypeError(f"eval_set[{i}] must be an (X, y) pair, got "
                                f"{type(pair).__name__}")
            X_eval, y_eval = pair
            X_checked = validate_data(self, X_eval, reset=False, **_CHECK_X)
            y_eval = self._encode_target(y_eval, f"y of eval_set[{i}]")
            check_consistent_length(X_checked, y_eval)
            data = [self._booster_data(X_eval, X_checked), y_eval]
            if sample_weight_eval_set is not None and sample_weight_eval_set[i] is not None:
                w = np.asarray(sample_weight_eval_set[i], dtype=np.float64)
                if w.ndim != 1 or len(w) != X_checked.shape[0]:
                    raise ValueError(f"sample_weight_eval_set[{i}] must have shape "
                                     f"({X_checked.shape[0]},), got shape {w.shape}")
                data.append(w)
            evals.append((tuple(data), f"validation_{i}"))
        return evals

    def fit_transform(self, X, y, **fit_params):
        """``fit(X, y, **fit_params)`` then ``transform(X)`` (X with the prediction appended)."""
        return self.fit(X, y, **fit_params).transform(X)

    # -- fitted model --------------------------------------------------------------------------
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
    """Gradient-boosted trees for regression, scikit-learn style (gbflow's CPU engine).

    Parameters (XGBoost's names and meanings; checked at fit time, not here)
    ----------
    objective : str, default "reg:squarederror"
        The loss: "reg:squarederror", or "binary:logistic" to regress a target in [0, 1] (then
        ``predict`` gives values in (0, 1)). Classes belong to ``GBFlowClassifier``.
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
    eval_metric : str, list of str or None, default None
        Metrics for ``eval_set`` (default: the objective's); the last one drives early stopping.
    early_stopping_rounds : int or None, default None
        Stop when the last metric of the last ``eval_set`` entry has not improved for this many
        rounds; the model keeps the trees up to the best round.
    device : {"auto", "cpu", "cuda"}, default "auto"
    sparse_threshold : float, default 0.8
        Storage routing only; never changes the model.
    verbose : bool or int, default False
        Progress lines on stderr (True: about 20, an int: every that many rounds).

    Attributes
    ----------
    booster_ : gbflow.Booster
    n_features_in_ : int
    feature_names_in_ : (n_features_in_,) object ndarray, only when X was a DataFrame whose
        column names are all strings.
    feature_importances_ : (n_features_in_,) float64 ndarray, normalized "gain".
    evals_result_ : dict, ``{"validation_i": {metric: [value per round]}}``.
    best_iteration_ : int, 0-based best round (only when early stopping ran); the booster then
        holds ``best_iteration_ + 1`` rounds.
    best_score_ : float, the watched metric at ``best_iteration_`` (only with early stopping).
    """

    def __init__(self, *, objective="reg:squarederror", n_estimators=100, max_depth=6,
                 learning_rate=0.3, min_child_weight=1.0, gamma=0.0, reg_lambda=1.0,
                 reg_alpha=0.0, subsample=1.0, colsample_bytree=1.0, max_bin=256, random_state=0,
                 base_score=None, eval_metric=None, early_stopping_rounds=None, device="auto",
                 sparse_threshold=0.8, verbose=False):
        super().__init__(n_estimators=n_estimators, max_depth=max_depth,
                         learning_rate=learning_rate, min_child_weight=min_child_weight,
                         gamma=gamma, reg_lambda=reg_lambda, reg_alpha=reg_alpha,
                         subsample=subsample, colsample_bytree=colsample_bytree, max_bin=max_bin,
                         random_state=random_state, base_score=base_score,
                         eval_metric=eval_metric, early_stopping_rounds=early_stopping_rounds,
                         device=device, sparse_threshold=sparse_threshold, verbose=verbose)
        self.objective = objective

    def _encode_target(self, y, what):
        y = column_or_1d(y, warn=True)
        try:
            return np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{what} must be numeric, got dtype {y.dtype}") from e

    def fit(self, X, y, sample_weight=None, eval_set=None, sample_weight_eval_set=None):
        """Train the model.

        X : pandas DataFrame, array-like or scipy sparse matrix of shape (n_samples,
            n_features), or Dask DataFrame
            Numeric features; NaN (and an entry absent from a sparse matrix) means missing. With a Dask DataFrame, y, sample_weight and
            the eval_set entries are Dask collections partitioned like it, and training runs
            where the partitions live (``gbflow.train`` on Dask).
        y : array-like or Series of shape (n_samples,)
            Numeric target (in [0, 1] for objective "binary:logistic").
        sample_weight : array-like of shape (n_samples,), optional
            Non-negative row weights.
        eval_set : list of (X, y) pairs, optional
            Validation sets, evaluated after every round and named "validation_0",
            "validation_1", ...; the last one drives ``early_stopping_rounds``.
        sample_weight_eval_set : list of array-like or None, optional
            One weight array (or None) per ``eval_set`` entry.

        Returns self.
        """
        self._clear_fit()
        if self.objective == "multi:softprob":
            raise ValueError("GBFlowRegressor does not take objective 'multi:softprob'; use "
                             "GBFlowClassifier for class labels")
        if _is_dask(X):
            return self._fit_dask(X, y, sample_weight, eval_set, sample_weight_eval_set)
        X_checked, y = validate_data(self, X, y, reset=True, y_numeric=True, **_CHECK_X)
        return self._fit_booster(X, X_checked, np.asarray(y, dtype=np.float64), sample_weight,
                                 eval_set, sample_weight_eval_set,
                                 self._train_params(self.objective))

    def _dask_target(self, y):
        return y, self._train_params(self.objective)

    def _encode_dask(self, y, what):
        return y

    def predict(self, X):
        """Predicted targets: float64 ndarray of shape (n_samples,).

        X : pandas DataFrame or array-like of shape (n_samples, n_features_in_), the training
        features in training order (a DataFrame fitted with string column names must have the
        same names). Raises NotFittedError before fit. For a Dask DataFrame: a lazy float64 Dask
        Series named "prediction" with X's index and divisions.
        """
        if _is_dask(X):
            return self.booster_.predict(self._check_dask(X))
        _, data = self._check_X(X)
        return np.asarray(self.booster_.predict(data), dtype=np.float64)

    def transform(self, X):
        """X with the prediction appended as its last column.

        For a pandas DataFrame: a new DataFrame, X's columns and index plus a float64 column
        "prediction" (X itself is not changed). For arrays: ``np.column_stack((X, predict(X)))``,
        a float64 ndarray of shape (n_samples, n_features_in_ + 1). For a Dask DataFrame: a lazy
        Dask DataFrame, X's columns plus "prediction".
        """
        if _is_dask(X):
            return self.booster_.transform(self._check_dask(X), name=_PREDICTION_COLUMN)
        X_checked, data = self._check_X(X)
        if data is X:  # a frame whose names the booster knows: the booster's own transform
            return self.booster_.transform(X, name=_PREDICTION_COLUMN)
        prediction = np.asarray(self.booster_.predict(X_checked), dtype=np.float64)
        return _append_column(X, X_checked, prediction)


class GBFlowClassifier(ClassifierMixin, _GBFlowModel):
    """Gradient-boosted trees for classification, scikit-learn style (gbflow's CPU engine).

    Any labels work (strings, ints, bools...): ``classes_`` is ``np.unique(y)`` and the model is
    trained on their positions 0..k-1, with objective "binary:logistic" for two classes and
    "multi:softprob" (``num_class=k``) for more. ``predict`` returns the original labels.

    Parameters: as ``GBFlowRegressor`` (without ``objective``, which follows from the classes).
    For two classes ``base_score`` is a probability of ``classes_[1]``; ``eval_metric`` must fit
    the objective ("logloss", "auc", "rmse" for two classes; "mlogloss" for more).

    Attributes: as ``GBFlowRegressor``, plus ``classes_`` ((n_classes,) ndarray of the sorted
    labels) and ``n_classes_`` (int).
    """

    def _encode_target(self, y, what):
        """Labels -> float64 positions in ``classes_``; a label not in ``classes_`` is an error."""
        y = column_or_1d(y, warn=True)
        classes = self.classes_
        try:
            index = np.clip(np.searchsorted(classes, y), 0, len(classes) - 1)
            known = np.asarray(classes[index] == y, dtype=bool)
        except TypeError:  # labels of a type that cannot be compared with the classes
            index, known = None, np.zeros(len(y), dtype=bool)
        if known.shape != y.shape:
            known = np.zeros(len(y), dtype=bool)
        if not known.all():
            unseen = list(dict.fromkeys(y[~known].tolist()))
            raise ValueError(f"{what} has label(s) {unseen[:5]} that are not among the classes "
                             f"seen in the training y: {classes.tolist()}")
        return index.astype(np.float64)

    def fit(self, X, y, sample_weight=None, eval_set=None, sample_weight_eval_set=None):
        """Train the model.

        X : pandas DataFrame, array-like or scipy sparse matrix of shape (n_samples,
            n_features), or Dask DataFrame
            Numeric features; NaN (and an entry absent from a sparse matrix) means missing. With a Dask DataFrame, y, sample_weight and
            the eval_set entries are Dask collections partitioned like it, and training runs
            where the partitions live (``gbflow.train`` on Dask).
        y : array-like or Series of shape (n_samples,)
            Class labels of any sortable type; at least two distinct classes.
        sample_weight : array-like of shape (n_samples,), optional
            Non-negative row weights.
        eval_set : list of (X, y) pairs, optional
            Validation sets (labels among the training classes), evaluated after every round and
            named "validation_0", "validation_1", ...; the last one drives
            ``early_stopping_rounds``.
        sample_weight_eval_set : list of array-like or None, optional
            One weight array (or None) per ``eval_set`` entry.

        Returns self.
        """
        self._clear_fit()
        if _is_dask(X):
            return self._fit_dask(X, y, sample_weight, eval_set, sample_weight_eval_set)
        X_checked, y = validate_data(self, X, y, reset=True, **_CHECK_X)
        check_classification_targets(y)
        classes, y_encoded = np.unique(y, return_inverse=True)
        params = self._set_classes(classes)
        return self._fit_booster(X, X_checked, y_encoded.astype(np.float64), sample_weight,
                                 eval_set, sample_weight_eval_set, params)

    def _set_classes(self, classes) -> dict:
        """Record the classes; -> the training params (binary or multi-class)."""
        if len(classes) < 2:
            raise ValueError(f"GBFlowClassifier needs at least 2 classes in y, but y has only "
                             f"{len(classes)} class: {classes.tolist()}")
        self.classes_ = classes
        self.n_classes_ = len(classes)
        if self.n_classes_ == 2:
            return self._train_params("binary:logistic")
        return self._train_params("multi:softprob", num_class=self.n_classes_)

    def _dask_target(self, y):
        from .dask import estimators as dask_est
        params = self._set_classes(dask_est.classes(y))
        return dask_est.encode(y, self.classes_, "fit"), params

    def _encode_dask(self, y, what):
        from .dask import estimators as dask_est
        return dask_est.encode(y, self.classes_, what)

    def predict_proba(self, X):
        """Class probabilities: float64 ndarray of shape (n_samples, n_classes_), columns in the
        order of ``classes_``, rows summing to 1 (two classes: ``[1 - p, p]`` with p the
        probability of ``classes_[1]``). Raises NotFittedError before fit. For a Dask DataFrame:
        a lazy Dask DataFrame with X's index, one column per class named ``str(class)``."""
        if _is_dask(X):
            from .dask import estimators as dask_est
            return dask_est.probabilities(self.booster_.predict(self._check_dask(X)),
                                          self.classes_)
        _, data = self._check_X(X)
        p = np.asarray(self.booster_.predict(data), dtype=np.float64)
        if p.ndim == 1:
            return np.column_stack((1.0 - p, p))
        return p

    def predict(self, X):
        """Predicted labels: ndarray of shape (n_samples,) with ``classes_``'s dtype, the most
        probable class of each row (two classes: ``classes_[1]`` when its probability is > 0.5).
        Raises NotFittedError before fit. For a Dask DataFrame: a lazy Dask Series named
        "prediction" with X's index and divisions."""
        if _is_dask(X):
            from .dask import estimators as dask_est
            return dask_est.labels(self.booster_.predict(self._check_dask(X)), self.classes_)
        _, data = self._check_X(X)
        return self._labels(data)

    def _labels(self, data):
        p = np.asarray(self.booster_.predict(data), dtype=np.float64)
        index = (p > 0.5).astype(np.intp) if p.ndim == 1 else np.argmax(p, axis=1)
        return self.classes_[index]

    def transform(self, X):
        """X with the predicted label (``predict(X)``) appended as its last column.

        For a pandas DataFrame: a new DataFrame, X's columns and index plus a column
        "prediction" of ``classes_``'s dtype (X itself is not changed). For arrays:
        ``np.column_stack((X, predict(X)))`` of shape (n_samples, n_features_in_ + 1): numeric
        (NumPy's common dtype) for numeric labels, an object array (features as numbers, then
        the labels) for others, e.g. strings. For a Dask DataFrame: a lazy Dask DataFrame, X's
        columns plus "prediction".
        """
        if _is_dask(X):
            if _PREDICTION_COLUMN in X.columns:
                raise ValueError(f"transform: X already has a column {_PREDICTION_COLUMN!r}")
            return X.assign(**{_PREDICTION_COLUMN: self.predict(X)})
        X_checked, data = self._check_X(X)
        return _append_column(X, X_checked, self._labels(data))
