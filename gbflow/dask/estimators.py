"""Dask plumbing for the scikit-learn estimators (``gbflow/sklearn.py``, which alone imports
scikit-learn): X, y and weights as Dask collections -> one frame with label/weight columns for
``gbflow.train``, class labels encoded and decoded partition by partition.
"""
from __future__ import annotations

import numpy as np

from .. import inputs

# Column names the estimators give y and sample_weight inside the training frame.
LABEL = "__gbflow_label__"
WEIGHT = "__gbflow_weight__"


def check_features(X, what: str = "X"):
    """X as a Dask DataFrame with string column names (kept as the feature names), none of them
    reserved. Raises TypeError/ValueError naming the problem."""
    import dask.dataframe as dd
    if not isinstance(X, dd.DataFrame):
        raise TypeError(f"{what} is a Dask {type(X).__name__}; the estimators take Dask "
                        f"DataFrames (one column per feature)")
    names = list(X.columns)
    bad = [c for c in names if not isinstance(c, str)]
    if bad:
        raise TypeError(f"{what}: Dask DataFrame column names must be strings, got {bad[:5]}")
    reserved = [c for c in names if c in (LABEL, WEIGHT)]
    if reserved:
        raise ValueError(f"{what} has column(s) {reserved}, which the estimators use internally")
    return X


def _series(values, what: str):
    """A Dask Series from a Dask Series or a one-column Dask DataFrame."""
    import dask.dataframe as dd
    if isinstance(values, dd.DataFrame) and len(values.columns) == 1:
        return values[values.columns[0]]
    if isinstance(values, dd.Series):
        return values
    raise TypeError(f"{what} must be a Dask Series (partitioned like X) when X is a Dask "
                    f"DataFrame, got {type(values).__name__}")


def _numeric(series, what: str):
    import pandas as pd
    dtype = series._meta.dtype
    if not (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)):
        raise TypeError(f"{what} must be numeric, got dtype {dtype}")
    return series.astype("float64")


def training_frame(X, y, sample_weight, what: str, weighted: bool):
    """X with y (already encoded as numbers) and the weights as columns ``LABEL``/``WEIGHT``.

    weighted: the training has weights, so a set without ``sample_weight`` gets weight 1 (an
    evaluation frame must have the training's weight column).
    """
    of = "" if what == "fit" else f" of {what}"
    X = check_features(X, f"X{of}")
    columns = {LABEL: _numeric(_series(y, f"y{of}"), f"y{of}")}
    if sample_weight is not None:
        columns[WEIGHT] = _numeric(_series(sample_weight, f"sample_weight{of}"),
                                   f"sample_weight{of}")
    elif weighted:
        columns[WEIGHT] = 1.0
    return X.assign(**columns)


def classes(y) -> np.ndarray:
    """The sorted distinct labels of a Dask Series (computes y once)."""
    values = _series(y, "y").unique().compute()
    values = values.to_numpy() if hasattr(values, "to_numpy") else np.asarray(values)
    if len(values) and values.dtype.kind == "f" and np.isnan(values).any():
        raise ValueError("y has missing (NaN) labels")
    return np.unique(values)


def _encode_partition(labels, known):
    import pandas as pd
    values = labels.to_numpy()
    index = np.clip(np.searchsorted(known, values), 0, len(known) - 1)
    found = known[index] == values
    if not np.all(found):
        unseen = list(dict.fromkeys(values[~found].tolist()))[:5]
        raise ValueError(f"y has label(s) {unseen} that are not among the classes seen in the "
                         f"training y: {known.tolist()}")
    return pd.Series(index.astype(np.float64), index=labels.index, name=labels.name)


def encode(y, known: np.ndarray, what: str):
    """Labels -> float64 positions in ``known`` (lazy; an unknown label fails when computed)."""
    series = _series(y, "y" if what == "fit" else f"y of {what}")
    return series.map_partitions(_encode_partition, known,
                                 meta=series._meta.astype("float64"))


def _labels_partition(probability, known):
    import pandas as pd
    values = probability.to_numpy()
    index = (values > 0.5).astype(np.intp) if values.ndim == 1 else np.argmax(values, axis=1)
    return pd.Series(known[index], index=probability.index, name="prediction")


def labels(probability, known: np.ndarray):
    """Most probable class of each row (lazy Dask Series named "prediction")."""
    import pandas as pd
    meta = pd.Series(known[:0], index=probability._meta.index, name="prediction")
    return probability.map_partitions(_labels_partition, known, meta=meta)


def _proba_partition(probability, columns):
    import pandas as pd
    values = probability.to_numpy()
    if values.ndim == 1:
        values = np.column_stack((1.0 - values, values))
    return pd.DataFrame(values, index=probability.index, columns=columns)


def probabilities(probability, known: np.ndarray):
    """Class probabilities (lazy Dask DataFrame, one float64 column per class, named after the
    class label as a string)."""
    import pandas as pd
    columns = [str(c) for c in known]
    meta = pd.DataFrame({c: np.zeros(0) for c in columns}, index=probability._meta.index)
    return probability.map_partitions(_proba_partition, columns, meta=meta)


def is_dask(data) -> bool:
    return inputs.is_dask_collection(data)
