"""How the scikit-learn estimators read their data: in-memory adapters (and the Dask one's door)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import expit, softmax
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_consistent_length, column_or_1d

try:
    from sklearn.utils.validation import validate_data
except ImportError as e:  # scikit-learn < 1.6
    raise ImportError("gbflow's scikit-learn estimators need scikit-learn >= 1.6") from e

from .inputs import check_feature_dtypes, is_dask_collection

# How every feature matrix is checked: dense or CSR, numeric, NaN allowed (a missing value), at
# least one row and one feature. dtype "numeric" keeps float32/float64/int/bool arrays as they are
# (gbflow converts them to float32 itself) and converts object arrays to float64.
_CHECK_X = dict(accept_sparse="csr", dtype="numeric", ensure_all_finite="allow-nan",
                ensure_min_samples=1, ensure_min_features=1)

PREDICTION_COLUMN = "prediction"
# Objectives whose predictions are not probabilities: the classifier's come from the margins
# (XGBoost's softmax for multi:softmax, the sigmoid of binary:logitraw's logit).
FROM_MARGINS = ("multi:softmax", "binary:logitraw")


def _per_entry(values, n: int, name: str) -> list:
    """One value per eval_set entry: ``values`` as a list, or n Nones."""
    values = [None] * n if values is None else list(values)
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries but eval_set has {n}")
    return values


def eval_sets(adapter, eval_set, weights, classes, weighted: bool, qids=None,
              base_margins=None) -> list:
    """``eval_set`` as gbflow's evals: [(data, "validation_i"), ...], each entry checked and
    prepared by the adapter. weights, qids, base_margins: per entry (sample_weight_eval_set,
    the ranker's eval_qid, base_margin_eval_set) or None; weighted: the training has weights."""
    if eval_set is None:
        for values, name in ((weights, "sample_weight_eval_set"), (qids, "eval_qid"),
                             (base_margins, "base_margin_eval_set")):
            if values is not None:
                raise ValueError(f"{name} was given without eval_set")
        return []
    if isinstance(eval_set, tuple) and len(eval_set) == 2 and not \
            isinstance(eval_set[0], tuple):
        raise TypeError("eval_set must be a list of (X, y) pairs, e.g. [(X_valid, y_valid)]")
    eval_set = list(eval_set)
    n = len(eval_set)
    weights = _per_entry(weights, n, "sample_weight_eval_set")
    extras = list(zip(_per_entry(qids, n, "eval_qid"),
                      _per_entry(base_margins, n, "base_margin_eval_set")))
    evals = []
    for i, (pair, weight, extra) in enumerate(zip(eval_set, weights, extras)):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise TypeError(f"eval_set[{i}] must be an (X, y) pair, got {type(pair).__name__}")
        if extra[1] is not None and is_dask_collection(pair[0]):
            raise ValueError("base_margin_eval_set takes in-memory data; on Dask give "
                             "gbflow.train a base_margin column")
        data = adapter.eval_data(*pair, weight, i, classes, weighted)
        if any(e is not None for e in extra):  # (X, y, weight, qid, base_margin) tuples
            data = (*data, *(None,) * (3 - len(data)), *extra)
        evals.append((data, f"validation_{i}"))
    return evals


def adapter_for(X, estimator):
    """The adapter for X's kind: ``gbflow.dask.estimators.DaskAdapter`` for Dask collections
    (imported only then: dask is optional), ``_InMemoryAdapter`` for anything else."""
    if is_dask_collection(X):
        from .dask.estimators import DaskAdapter
        return DaskAdapter(estimator, PREDICTION_COLUMN, FROM_MARGINS, probabilities_of_margins)
    return _InMemoryAdapter(estimator)


def _weights(weight, n_rows: int, what: str, match: str = "") -> np.ndarray:
    """Row weights as a float64 (n_rows,) array; ValueError naming ``what`` otherwise."""
    weight = np.asarray(weight, dtype=np.float64)
    if weight.ndim != 1 or len(weight) != n_rows:
        raise ValueError(f"{what} must have shape ({n_rows},){match}, got shape {weight.shape}")
    return weight


def probabilities_of_margins(margin: np.ndarray) -> np.ndarray:
    """``FROM_MARGINS`` objectives' class probabilities: each row's softmax of (n, k) margins,
    or the sigmoid of (n,) ones (the second class's); float64, a new array."""
    return softmax(margin, axis=1) if margin.ndim == 2 else expit(margin)


def _string_names(X):
    """A DataFrame whose column names are not all strings as a shallow copy whose names are
    ``str(name)``, XGBoost's feature names ("0", "1", ... for ``pd.DataFrame(array)``): so it
    reaches gbflow as a frame (names checked, category columns categorical) and scikit-learn
    records and checks the names. Anything else as it is."""
    if not isinstance(X, pd.DataFrame) or all(isinstance(c, str) for c in X.columns):
        return X
    names = [str(c) for c in X.columns]
    if len(set(names)) < len(names):
        repeated = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"X has several columns named {repeated[:5]} as strings: gbflow names "
                         f"a feature str(column name), as XGBoost does; rename them")
    X = X.copy(deep=False)
    X.columns = names
    return X


def _labels(p: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Probabilities (n,) of ``classes[1]`` or (n, k) per class -> (n,) most probable labels."""
    return classes[(p > 0.5).astype(np.intp) if p.ndim == 1 else np.argmax(p, axis=1)]


def _check_columns(X) -> None:
    """gbflow's own dtype check of a frame's columns first (scikit-learn's errors for a string or
    datetime column do not name it): TypeError naming them."""
    if isinstance(X, pd.DataFrame):
        check_feature_dtypes(X, [str(c) for c in X.columns], "X")


class _InMemoryAdapter:
    """pandas DataFrames, NumPy arrays and scipy sparse matrices (taken as CSR, absent entries
    being missing values), checked by scikit-learn's ``validate_data``. A DataFrame reaches
    gbflow as a frame named ``str(name)`` (``_string_names``), so the booster knows the feature
    names and the category columns; anything else as the checked array (features f0, f1, ...):
    float32 features either way, as in ``gbflow.train``. ``gbflow.dask.estimators.DaskAdapter``
    offers the same methods; ``classes`` is None for a numeric target (the regressor), else the
    sorted class labels.
    """

    def __init__(self, estimator):
        self.estimator = estimator

    def _data(self, X, X_checked):
        """What gbflow gets: a frame (named by ``_string_names``) as it is when fitted with
        feature names (which ``validate_data`` has checked X has, in order), else the checked
        array."""
        if isinstance(X, pd.DataFrame) and hasattr(self.estimator, "feature_names_in_"):
            return X
        return X_checked

    def _checked(self, X):
        """X checked against the training features -> (checked array, gbflow data). A model
        fitted without names leaves a frame's non-string names unread, as scikit-learn does."""
        if hasattr(self.estimator, "feature_names_in_"):
            X = _string_names(X)
        _check_columns(X)
        X_checked = validate_data(self.estimator, X, reset=False, **_CHECK_X)
        return X_checked, self._data(X, X_checked)

    # -- fit -------------------------------------------------------------------------------------
    def fit_data(self, X, y, y_numeric: bool = False):
        """X and y checked for training (this records ``n_features_in_`` and, for string column
        names, ``feature_names_in_``) -> (gbflow data, (n,) y)."""
        X = _string_names(X)
        _check_columns(X)
        X_checked, y = validate_data(self.estimator, X, y, reset=True, y_numeric=y_numeric,
                                     **_CHECK_X)
        return self._data(X, X_checked), y

    def classes(self, y) -> np.ndarray:
        """The sorted distinct labels of a classification target."""
        missing = pd.isna(np.asarray(y).ravel())  # (no object copy of a numeric y)
        if missing.any():  # (sorting strings and None raised a TypeError deep in scikit-learn)
            raise ValueError(f"y has {int(missing.sum())} missing label(s) (None or NaN), e.g. at "
                             f"row position {int(np.flatnonzero(missing)[0])}: give every row a "
                             f"class")
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
        if any(is_dask_collection(v) for v in (X, y, weight)):  # would be gathered and its
            # columns matched by position: gbflow.train refuses mixed inputs too
            raise TypeError(f"eval_set[{index}] is a Dask collection but the training X is "
                            f"in memory: give both in memory, or both as Dask collections")
        X_checked, data = self._checked(X)
        y = self.encode(y, classes, f"eval_set[{index}]")
        check_consistent_length(X_checked, y)
        data = (data, y)
        if weight is None:
            return data
        return data + (_weights(weight, X_checked.shape[0], f"sample_weight_eval_set[{index}]"),)

    def trained(self, booster):
        return booster

    # -- fitted model ------------------------------------------------------------------------------
    def predict(self, X, **options) -> np.ndarray:
        """The booster's prediction as an array: float64 (n,), or (n, n_classes) for
        multi:softprob, (n, k) for k quantiles; ``options`` are ``Booster.predict``'s (int32
        leaves for pred_leaf)."""
        values = np.asarray(self.estimator.booster_.predict(self._checked(X)[1], **options))
        return values if options.get("pred_leaf") else values.astype(np.float64, copy=False)

    def labels(self, X, classes, **options) -> np.ndarray:
        """The most probable class of each row (binary:hinge's prediction: its 0 or 1)."""
        if self.estimator.booster_.params.objective in FROM_MARGINS:
            return _labels(self.proba(X, classes, **options), classes)
        return _labels(self.predict(X, **options), classes)

    def proba(self, X, classes, **options) -> np.ndarray:
        """(n, n_classes) float64; for two classes ``[1 - p, p]``. For ``FROM_MARGINS``
        objectives: multi:softmax's the softmax of the margins (XGBoost's ``predict_proba``),
        binary:logitraw's p the sigmoid of its margin (XGBoost's gives the margin itself)."""
        if self.estimator.booster_.params.objective in FROM_MARGINS:
            p = probabilities_of_margins(self.predict(X, output_margin=True, **options))
        else:
            p = self.predict(X, **options)
        return np.column_stack((1.0 - p, p)) if p.ndim == 1 else p

    def transform(self, X, classes):
        """X with the prediction (``classes`` None) or the predicted label appended: a new frame
        with a "prediction" column for a DataFrame, else a column of the checked array (k
        columns, "prediction_0", ..., for k quantiles)."""
        X_checked, data = self._checked(X)
        booster = self.estimator.booster_
        if classes is None and data is X:  # a frame whose names the booster knows: its transform
            return booster.transform(X, name=PREDICTION_COLUMN)
        values = self.labels(X, classes) if classes is not None else \
            np.asarray(booster.predict(data), dtype=np.float64)
        # several quantiles' predictions are several columns ("prediction_0", ...)
        values = values.reshape(len(values), -1)
        if isinstance(X, pd.DataFrame):
            names = [PREDICTION_COLUMN] if values.shape[1] == 1 else \
                booster.output_columns(PREDICTION_COLUMN)
            clash = [name for name in names if name in X.columns]
            if clash:
                raise ValueError(f"transform: X already has a column {clash[0]!r}")
            out = X.copy()
            for j, name in enumerate(names):
                out[name] = values[:, j]
            return out
        if hasattr(X_checked, "tocsr"):  # scipy sparse: the prediction becomes one more column
            if values.dtype.kind not in "biuf":
                raise TypeError("transform: a sparse X cannot hold non-numeric class labels; use "
                                "predict()")
            import scipy.sparse
            return scipy.sparse.hstack([X_checked, scipy.sparse.csr_matrix(values)],
                                       format="csr")
        if values.dtype.kind not in "biuf":  # e.g. string labels: keep the features as numbers
            X_checked = X_checked.astype(object)
            values = values.astype(object)
        return np.column_stack((X_checked, values))
