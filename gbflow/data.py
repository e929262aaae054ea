"""User inputs -> validated training or prediction arrays, with errors that name what is wrong."""
from __future__ import annotations

import dataclasses

import numpy as np

from .backend import frames

_SHOW = 10  # how many names an error lists before "..."


def _names(items) -> str:
    items = list(items)
    shown = ", ".join(repr(i) for i in items[:_SHOW])
    return shown + (f", ... ({len(items)} in all)" if len(items) > _SHOW else "")


@dataclasses.dataclass
class DataSet:
    """Features and targets of one table, checked, on the host.

    X: (n, F) float32, NaN = missing. label: (n,) float64 or None. weight: (n,) float64 or None.
    feature_names: F names. label_name / weight_name: the column names they came from, or None.
    """

    X: np.ndarray
    label: np.ndarray | None
    weight: np.ndarray | None
    feature_names: list[str]
    label_name: str | None = None
    weight_name: str | None = None

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])


def check_container(data, what: str) -> None:
    """Refuse anything that is not a pandas DataFrame or a 2-D numeric array, before any work."""
    module = type(data).__module__.split(".")[0]
    if module in ("dask", "dask_cudf", "dask_expr"):
        raise TypeError(f"{what}: Dask collections are not supported by this version yet; "
                        f"compute() a pandas DataFrame first")
    if module in ("cudf", "cupy"):
        raise TypeError(f"{what}: cuDF/CuPy input needs the CUDA backend, which this version "
                        f"does not have yet; use .to_pandas() / .get() first")
    if frames.is_frame(data):
        frames.check_unique_columns(data)
        return
    try:
        arr = np.asarray(data)
    except Exception as e:  # e.g. ragged lists
        raise TypeError(f"{what} must be a pandas DataFrame or a 2-D array, got "
                        f"{type(data).__name__}") from e
    if arr.ndim != 2:
        raise ValueError(f"{what} must be 2-D (rows x features), got shape {arr.shape}")


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
        return frames.column_values(data, value), value
    values = frames.as_vector(value, role)
    if len(values) != n_rows:
        raise ValueError(f"{role} has {len(values)} values but {what} has {n_rows} rows")
    return values, None


def _check_finite(values, role: str, what: str) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        where = np.flatnonzero(bad)
        kinds = "NaN" if np.isnan(values[bad]).all() else "NaN or inf"
        raise ValueError(f"{role} of {what} has {len(where)} {kinds} value(s), first at row "
                         f"position(s) {where[:5].tolist()}")


def check_features(X: np.ndarray, feature_names: list[str], what: str) -> None:
    """Refuse +-inf in features (NaN is fine: it is a missing value), naming the columns."""
    infinite = np.isinf(X)
    if infinite.any():
        columns = [feature_names[j] for j in np.flatnonzero(infinite.any(axis=0))]
        raise ValueError(f"{what} has infinite values in feature column(s) {_names(columns)}; "
                         f"replace them (NaN means missing)")


def load(data, label=None, weight=None, what: str = "data", feature_names=None,
         label_name=None, weight_name=None) -> DataSet:
    """Validate ``data`` and its label/weight and return them as host arrays.

    label/weight: a column name (not a feature then) or an array of one value per row.
    feature_names: when given (evaluation data), the columns must be exactly these features
    (plus the label/weight columns). label_name/weight_name: training's column names.
    """
    check_container(data, what)
    n_rows = frames.n_rows(data)
    label_values, label_col = _target(data, label, "label", what, n_rows)
    weight_values, weight_col = _target(data, weight, "weight", what, n_rows)
    if label_col is not None and label_col == weight_col:
        raise ValueError(f"label and weight name the same column {label_col!r}")
    columns = frames.column_names(data)
    targets = {label_col, weight_col, label_name, weight_name} - {None}
    if feature_names is None:
        features = [c for c in columns if c not in targets]
    else:
        features = list(feature_names)
        check_columns(data, features, targets, what)
    if n_rows == 0:
        raise ValueError(f"{what} has no rows")
    if not features:
        raise ValueError(f"{what} has no feature columns")
    bad = frames.non_numeric_columns(data, features)
    if bad:
        raise TypeError(f"{what} has non-numeric feature column(s) {_names(bad)}; gbflow takes "
                        f"numeric and boolean columns only (categorical support comes later)")
    if label_values is not None:
        _check_finite(label_values, "label", what)
    if weight_values is not None:
        _check_finite(weight_values, "weight", what)
        if (weight_values < 0).any():
            where = np.flatnonzero(weight_values < 0)
            raise ValueError(f"weight of {what} has {len(where)} negative value(s), first at row "
                             f"position(s) {where[:5].tolist()}")
    X = frames.feature_matrix(data, features)
    check_features(X, features, what)
    return DataSet(X=X, label=label_values, weight=weight_values, feature_names=features,
                   label_name=label_col, weight_name=weight_col)


def check_columns(data, feature_names: list[str], allowed_extra, what: str) -> None:
    """Frames must hold every training feature; other columns only if in ``allowed_extra``."""
    if not frames.is_frame(data):
        width = np.shape(data)[1]
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
        raise ValueError(f"{what} " + " and ".join(problems) + "; columns must match training "
                         "(transform() keeps extra columns as passengers)")
