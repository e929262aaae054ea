"""Booster.predict / transform on Dask DataFrames: lazy map_partitions, the model sent once.

The columns are checked on the collection's meta when the graph is built, with the same rules and
messages as for a pandas frame, so a missing or unexpected column fails at once rather than inside
a task. Each partition is then predicted by ``Booster.predict``/``transform`` itself (pandas or
cuDF, whatever the partition is), so the result keeps the input's index and divisions and its
partition type.
"""
from __future__ import annotations

from .inputs import as_dask_frame


def _model(booster):
    # One graph key holding the booster: every partition task depends on it, so the model is
    # sent to each worker once, not embedded in every task.
    import dask
    return dask.delayed(booster, pure=False)


def _predict_partition(frame, booster, output_margin: bool, name: str):
    return booster.predict(frame, output_margin=output_margin, name=name)


def _transform_partition(frame, booster, output_margin: bool, name: str):
    return booster.transform(frame, name=name, output_margin=output_margin)


def _output_columns(booster, name: str, output_margin: bool) -> list[str]:
    width = booster.output_width(output_margin)
    return [name] if width == 1 else [f"{name}_{k}" for k in range(width)]


def _prediction_meta(booster, meta, name: str, output_margin: bool):
    """The empty result, built from the input's meta so that it has the same frame type (pandas
    or cuDF) and index: a float64 Series ``name``, or a DataFrame of ``name_k`` columns."""
    column = meta[meta.columns[0]].astype("float64")
    if booster.output_width(output_margin) == 1:
        return column.rename(name)
    return meta[[]].assign(**{c: column for c in _output_columns(booster, name, output_margin)})


def predict(booster, data, output_margin: bool = False, name: str = "prediction"):
    """Lazy predictions of a Dask DataFrame: a Dask Series (a Dask DataFrame of one column per
    class for multi:softprob, or for margins of several classes) with ``data``'s index and
    divisions. Columns must be the training features (the training label and weight columns may
    be present), as for pandas."""
    ddf = as_dask_frame(data, "prediction data")
    booster._features(ddf._meta, passengers_allowed=False)
    return ddf.map_partitions(_predict_partition, _model(booster), output_margin, name,
                              meta=_prediction_meta(booster, ddf._meta, name, output_margin))


def transform(booster, data, name: str = "prediction", output_margin: bool = False):
    """Lazy ``data`` with the prediction column(s) appended (ready for ``to_parquet``): the same
    index and divisions; columns other than the features ride along."""
    ddf = as_dask_frame(data, "prediction data")
    meta = ddf._meta
    booster._features(meta, passengers_allowed=True)
    new = _output_columns(booster, name, output_margin)
    clash = [c for c in new if c in set(map(str, meta.columns))]
    if clash:
        raise ValueError(f"transform: column(s) {clash} already exist in the data; pass "
                         f"another name=")
    out_meta = meta.assign(**{c: meta[meta.columns[0]].astype("float64") for c in new})
    return ddf.map_partitions(_transform_partition, _model(booster), output_margin, name,
                              meta=out_meta)
