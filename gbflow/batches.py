"""Training data given in batches (a list or iterator of frames or arrays, or Parquet and CSV
files): each batch checked on its own and its values copied into one host part."""
from __future__ import annotations

import collections.abc
import contextlib
import glob
import os

import numpy as np

from . import categories, inputs
from .backend import frames, on_gpu, to_host

# Rows per batch read from a CSV file (a Parquet file is read a row group at a time).
CSV_BATCH_ROWS = 1 << 20


def input_files(spec: str) -> tuple[list[str], str]:
    """The files a data argument names (a file, a folder, or a glob pattern) and their format
    ("parquet" or "csv", from the extensions). ValueError when it names none, or a file of
    another kind, or both kinds."""
    if os.path.isdir(spec):
        files = sorted(f for f in glob.glob(os.path.join(spec, "**", "*"), recursive=True)
                       if os.path.isfile(f) and file_format(f) is not None)
    else:
        files = sorted(glob.glob(spec)) if glob.has_magic(spec) else \
            ([spec] if os.path.isfile(spec) else [])
    if not files:
        raise ValueError(f"no Parquet or CSV file at {spec!r}")
    formats = {file_format(f) for f in files}
    if None in formats:
        bad = next(f for f in files if file_format(f) is None)
        raise ValueError(f"{bad!r} is neither Parquet (.parquet, .pq) nor CSV (.csv)")
    if len(formats) > 1:
        raise ValueError(f"{spec!r} mixes Parquet and CSV files; give one kind")
    return files, formats.pop()


def file_format(path: str) -> str | None:
    """"parquet" or "csv" by the file name's extension, or None for another."""
    lower = path.lower()
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    return "csv" if lower.endswith(".csv") else None


def is_batches(data) -> bool:
    """Whether ``data`` is a table given in batches: a path (str or ``os.PathLike``: a Parquet or
    CSV file, a folder of them or a glob), a list whose first item is a batch (a frame, a 2-D
    array, or an (X, y, ...) tuple), or an iterator of batches (a generator, say). A list of
    numbers' rows is one table, as before; a tuple is never batches."""
    if isinstance(data, (str, os.PathLike)):
        return True
    if isinstance(data, list):
        first = data[0] if data else None
        return _is_table(first[0] if isinstance(first, tuple) and first else first)
    return isinstance(data, collections.abc.Iterator)


def _is_table(item) -> bool:
    return frames.is_frame(item) or frames.is_sparse_matrix(item) or \
        getattr(item, "ndim", None) == 2


def _source(data, what: str):
    """``data`` itself, or for a path its (files, format): ValueError naming ``what`` when the
    path holds no Parquet or CSV file."""
    if not isinstance(data, (str, os.PathLike)):
        return data
    try:
        return input_files(os.fspath(data))
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None


def _named_batches(source):
    """(name for errors, batch) pairs of a ``_source``, read lazily: a file's batches one at a
    time."""
    if not isinstance(source, tuple):
        for k, item in enumerate(source):
            yield f"batch {k}", item
        return
    files, fmt = source
    if fmt == "parquet":
        import pyarrow.parquet as pq
        # (an error the consumer raises while a batch is out does not enter this generator:
        # _naming wraps the reading alone)
        for path in files:
            with _naming(path, fmt), pq.ParquetFile(path) as file:
                for g in range(file.num_row_groups):
                    yield f"file {path!r} row group {g}", file.read_row_group(g).to_pandas()
        return
    import pandas as pd
    for path in files:
        with _naming(path, fmt), pd.read_csv(path, chunksize=CSV_BATCH_ROWS) as reader:
            for k, chunk in enumerate(reader):
                if len(chunk):  # (a file of a header alone reads as one chunk of no rows)
                    yield f"file {path!r} rows from {k * CSV_BATCH_ROWS}", chunk


@contextlib.contextmanager
def _naming(path: str, fmt: str):
    """A file that cannot be read (empty, corrupt, not the format its name says) raises a
    ValueError naming it, from the reader's own error."""
    try:
        yield
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid and pandas' errors are these
        raise ValueError(f"cannot read {fmt} file {path!r}: {type(e).__name__}: {e}") from e


def _rows_hint(source) -> int | None:
    """The batches' total row count when it is known before reading them (a list's, Parquet
    files' metadata), else None."""
    if isinstance(source, list):
        try:
            return sum(frames.n_rows(b[0] if isinstance(b, tuple) else b) for b in source)
        except (TypeError, IndexError):
            return None  # the batch checks say what is wrong
    if isinstance(source, tuple) and source[1] == "parquet":
        import pyarrow.parquet as pq
        total = 0
        for path in source[0]:
            with _naming(path, "parquet"):
                total += pq.ParquetFile(path).metadata.num_rows
        return total
    return None


class _Rows:
    """A host array grown by appending rows: sized once from a known total, or grown by half
    its size again (in place where the allocator can) when the total is not known."""

    def __init__(self, first, capacity: int | None):
        self.array = np.empty((max(capacity or 0, len(first)), *first.shape[1:]), first.dtype)
        self.n = 0

    def append(self, values, what: str) -> None:
        values = to_host(values)
        if values.shape[1:] != self.array.shape[1:]:
            raise ValueError(f"{what} is {values.shape[1:] or 'one column'} per row where the "
                             f"first batch's was {self.array.shape[1:] or 'one column'}")
        k = len(values)
        if self.n + k > len(self.array):
            grown = max(self.n + k, len(self.array) + len(self.array) // 2 + 1024)
            self.array.resize((grown, *self.array.shape[1:]), refcheck=False)
        self.array[self.n:self.n + k] = values
        self.n += k

    def result(self):
        self.array.resize((self.n, *self.array.shape[1:]), refcheck=False)
        return self.array


_TUPLE_FORM = "(X, y[, weight[, qid[, base_margin]]])"


def _batch_arguments(item, label, weight, qid, base_margin, what: str,
                     names_for_frames: bool = False) -> tuple:
    """(X, label, weight, qid, base_margin) of one batch: a frame's columns are named by the
    arguments; a tuple carries its own arrays (the arguments must then be None, unless
    ``names_for_frames``: an evaluation set's, which names the training's columns for its
    frames and lets tuples be)."""
    if not isinstance(item, tuple):
        for role, value in (("label", label), ("weight", weight), ("qid", qid),
                            ("base_margin", base_margin)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{what}: with data in batches, {role} must name a column of "
                                f"every batch (or give each batch as a tuple {_TUPLE_FORM}), "
                                f"got a {type(value).__name__}")
        if label is None:
            raise ValueError(f"{what}: give label= the label column's name, or each batch as "
                             f"a tuple {_TUPLE_FORM}")
        return item, label, weight, qid, base_margin
    if not 2 <= len(item) <= 5:
        raise TypeError(f"{what} is a tuple of {len(item)}; give {_TUPLE_FORM}, None for one "
                        f"not given")
    given = [role for role, value in (("label", label), ("weight", weight), ("qid", qid),
                                      ("base_margin", base_margin)) if value is not None]
    if given and not names_for_frames:
        raise ValueError(f"{what} is a tuple {_TUPLE_FORM}, which holds its own arrays: leave "
                         f"{', '.join(given)} out of the call")
    X, y, w, q, m = (*item, None, None, None)[:5]
    if y is None:
        raise ValueError(f"{what}: the tuple's label (its second item) is None")
    return X, y, w, q, m


def load(data, label=None, weight=None, what: str = "training data", *, feature_names=None,
         missing: float | None = None, base_margin=None, qid=None,
         enable_categorical: bool = True,
         feature_types: tuple | None = None) -> tuple[inputs.DataSet, bool]:
    """One host ``DataSet`` of every batch of ``data`` (see ``is_batches``), and whether the
    batches were on a GPU (cuDF or CuPy; training then defaults to it).

    Frames carry their label, and weight, qid and base_margin where given, as the columns those
    arguments name; tuples are (X, y[, weight[, qid[, base_margin]]]) (None for one not given)
    and then those arguments stay None. Each batch is checked as ``inputs.load`` checks a table,
    its errors naming the batch (its index, or its file and row group); every batch must have
    the first's feature columns (or ``feature_names``: an evaluation set's) and the same
    category columns, whose categories are matched by value (each batch's codes are moved onto
    the union of the batches' lists). Batches are read one at a time and their features copied
    into one host (n, F) float32 matrix, so that the device holds no batch for long (a device
    batch is copied to the host as it comes) and the host holds the features once, plus one
    batch (plus the matrix's growth when the row count is not known in advance: an iterator's).
    With ``feature_names`` (an evaluation set) the column names given are the training's:
    they apply to frame batches, and tuple batches carry their own arrays (a tuple without a
    base margin starts from the base score). feature_types: XGBoost's (``inputs.load``), each
    batch's columns marked "c" categorical by value. Side effect: an iterator is consumed.
    """
    names = None if feature_names is None else list(feature_names)
    rows = X = None
    targets, pieces, on_device, first = {}, [], False, None  # first: the first batch's names
    made_up = False
    source = _source(data, what)
    for name, item in _named_batches(source):
        where = f"{what}, {name}"
        X_k, y, w, q, m = _batch_arguments(item, label, weight, qid, base_margin, where,
                                           names_for_frames=feature_names is not None)
        part = inputs.load(X_k, y, w, where, feature_names=names, allow_empty=True,
                           missing=missing, base_margin=m, qid=q, feature_types=feature_types)
        if not enable_categorical:
            inputs.check_categorical(X_k, part.feature_names, [], where, enabled=False)
        del X_k, item
        if not hasattr(part.X, "ndim"):  # a CSR
            raise TypeError(f"{where} is a sparse matrix: batches are dense tables; stack the "
                            f"matrices (scipy.sparse.vstack) and give one")
        present = {"weight": part.weight, "qid": part.qid, "base_margin": part.base_margin}
        if first is None:  # (the batch itself is not kept: only its names)
            first = {role: getattr(part, f"{role}_name")
                     for role in ("label", "weight", "base_margin", "qid")}
            names, by_value = part.feature_names, part.by_value
            made_up = part.made_up_names
            rows = _rows_hint(source)
            X = _Rows(part.X, rows)
            targets = {"label": _Rows(part.label, rows)}
            targets.update({role: _Rows(v, rows) for role, v in present.items() if v is not None})
        for role, values in present.items():
            if (values is None) != (role not in targets):
                raise ValueError(f"{where} {'has no' if values is None else 'has a'} {role} "
                                 f"where the first batch "
                                 f"{'had one' if values is None else 'had none'}")
        on_device = on_device or on_gpu(part.X)
        at = X.n
        X.append(part.X, f"{where}'s features")
        targets["label"].append(part.label, f"{where}'s label")
        for role, values in present.items():
            if values is not None:
                targets[role].append(values, f"{where}'s {role}")
        pieces.append((slice(at, X.n), part.categories))
        del part, present
    if first is None:
        why = "" if isinstance(data, list) else " (its files hold no rows)" \
            if isinstance(data, (str, os.PathLike)) else " (the iterator was empty or already used)"
        raise ValueError(f"{what} holds no batches{why}")
    if X.n == 0:
        raise ValueError(f"{what} has no rows (in any batch)")
    matrix = X.result()
    joined = categories.join_pieces(matrix, names, pieces, "batches")
    arrays = {role: values.result() for role, values in targets.items()}
    return inputs.DataSet(
        X=matrix, label=arrays["label"], weight=arrays.get("weight"), feature_names=names,
        categories=joined, base_margin=arrays.get("base_margin"), qid=arrays.get("qid"),
        by_value=by_value, made_up_names=made_up,
        **{f"{role}_name": name for role, name in first.items()}), on_device
