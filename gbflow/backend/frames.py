"""Tables in, tables out: pandas (and NumPy) partitions -> float32 feature arrays, and back.

Everything that knows a container type lives here; the engine sees only arrays.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .. import _dtypes


def is_frame(data) -> bool:
    """True for a pandas DataFrame."""
    return isinstance(data, pd.DataFrame)


def column_names(data) -> list[str]:
    """Column names of a frame as strings, or f0..f{k-1} for a 2-D array."""
    if is_frame(data):
        return [str(c) for c in data.columns]
    return [f"f{i}" for i in range(np.shape(data)[1])]


def n_rows(data) -> int:
    """Number of rows of a frame or array."""
    return len(data)


def check_unique_columns(data) -> None:
    """Refuse frames with repeated column names (a feature would be ambiguous)."""
    names = column_names(data)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"columns appear more than once: {repeated}")


def non_numeric_columns(data, columns: Sequence[str]) -> list[str]:
    """The listed columns whose dtype is not numeric or boolean, as 'name (dtype)' strings."""
    if not is_frame(data):
        arr = np.asarray(data)
        if arr.dtype.kind in "biuf":  # complex ("c") is refused: its imaginary part would be lost
            return []
        return [f"<array> ({arr.dtype})"]
    by_name = {str(c): c for c in data.columns}
    bad = []
    for name in columns:
        dtype = data[by_name[name]].dtype
        numeric = pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_complex_dtype(dtype)
        if not (numeric or pd.api.types.is_bool_dtype(dtype)):
            bad.append(f"{name} ({dtype})")
    return bad


def column_values(data, name: str) -> np.ndarray:
    """One column of a frame as a float64 NumPy array, nulls as NaN."""
    by_name = {str(c): c for c in data.columns}
    return data[by_name[name]].to_numpy(dtype=np.float64, na_value=np.nan)


def feature_matrix(data, feature_names: Sequence[str] | None = None) -> np.ndarray:
    """The features as a (n_rows, n_features) float32 C-ordered array, nulls as NaN.

    data: pandas DataFrame (columns picked by name, in ``feature_names`` order) or a 2-D array
    (taken as is). Returns a new host array.
    """
    if not is_frame(data):
        return np.ascontiguousarray(np.asarray(data, dtype=_dtypes.FEATURE))
    by_name = {str(c): c for c in data.columns}
    names = list(feature_names) if feature_names is not None else list(by_name)
    out = np.empty((len(data), len(names)), dtype=_dtypes.FEATURE)
    for j, name in enumerate(names):
        out[:, j] = data[by_name[name]].to_numpy(dtype=_dtypes.FEATURE, na_value=np.nan)
    return out


def as_vector(values, what: str) -> np.ndarray:
    """A 1-D float64 array from a Series, list or array (nulls as NaN); ``what`` names it in errors."""
    if isinstance(values, (pd.Series, pd.Index)):
        return values.to_numpy(dtype=np.float64, na_value=np.nan)
    arr = np.asarray(values)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{what} must be numeric, got dtype {arr.dtype}")
    return arr.astype(np.float64)


def wrap_prediction(values: np.ndarray, like, name: str):
    """Predictions shaped like the input: a Series (or a DataFrame of one column per class) with
    ``like``'s index for frame input, the bare array otherwise. values: (n,) or (n, n_classes)."""
    if not is_frame(like):
        return values
    if values.ndim == 1:
        return pd.Series(values, index=like.index, name=name)
    columns = [f"{name}_{k}" for k in range(values.shape[1])]
    return pd.DataFrame(values, index=like.index, columns=columns)


def append_prediction(data, prediction):
    """``data`` with the prediction column(s) appended (a new frame or array; ``data`` unchanged)."""
    if is_frame(data):
        extra = prediction.to_frame() if isinstance(prediction, pd.Series) else prediction
        clash = [c for c in extra.columns if c in data.columns]
        if clash:
            raise ValueError(f"transform: column(s) {clash} already exist in the data; "
                             f"pass another name=")
        return pd.concat([data, extra], axis=1)
    pred = prediction if prediction.ndim == 2 else prediction[:, None]
    return np.concatenate([np.asarray(data, dtype=np.float64), pred], axis=1)
