"""Tables in, tables out: pandas/cuDF frames and NumPy/CuPy arrays -> float32 arrays, and back.

Everything that knows a container type lives here; the engine sees only arrays. GPU containers
(cuDF frames and series, CuPy arrays) stay on the GPU: their values come out as CuPy arrays, and
predictions for them go back as cuDF/CuPy. cuDF and CuPy are imported only when such data is seen.
"""
from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np
import pandas as pd

from .. import _dtypes
from ..csr import CSR
from .arrays import to_host


def _module(data) -> str:
    return type(data).__module__.split(".")[0]


def is_cudf(data) -> bool:
    """True for a cuDF DataFrame or Series (checked without importing cuDF)."""
    return _module(data) == "cudf"


def is_device_array(data) -> bool:
    """True for a CuPy array (or any array exposing ``__cuda_array_interface__``), not cuDF."""
    return not is_cudf(data) and (_module(data) == "cupy"
                                  or hasattr(data, "__cuda_array_interface__"))


def is_sparse_matrix(data) -> bool:
    """True for a scipy.sparse or cupyx.scipy.sparse matrix or array (checked without imports)."""
    return _module(data) in ("scipy", "cupyx") and hasattr(data, "tocsr") \
        and hasattr(data, "nnz")


def widened_sparse(matrix, width: int):
    """A sparse matrix (scipy or cupyx) of fewer than ``width`` columns as a CSR matrix of
    ``width`` columns, the added ones holding no entry (missing values, as XGBoost reads a
    narrower sparse matrix); the entries are shared, not copied."""
    csr = matrix.tocsr()
    return type(csr)((csr.data, csr.indices, csr.indptr), shape=(csr.shape[0], width))


def csr_from_matrix(matrix) -> CSR:
    """A scipy.sparse (host) or cupyx.scipy.sparse (GPU) matrix as gbflow's canonical ``CSR``.

    The user's matrix is not modified: duplicate entries are summed and column ids sorted in a
    copy (as scipy does for arithmetic). A CSR matrix already in canonical form (sorted column
    ids, no duplicates) is not copied: its float32 values and int32 column ids are shared, read
    only (a copy would double the input's memory while it is binned). Values become float32,
    column ids int32, row pointers int64; the arrays stay where the matrix lives.
    """
    if matrix.format == "csr" and matrix.has_canonical_format:
        csr = matrix
    else:
        csr = matrix.tocsr(copy=True)
        csr.sum_duplicates()  # also sorts the column ids of every row
        csr.sort_indices()
    xp = _cupy() if _module(matrix) == "cupyx" else np
    return CSR(indptr=xp.asarray(csr.indptr, dtype=xp.int64),
               indices=xp.asarray(csr.indices, dtype=xp.int32),
               data=xp.ascontiguousarray(xp.asarray(csr.data, dtype=_dtypes.FEATURE)),
               n_cols=int(csr.shape[1]))


def is_frame(data) -> bool:
    """True for a pandas or cuDF DataFrame."""
    return isinstance(data, pd.DataFrame) or (is_cudf(data) and hasattr(data, "columns"))


def _cupy():
    import cupy
    return cupy


def column_names(data) -> list[str]:
    """Column names of a frame as strings, or f0..f{k-1} for a 2-D array."""
    if is_frame(data):
        return [str(c) for c in data.columns]
    width = data.shape[1] if is_sparse_matrix(data) else np.shape(data)[1]
    return [f"f{i}" for i in range(width)]


def n_rows(data) -> int:
    """Number of rows of a frame, array or sparse matrix."""
    return int(data.shape[0]) if is_sparse_matrix(data) else len(data)


def check_unique_columns(data, among: Sequence[str] | None = None) -> None:
    """Refuse frames with repeated column names (a feature would be ambiguous); with ``among``,
    only those names repeated (columns that ride along may share a name)."""
    names = column_names(data)
    counts = collections.Counter(names)
    repeated = sorted(n for n, k in counts.items() if k > 1 and (among is None or n in among))
    if repeated:
        raise ValueError(f"columns appear more than once: {repeated}")


def is_category(dtype) -> bool:
    """True for pandas' and cuDF's ``category`` dtypes."""
    return isinstance(dtype, pd.CategoricalDtype) or str(dtype) == "category"


def category_columns(data, columns: Sequence[str]) -> list[str]:
    """The listed columns of a frame (none of an array) whose dtype is ``category``."""
    if not is_frame(data):
        return []
    by_name = {str(c): c for c in data.columns}
    return [name for name in columns if is_category(data[by_name[name]].dtype)]


def _categories_and_codes(data, name: str):
    """A category column's categories (a host pandas Index, in the column's order) and codes
    ((n,) int64, -1 where null; NumPy, or CuPy for cuDF)."""
    column = data[{str(c): c for c in data.columns}[name]]
    if is_cudf(data):
        codes = column.cat.codes.astype("int64").fillna(-1).to_cupy()
        return column.cat.categories.to_pandas(), codes
    return column.cat.categories, column.cat.codes.to_numpy().astype(np.int64)


def observed_categories(data, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """{name: the categories that occur in the column, sorted by value (a host array)} for the
    listed ``category`` columns: categories are identified by value, so two frames that order
    them differently, or declare unused ones, give the same list. Raises TypeError naming the
    column when its categories are neither numbers, strings nor booleans (or cannot be
    ordered)."""
    found = {}
    for name in columns:
        categories, codes = _categories_and_codes(data, name)
        xp = _cupy() if is_cudf(data) else np
        used = xp.bincount(codes + 1, minlength=len(categories) + 1)[1:] > 0
        values = categories.to_numpy()[to_host(used)]
        kind_ok = values.dtype.kind in "iufb" or all(isinstance(v, str) for v in values)
        try:
            if not kind_ok:
                raise TypeError(values.dtype)
            found[name] = np.sort(values)
        except TypeError:
            raise TypeError(f"category column {name!r} has categories of dtype "
                            f"{categories.dtype} (for example {values[:1].tolist()}); gbflow "
                            f"takes categories that are numbers, strings or booleans") from None
    return found


# what dask.dataframe puts in a meta's category column whose categories are unknown
_UNKNOWN_CATEGORIES = "__UNKNOWN_CATEGORIES__"


def _kind(values) -> str:
    """"numbers", "strings" or another pandas-inferred kind of a category list's values (a
    numeric dtype is numbers without looking at each value: prediction checks every call)."""
    if np.asarray(values).dtype.kind in "iuf":
        return "numbers"
    inferred = pd.api.types.infer_dtype(values, skipna=True)
    return "numbers" if inferred in ("integer", "floating", "mixed-integer-float", "decimal") \
        else "strings" if inferred == "string" else inferred


def check_category_kind(name: str, own, target) -> None:
    """TypeError naming categorical feature ``name`` when its categories ``own`` are of another
    kind than ``target`` (numbers against strings: no value would match, and every row would
    silently be missing)."""
    if len(own) == 1 and own[0] == _UNKNOWN_CATEGORIES:
        return  # a Dask frame's meta, whose categories are not known yet
    if not (len(own) and len(target)):
        return
    kinds = _kind(own), _kind(target)
    if kinds[0] != kinds[1]:
        def example(values):
            first = values[0]
            return repr(first.item() if hasattr(first, "item") else first)
        raise TypeError(f"categorical feature {name!r} has categories of {kinds[0]} here "
                        f"(e.g. {example(own)}) where the model's are {kinds[1]} (e.g. "
                        f"{example(target)}): no value would match and every row would be "
                        f"missing; give the column the training data's category type")


def encode_categories(data, name: str, categories: np.ndarray):
    """A category column as (n,) float32 positions of its values in ``categories`` (a sorted
    host array of values); NaN for nulls and for values not among ``categories``. NumPy, or
    CuPy for cuDF. TypeError when the column's categories are of another kind
    (``check_category_kind``)."""
    own, codes = _categories_and_codes(data, name)
    check_category_kind(name, own, categories)
    lookup = pd.Index(categories).get_indexer(own).astype(np.float32)  # -1: not in categories
    lookup[lookup < 0] = np.nan
    lookup = np.concatenate([lookup, [np.float32(np.nan)]])  # code -1 (null) reads the NaN
    xp = _cupy() if is_cudf(data) else np
    return xp.asarray(lookup)[codes]


def non_numeric_columns(data, columns: Sequence[str]) -> list[str]:
    """The listed columns whose dtype is not numeric, boolean or ``category``, as
    'name (dtype)' strings."""
    if not is_frame(data):
        arr = data if is_device_array(data) or is_sparse_matrix(data) else np.asarray(data)
        if arr.dtype.kind in "biuf":  # complex ("c") is refused: its imaginary part would be lost
            return []
        return [f"<array> ({arr.dtype})"]
    by_name = {str(c): c for c in data.columns}
    bad = []
    for name in columns:
        dtype = data[by_name[name]].dtype
        if is_category(dtype):
            continue
        numeric = pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_complex_dtype(dtype)
        if not (numeric or pd.api.types.is_bool_dtype(dtype)):
            bad.append(f"{name} ({dtype})")
    return bad


def column_values(data, name: str):
    """One column of a frame as a float64 array, nulls as NaN: NumPy for pandas, CuPy for cuDF."""
    by_name = {str(c): c for c in data.columns}
    column = data[by_name[name]]
    if is_cudf(data):
        return column.astype(np.float64).to_cupy()  # nulls -> NaN (see feature_matrix)
    return column.to_numpy(dtype=np.float64, na_value=np.nan)


# Rows per block when a pandas frame's columns are copied into the row-major matrix: a block's
# rows stay in the cache while every column is written into them (1M x 28 float32: 28 ms,
# against 80 ms writing each column down the whole matrix, a cache line touched per value).
_FRAME_BLOCK_ROWS = 1 << 14


def feature_matrix(data, feature_names: Sequence[str] | None = None,
                   categories: dict | None = None) -> np.ndarray:
    """The features as a (n_rows, n_features) float32 C-ordered array, nulls as NaN (a ``CSR``
    for a sparse matrix: see ``gbflow.csr``).

    data: pandas DataFrame (columns picked by name, in ``feature_names`` order) or a 2-D array
    (taken as is). Returns a new host array; for cuDF or CuPy data a new CuPy array on the same
    GPU (column-major for cuDF: that is how cuDF stores columns, and it costs no transpose).
    categories: {name: sorted values} for the frame's ``category`` columns, which become
    positions in those lists (``encode_categories``); each must be listed.
    """
    if is_sparse_matrix(data):
        return csr_from_matrix(data)
    if is_device_array(data):
        return _cupy().ascontiguousarray(_cupy().asarray(data, dtype=_dtypes.FEATURE))
    if not is_frame(data):
        return np.ascontiguousarray(np.asarray(data, dtype=_dtypes.FEATURE))
    by_name = {str(c): c for c in data.columns}
    names = list(feature_names) if feature_names is not None else list(by_name)
    coded = category_columns(data, names)
    missing = [name for name in coded if name not in (categories or {})]
    if missing:
        raise ValueError(f"no category list for category column(s) {missing}")
    if is_cudf(data) and coded:  # the numeric block as below, then the coded columns
        numeric = [j for j, name in enumerate(names) if name not in coded]
        out = _cupy().empty((len(data), len(names)), dtype=_dtypes.FEATURE)
        out[:, numeric] = feature_matrix(data, [names[j] for j in numeric])
        for name in coded:
            out[:, names.index(name)] = encode_categories(data, name, categories[name])
        return out
    if is_cudf(data):
        if not names:
            return _cupy().empty((len(data), 0), dtype=_dtypes.FEATURE)
        # Float columns' nulls become NaN in to_cupy() by themselves; na_value=np.nan would also
        # count every column's NaNs and copy it first (75% of loading a 2,500-row partition).
        return data[[by_name[n] for n in names]].astype(_dtypes.FEATURE).to_cupy()
    # Each column's values as they are stored (no copy for NumPy dtypes; pandas' extension
    # arrays, nullable ones, converted a block at a time), cast while copied into the matrix.
    sources = []
    for name in names:
        if name in coded:
            sources.append(encode_categories(data, name, categories[name]))
            continue
        column = data[by_name[name]]
        sources.append(column.to_numpy() if isinstance(column.dtype, np.dtype) else
                       column.array)
    out = np.empty((len(data), len(names)), dtype=_dtypes.FEATURE)
    for r0 in range(0, len(data), _FRAME_BLOCK_ROWS):
        block = out[r0:r0 + _FRAME_BLOCK_ROWS]
        for j, values in enumerate(sources):
            part = values[r0:r0 + _FRAME_BLOCK_ROWS]
            block[:, j] = part if isinstance(part, np.ndarray) else \
                part.to_numpy(dtype=_dtypes.FEATURE, na_value=np.nan)
    return out



def mark_missing(X, value, skip: Sequence[int] = ()):
    """X with its entries equal to ``value`` (a float, XGBoost's ``missing``; None: nothing to
    do) made NaN, except in the columns ``skip`` (category positions). X (dense float32, or a
    ``CSR`` whose stored entries are checked) may be the caller's own array: a changed copy is
    returned, X itself is never written; X is returned as it is when nothing matches."""
    if value is None:
        return X
    if isinstance(X, CSR):
        xp = _cupy() if is_device_array(X.data) else np
        hit = X.data == np.float32(value)
        if len(skip):
            hit &= ~xp.isin(X.indices, xp.asarray(list(skip)))
        if not bool(hit.any()):
            return X
        data = X.data.copy()
        data[hit] = np.nan
        return CSR(X.indptr, X.indices, data, X.n_cols)
    hit = X == np.float32(value)
    if len(skip):
        hit[:, list(skip)] = False
    if not bool(hit.any()):
        return X
    out = X.copy(order="K")
    out[hit] = np.nan
    return out

def as_vector(values, what: str) -> np.ndarray:
    """A 1-D float64 array from a Series, list or array (nulls as NaN); ``what`` names it in
    errors."""
    if isinstance(values, (pd.Series, pd.Index)):
        return values.to_numpy(dtype=np.float64, na_value=np.nan)
    if is_cudf(values):
        return values.astype(np.float64).to_cupy(na_value=np.nan)
    arr = values if is_device_array(values) else np.asarray(values)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{what} must be numeric, got dtype {arr.dtype}")
    return arr.astype(np.float64)


def as_matrix(values, what: str):
    """A 2-D float64 array (host, or the device for device arrays) from an array-like; ``what``
    names it in errors."""
    arr = values if is_device_array(values) else np.asarray(values)
    if arr.ndim != 2 or arr.dtype.kind not in "biuf":
        raise ValueError(f"{what} must be a numeric array of one row per data row, got "
                         f"shape {arr.shape} and dtype {arr.dtype}")
    return arr.astype(np.float64)


def wrap_prediction(values, like, name: str):
    """(n,) predictions shaped like the input: a Series named ``name`` with ``like``'s index for
    frame input (a cuDF Series for cuDF), the bare array otherwise. values: NumPy for
    pandas/NumPy input, CuPy for cuDF/CuPy input. (Several columns: ``wrap_columns``.)"""
    if not is_frame(like):
        return values
    if is_cudf(like):
        import cudf
        return cudf.Series(values, index=like.index, name=name)
    return pd.Series(values, index=like.index, name=name)


def wrap_columns(values, like, columns: Sequence[str]):
    """2-D ``values`` (n, len(columns)) as a frame of ``like``'s kind (pandas or cuDF) with its
    index and these column names; the bare array when ``like`` is not a frame."""
    if not is_frame(like):
        return values
    if is_cudf(like):
        import cudf
        return cudf.DataFrame({c: values[:, k] for k, c in enumerate(columns)}, index=like.index)
    return pd.DataFrame(values, index=like.index, columns=list(columns))


def bare_values(prediction):
    """A prediction as its bare array on its device: a pandas Series' or frame's values
    (NumPy), a cuDF one's (CuPy), an array as it is."""
    if is_cudf(prediction):
        return prediction.values
    if isinstance(prediction, (pd.Series, pd.DataFrame)):
        return prediction.to_numpy()
    return prediction


def dense_rows(X):
    """X as a dense (n_rows, n_cols) float32 matrix in its namespace: a ``CSR``'s absent entries
    become NaN (missing); a dense matrix is returned as it is."""
    if not isinstance(X, CSR):
        return X
    return X.to_dense(_cupy() if is_device_array(X.data) else np)

def append_prediction(data, prediction):
    """``data`` with the prediction column(s) appended (a new frame or array; ``data`` is not
    changed)."""
    if is_frame(data):
        extra = prediction if hasattr(prediction, "columns") else prediction.to_frame()
        clash = [c for c in extra.columns if c in data.columns]
        if clash:
            raise ValueError(f"transform: column(s) {clash} already exist in the data; "
                             f"pass another name=")
        if is_cudf(data):
            out = data.copy(deep=False)
            for column in extra.columns:
                out[column] = extra[column]
            return out
        return pd.concat([data, extra], axis=1)
    if is_sparse_matrix(data):
        raise TypeError("transform() appends a column to a frame or a dense array; for a sparse "
                        "matrix use predict()")
    pred = prediction if prediction.ndim == 2 else prediction[:, None]
    if is_device_array(data):
        return _cupy().concatenate([data.astype(np.float64), pred], axis=1)
    return np.concatenate([np.asarray(data, dtype=np.float64), pred], axis=1)
