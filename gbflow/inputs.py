"""User inputs -> validated training or prediction arrays, with errors that name what is wrong."""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _dtypes
from .backend import backend_for, frames, to_host
from .categories import encode_values, typed_categorical
from .csr import CSR

_SHOW = 10  # how many names an error lists before "..."


def _names(items) -> str:
    items = list(items)
    shown = ", ".join(repr(i) for i in items[:_SHOW])
    return shown + (f", ... ({len(items)} in all)" if len(items) > _SHOW else "")


@dataclasses.dataclass
class DataSet:
    """Features and targets of one table, checked: NumPy arrays for pandas/NumPy input, CuPy
    arrays on the GPU for cuDF/CuPy input (they never visit the host).

    X: (n, F) float32, NaN = missing. label: (n,) float64 or None. weight: (n,) float64 or None.
    feature_names: F names. label_name / weight_name: the column names they came from, or None.
    categories: {name: sorted category values (host array)} of the categorical features, whose
    columns of X hold positions in these lists (``gbflow.categories`` unifies them over parts).
    """

    X: np.ndarray
    label: np.ndarray | None
    weight: np.ndarray | None
    feature_names: list[str]
    label_name: str | None = None
    weight_name: str | None = None
    categories: dict = dataclasses.field(default_factory=dict)
    # the categorical features whose values are their categories (feature_types "c" on numeric
    # columns; ``categories.encode_values``), not category columns
    by_value: tuple = ()
    # XGBoost's base_margin: each row's starting margin, (n,) or (n, n_groups) float64 where X
    # lives, in place of the model's base margin; base_margin_name: its column, or None
    base_margin: np.ndarray | None = None
    base_margin_name: str | None = None
    # XGBoost's qid: each row's query (learning to rank), (n,) float64 of whole numbers where X
    # lives, or None; qid_name: its column, or None
    qid: np.ndarray | None = None
    qid_name: str | None = None
    # the feature names are gbflow's f0, f1, ... of an array, not a frame's columns
    made_up_names: bool = False

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])


def is_dask_collection(data) -> bool:
    """True for Dask (and dask_cudf) collections, found without importing dask."""
    return type(data).__module__.split(".")[0] in ("dask", "dask_cudf", "dask_expr")


def eval_pair(entry, index: int) -> tuple[object, str, str]:
    """One entry of ``evals``: checks it is a (data, name) pair with a string name and returns
    (data, name, how errors call it)."""
    if not (isinstance(entry, (tuple, list)) and len(entry) == 2):
        raise TypeError(f"evals[{index}] must be a (data, name) pair, got {type(entry).__name__}")
    data, name = entry
    if not isinstance(name, str):
        raise TypeError(f"evals[{index}] must be a (data, name) pair with a string name, "
                        f"got a {type(name).__name__} as name")
    return data, name, f"evals[{index}] ({name!r})"


def check_container(data, what: str, features: list | None = None) -> None:
    """Refuse anything that is not a pandas DataFrame or a 2-D numeric array, before any work.
    features: the model's feature names, when other columns may ride along (only these may
    not appear twice)."""
    module = type(data).__module__.split(".")[0]
    if is_dask_collection(data):
        raise TypeError(f"{what} is a Dask collection, but the training data is not: give Dask "
                        f"DataFrames for both (gbflow.train then trains on the partitions), or "
                        f"compute() this one to pandas")
    if frames.is_frame(data):
        frames.check_unique_columns(data, among=features)
        return
    if frames.is_sparse_matrix(data):
        if len(data.shape) != 2:
            raise ValueError(f"{what} must be 2-D (rows x features), got a sparse "
                             f"{type(data).__name__} of shape {data.shape}")
        return
    if frames.is_device_array(data):
        if data.ndim != 2:
            raise ValueError(f"{what} must be 2-D (rows x features), got a {type(data).__name__} "
                             f"of shape {data.shape}")
        return
    if module == "cudf":
        raise TypeError(f"{what} must be a DataFrame or a 2-D array, got a cuDF "
                        f"{type(data).__name__}; use .to_frame() for a single feature")
    if data is None or isinstance(data, (str, bytes, dict)):
        raise TypeError(f"{what} must be a pandas DataFrame or a 2-D array, got "
                        f"{type(data).__name__}")
    try:
        arr = np.asarray(data)
    except Exception as e:  # e.g. ragged lists
        raise TypeError(f"{what} must be a pandas DataFrame or a 2-D array, got "
                        f"{type(data).__name__} (ragged rows?)") from e
    if arr.ndim != 2:
        hint = "; use .to_frame() for a single feature" if type(data).__name__ == "Series" else ""
        raise ValueError(f"{what} must be 2-D (rows x features), got a {type(data).__name__} "
                         f"of shape {arr.shape}{hint}")


def _target(data, value, role: str, what: str, n_rows: int):
    """Resolve a label/weight given as a column name or an array into (values, column name)."""
    if value is None:
        return None, None
    if isinstance(value, str):
        if not frames.is_frame(data):
            raise ValueError(f"{role}={value!r} names a column, but {what} is an array without "
                             f"column names; pass the {role} as an array")
        columns = frames.column_names(data)
        if value not in columns:
            raise KeyError(f"{role} column {value!r} is not in {what}; its columns are "
                           f"{_names(columns)}")
        # object and category columns may hold numbers (then they are used); dates, text are not
        bad = frames.non_numeric_columns(data, [value])
        dtype = _dtype_of(bad[0]) if bad else None
        try:
            if dtype not in (None, "object", "category"):
                raise TypeError(dtype)
            return frames.column_values(data, value), value
        except (TypeError, ValueError) as e:
            shown = dtype or data[{str(c): c for c in data.columns}[value]].dtype
            raise TypeError(f"{role} column {value!r} of {what} is not numeric ({shown}); "
                            f"encode it as numbers first") from e
    if np.ndim(value) == 0:  # a scalar: perhaps a non-string column name
        hint = ""
        if frames.is_frame(data) and str(value) in frames.column_names(data):
            hint = f"; to use the column {value!r}, pass {role}={str(value)!r}"
        raise TypeError(f"{role} must be a column name (str) or an array with one value per row, "
                        f"got {type(value).__name__} {value!r}{hint}")
    desc = f"{role} of {what}"
    try:
        values = frames.as_vector(value, desc)
    except (TypeError, ValueError) as e:
        if "one-dimensional" in str(e):
            raise
        message = str(e) if str(e).startswith(desc) else f"{desc} must be numeric ({e})"
        raise TypeError(message) from e
    if len(values) != n_rows:
        raise ValueError(f"{role} has {len(values)} values but {what} has {n_rows} rows")
    return values, None


def _describe(role: str, column: str | None, what: str) -> str:
    return f"{role} column {column!r} of {what}" if column is not None else f"{role} of {what}"


def _positions(where: np.ndarray) -> str:
    shown = ", ".join(str(i) for i in where[:5])
    return f"row position{'s' if len(where) > 1 else ''} {shown}" + \
        (", ..." if len(where) > 5 else "")


def check_target(values, role: str, what: str, column: str | None = None) -> None:
    """ValueError naming the column and rows of labels or weights (``role``) that gbflow cannot
    train on: NaN, +-inf, magnitudes beyond ``_dtypes.TARGET_LIMIT``, and negative weights.

    values: (n,) float64 on the host or the device; only the bad rows' positions are copied."""
    xp = backend_for(values).xp
    finite = xp.isfinite(values)
    checks = [(~finite, None), (finite & (xp.abs(values) > _dtypes.TARGET_LIMIT), "large")]
    if role == "weight":
        checks.append((values < 0, "negative"))
    for bad, kind in checks:
        if not bool(bad.any()):
            continue
        where = np.flatnonzero(to_host(bad))
        if kind == "negative":
            raise ValueError(f"{_describe(role, column, what)} has {len(where)} negative "
                             f"value(s), at {_positions(where)}; weights must be >= 0")
        if kind == "large":
            shown = float(to_host(values[int(where[0])]))
            raise ValueError(f"{_describe(role, column, what)} has {len(where)} value(s) beyond "
                             f"+-2**62 (about 4.6e18; {shown:g} at {_positions(where)}): "
                             f"gbflow's gradients are float32 and its sums fixed point, which "
                             f"hold {role}s up to that size; rescale the {role}")
        n_nan = int(np.isnan(to_host(values[xp.asarray(where)])).sum())
        n_inf = len(where) - n_nan
        kinds = " and ".join(part for part in (f"{n_nan} NaN" if n_nan else "",
                                               f"{n_inf} infinite" if n_inf else "") if part)
        raise ValueError(f"{_describe(role, column, what)} has {kinds} value(s), at "
                         f"{_positions(where)}; {role}s must be finite numbers")


def _dtype_of(entry: str) -> str:
    # frames.non_numeric_columns gives "name (dtype)"; dtypes never contain " (".
    return entry.rpartition(" (")[2][:-1]


def _column_list(entries: list[str]) -> str:
    """"name (dtype)" strings -> "'name' (dtype), ..." with at most _SHOW shown."""
    shown = ", ".join(f"{e.rpartition(' (')[0]!r} ({_dtype_of(e)})" for e in entries[:_SHOW])
    return shown + (f", ... ({len(entries)} in all)" if len(entries) > _SHOW else "")


def check_features(X, feature_names: list[str], what: str) -> None:
    """Refuse +-inf in features (NaN is fine: it is a missing value), naming the columns.

    X: (n, F) float32 array, or a ``CSR`` (its stored values are checked)."""
    if isinstance(X, CSR):
        infinite = np.isinf(X.data)
        columns = np.unique(to_host(X.indices[infinite])) if bool(infinite.any()) else []
    else:
        backend = backend_for(X)
        # the columns are looked for only when there is an infinity
        columns = np.flatnonzero(to_host(backend.xp.isinf(X).any(axis=0))) \
            if backend.kernels.any_infinite(X) else []
    if len(columns):
        raise ValueError(f"{what} has infinite values (+-inf, or beyond float32's range of about "
                         f"3.4e38) in feature column(s) {_names(feature_names[j] for j in columns)}"
                         f"; replace them, for example with NaN, which means missing")


def base_margin_values(data, value, what: str, n_rows: int):
    """(values, column name) of a ``base_margin``: a column name, an array of one margin per
    row, or a (n, n_groups) array (one per row and output group); finite values only, checked
    (ValueError naming the column and rows). (None, None) for None."""
    if value is None or isinstance(value, str) or np.ndim(value) != 2 or \
            np.shape(value)[1] == 1:
        values, column = _target(data, value, "base_margin", what, n_rows)
    else:
        values, column = frames.as_matrix(value, f"base_margin of {what}"), None
        if len(values) != n_rows:
            raise ValueError(f"base_margin has {len(values)} rows but {what} has {n_rows}")
    if values is not None:
        check_target(values.reshape(-1) if values.ndim == 2 else values, "base_margin", what,
                     column)
    return values, column


def check_qid(values, what: str, column: str | None = None) -> None:
    """ValueError naming the rows of query ids that are not whole numbers below 2**53 in
    magnitude (NaN and infinities included). values: (n,) float64, host or device."""
    xp = backend_for(values).xp
    bad = ~(xp.isfinite(values) & (values == xp.floor(values)) & (xp.abs(values) < 2.0**53))
    if bool(bad.any()):
        where = np.flatnonzero(to_host(bad))
        shown = float(to_host(values[int(where[0])]))
        raise ValueError(f"{_describe('qid', column, what)} has {len(where)} value(s) that are "
                         f"not whole numbers ({shown:g} at {_positions(where)}); query ids must "
                         f"be integers")


def load(data, label=None, weight=None, what: str = "data", feature_names=None,
         label_name=None, weight_name=None, allow_empty: bool = False,
         missing: float | None = None, base_margin=None, qid=None,
         feature_types: tuple | None = None) -> DataSet:
    """Validate ``data`` and its label/weight and return them as arrays where the data lives.

    label/weight: a column name (not a feature then) or an array of one value per row.
    base_margin: None, a column name (not a feature then) or an array (``base_margin_values``).
    qid: None, or each row's query id (ranking): a column name (not a feature then) or an array.
    feature_names: when given (evaluation data), the columns must be exactly these features
    (plus the label/weight columns). label_name/weight_name: training's column names.
    allow_empty: accept 0 rows (a Dask partition, or a Dask DataFrame's meta).
    missing: a feature value read as missing (XGBoost's; None: only NaN and nulls).
    feature_types: XGBoost's, one per feature (``categories.parse_feature_types``): numeric
    columns marked "c" become categorical features, their values the categories.
    """
    check_container(data, what)
    n_rows = frames.n_rows(data)
    label_values, label_col = _target(data, label, "label", what, n_rows)
    weight_values, weight_col = _target(data, weight, "weight", what, n_rows)
    if label_col is not None and label_col == weight_col:
        raise ValueError(f"label and weight name the same column {label_col!r}")
    margin_values, margin_col = base_margin_values(data, base_margin, what, n_rows)
    if margin_col is not None and margin_col in (label_col, weight_col):
        raise ValueError(f"base_margin names the column {margin_col!r}, which is the "
                         f"{'label' if margin_col == label_col else 'weight'}")
    qid_values, qid_col = _target(data, qid, "qid", what, n_rows)
    if qid_col is not None and qid_col in (label_col, weight_col, margin_col):
        raise ValueError(f"qid names the column {qid_col!r}, which is also the label, weight "
                         f"or base_margin")
    if qid_values is not None:
        check_qid(qid_values, what, qid_col)
    columns = frames.column_names(data)
    targets = {label_col, weight_col, label_name, weight_name, margin_col, qid_col} - {None}
    if feature_names is None:
        features = [c for c in columns if c not in targets]
    else:
        features = list(feature_names)
        check_columns(data, features, targets, what)
    if n_rows == 0 and not allow_empty:
        raise ValueError(f"{what} has no rows")
    if not features:
        used = [c for c in columns if c in targets]
        raise ValueError(f"{what} has no feature columns" +
                         (f" (its only column(s), {_names(used)}, are label/weight)"
                          if used else ""))
    check_feature_dtypes(data, features, what)
    for values, role, column in ((label_values, "label", label_col),
                                 (weight_values, "weight", weight_col)):
        if values is not None:
            check_target(values, role, what, column)
    categories = frames.observed_categories(data, frames.category_columns(data, features))
    typed = typed_columns(feature_types, features, categories, what)
    X = frames.feature_matrix(data, features, categories)
    X = frames.mark_missing(X, missing, [j for j, n in enumerate(features) if n in categories])
    if typed:
        check_container_of_typed(X, what)
        X, found = encode_values(X, [features.index(n) for n in typed], typed, what,
                                 copy=not frames.is_frame(data))
        categories.update(found)
    check_features(X, features, what)
    return DataSet(X=X, label=label_values, weight=weight_values, feature_names=features,
                   label_name=label_col, weight_name=weight_col, categories=categories,
                   by_value=tuple(typed),
                   base_margin=margin_values, base_margin_name=margin_col, qid=qid_values,
                   qid_name=qid_col,
                   made_up_names=feature_names is None and not frames.is_frame(data))


def check_feature_dtypes(data, features: list[str], what: str) -> None:
    """TypeError naming the columns whose dtype cannot be a feature: anything but numbers,
    booleans and ``category`` (strings are told to become categories)."""
    bad = frames.non_numeric_columns(data, features)
    if not bad:
        return
    if not frames.is_frame(data):
        raise TypeError(f"{what} is an array of dtype {_dtype_of(bad[0])}; gbflow takes "
                        f"numeric or boolean features only")
    texts = [b.rpartition(" (")[0] for b in bad if _dtype_of(b) in ("object", "string", "str")]
    hint = (f"; string columns become categorical features as category dtype: "
            f"df[{texts[0]!r}] = df[{texts[0]!r}].astype('category')" if texts else "")
    raise TypeError(f"{what} has non-numeric feature column(s) {_column_list(bad)}; gbflow "
                    f"takes numeric, boolean and category columns{hint}; or encode or drop them")


def typed_columns(feature_types, features: list[str], categories: dict, what: str) -> list[str]:
    """The numeric features ``feature_types`` marks "c" (category columns are categorical
    anyway); TypeError naming a category column it marks numeric."""
    typed = typed_categorical(feature_types, features, what)
    if feature_types is not None:
        numeric = [n for n, kind in zip(features, feature_types) if kind != "c" and
                   n in categories]
        if numeric:
            raise TypeError(f"{what}: feature_types marks the category column(s) "
                            f"{_names(numeric)} as numeric; mark them 'c', or give them a "
                            f"numeric dtype")
    return [n for n in typed if n not in categories]


def check_container_of_typed(X, what: str) -> None:
    """TypeError for a sparse matrix with features marked categorical: categorical features
    are stored dense, so they come as dense columns."""
    if isinstance(X, CSR):
        raise TypeError(f"{what} is a sparse matrix, and feature_types marks categorical "
                        f"features ('c'): give them as a dense array or a DataFrame")


def check_categorical(data, features: list[str], categorical: list[str], what: str,
                      enabled: bool = True) -> None:
    """TypeError unless exactly the ``categorical`` features are ``category`` columns of
    ``data`` (a model's categorical features in data to predict), or, with ``enabled`` False
    (XGBoost's enable_categorical=False), any feature is one."""
    given = frames.category_columns(data, features)
    if not enabled and given:
        raise TypeError(f"{what} has category column(s) {_names(given)} but "
                        f"enable_categorical=False; leave it True (the default) to train on "
                        f"them as categorical features, or encode them as numbers")
    lacking = [f for f in categorical if f not in given]
    extra = [f for f in given if f not in set(categorical)]
    if (lacking or extra) and frames.is_frame(data):
        problems = ([f"column(s) {_names(lacking)} were categorical in training but are not "
                     f"category dtype here"] if lacking else []) + \
            ([f"column(s) {_names(extra)} are category dtype but were numeric in training"]
             if extra else [])
        raise TypeError(f"{what}: " + " and ".join(problems) + "; give each feature the dtype "
                        "it had in training (.astype('category') for categorical ones)")
    if categorical and not frames.is_frame(data):
        raise TypeError(f"{what} is a {type(data).__name__}, but the model has categorical "
                        f"features ({_names(categorical)}): give a DataFrame with them as "
                        f"category columns (categories are matched by value)")


def check_columns(data, feature_names: list[str], allowed_extra, what: str) -> None:
    """Frames must hold every training feature; other columns only if in ``allowed_extra``."""
    if not frames.is_frame(data):
        width = data.shape[1] if hasattr(data, "shape") else np.shape(data)[1]
        if width != len(feature_names):
            raise ValueError(f"{what} has {width} columns but the model was trained on "
                             f"{len(feature_names)} features")
        return
    columns = frames.column_names(data)
    missing = [f for f in feature_names if f not in columns]
    known = set(feature_names) | set(allowed_extra)
    extra = [c for c in columns if c not in known]
    problems = []
    if missing:
        problems.append(f"lacks training feature column(s) {_names(missing)}")
    if extra:
        problems.append(f"has column(s) {_names(extra)} that were not features in training")
    if problems:
        hint = " (transform() keeps extra columns as passengers)" \
            if extra and what.startswith("prediction") else ""
        raise ValueError(f"{what} " + " and ".join(problems) + "; columns must match training"
                         + hint)
