"""Booster.predict / transform on Dask DataFrames: lazy map_partitions, the model sent once.

The columns are checked on the collection's meta when the graph is built, with the same rules and
messages as for a pandas frame, so a missing or unexpected column fails at once rather than inside
a task. Each partition is then predicted by ``Booster.predict``/``transform`` itself (pandas or
cuDF, whatever the partition is), so the result keeps the input's index and divisions and its
partition type.
"""
from __future__ import annotations

from .inputs import as_dask_frame, column_name


def _model(booster):
    # One graph key holding the booster: every partition task depends on it, so the model is
    # sent to each worker once, not embedded in every task.
    import dask
    return dask.delayed(booster, pure=False)


def _predict_partition(frame, booster, output_margin: bool, name: str, kind: str,
                       iteration_range, base_margin=None):
    return booster._predict(frame, output_margin, name, passengers_allowed=False, kind=kind,
                            iteration_range=iteration_range, base_margin=base_margin)


def _transform_partition(frame, booster, output_margin: bool, name: str, iteration_range,
                         base_margin=None):
    return booster.transform(frame, name=name, output_margin=output_margin,
                             iteration_range=iteration_range, base_margin=base_margin)


def _empty_column(meta, dtype: str, name: str):
    """An empty Series of ``dtype`` named ``name`` on ``meta``'s (empty) index, of meta's frame
    type (pandas or cuDF).

    Made from the index, not by casting one of meta's columns: a datetime, timedelta or period
    column (a passenger of transform) cannot be cast to float64.
    """
    series = meta[[]].assign(_gbflow_empty=0)["_gbflow_empty"]  # meta's Series type and index
    return series.astype(dtype).rename(name)


def _prediction_meta(booster, meta, name: str, output_margin: bool, kind: str,
                     iteration_range):
    """The empty result, built from the input's meta so that it has the same frame type (pandas
    or cuDF) and index: a float64 Series ``name``, or a DataFrame of the prediction's columns
    (int32 leaf ids for pred_leaf)."""
    column = _empty_column(meta, "int32" if kind == "leaf" else "float64", name)
    columns = booster.output_columns(name, output_margin, kind, iteration_range)
    if kind == "value" and len(columns) == 1:
        return column.rename(name)
    return meta[[]].assign(**{c: column for c in columns})


def _interactions(booster, ddf, iteration_range):
    """A lazy Dask array of SHAP interaction values, a chunk per partition (row counts unknown
    until computed)."""
    import dask
    import dask.array as da
    width = booster.num_features() + 1
    shape = (width, width) if booster.n_groups == 1 else (booster.n_groups, width, width)
    model = _model(booster)
    chunks = [dask.delayed(_predict_partition)(part, model, False, "", "interactions",
                                               iteration_range)
              for part in ddf.to_delayed()]
    like = booster._predict(ddf._meta, False, "", False, "interactions", iteration_range)
    return da.concatenate([da.from_delayed(c, shape=(float("nan"), *shape), dtype="float64",
                                           meta=like) for c in chunks])


def predict(booster, data, output_margin: bool = False, name: str = "prediction",
            kind: str = "value", iteration_range=None, base_margin=None):
    """Lazy predictions of a Dask DataFrame: a Dask Series (a Dask DataFrame of one column per
    class for multi:softprob, or for margins of several classes) with ``data``'s index and
    divisions. Columns must be the training features (the training label and weight columns may
    be present), as for pandas. kind (``Booster.predict``'s options): "leaf" and the
    contributions give Dask DataFrames of named columns, "interactions" a Dask array.
    base_margin: None, or the column of each row's starting margin (``Booster.predict``)."""
    ddf = as_dask_frame(data, "prediction data")
    base_margin = column_name(base_margin, "base_margin")
    if base_margin is None:
        booster._features(ddf._meta, passengers_allowed=False)
    else:  # its checks (the column, the kind) on the meta, before any partition
        booster._predict(ddf._meta, output_margin, name, False, kind, iteration_range,
                         base_margin)
    booster._tree_range(iteration_range)  # a bad range fails here, not in a task
    if kind == "interactions":
        return _interactions(booster, ddf, iteration_range)
    meta = _prediction_meta(booster, ddf._meta, name, output_margin, kind, iteration_range)
    return ddf.map_partitions(_predict_partition, _model(booster), output_margin, name, kind,
                              iteration_range, base_margin, meta=meta)


def transform(booster, data, name: str = "prediction", output_margin: bool = False,
              iteration_range=None, base_margin=None):
    """Lazy ``data`` with the prediction column(s) appended (ready for ``to_parquet``): the same
    index and divisions; columns other than the features ride along."""
    ddf = as_dask_frame(data, "prediction data")
    meta = ddf._meta
    base_margin = column_name(base_margin, "base_margin")
    if base_margin is None:
        booster._features(meta, passengers_allowed=True)
    else:
        booster._predict(meta, output_margin, name, True, "value", iteration_range, base_margin)
    booster._tree_range(iteration_range)
    new = booster.output_columns(name, output_margin)
    clash = [c for c in new if c in set(map(str, meta.columns))]
    if clash:
        raise ValueError(f"transform: column(s) {clash} already exist in the data; pass "
                         f"another name=")
    out_meta = meta.assign(**{c: _empty_column(meta, "float64", c) for c in new})
    return ddf.map_partitions(_transform_partition, _model(booster), output_margin, name,
                              iteration_range, base_margin, meta=out_meta)
