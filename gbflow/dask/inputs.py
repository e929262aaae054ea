"""Dask collections as training, evaluation and prediction inputs, checked on their metas."""
from __future__ import annotations

from .. import inputs
from .messages import Table


def _dd():
    import dask.dataframe as dd
    return dd


def as_dask_frame(data, what: str):
    """``data`` as a Dask DataFrame; a pandas/cuDF frame (only for evals) becomes one partition."""
    dd = _dd()
    if isinstance(data, dd.DataFrame):
        return data
    if inputs.is_dask_collection(data):
        hint = ("; use .to_frame()" if isinstance(data, dd.Series) else
                "; use dask.dataframe.from_dask_array(..., columns=[...]) and name the label "
                "column" if type(data).__name__ == "Array" else "")
        raise TypeError(f"{what} is a Dask {type(data).__name__}; gbflow takes Dask "
                        f"DataFrames (features, label and weight as columns){hint}")
    if what != "training data" and type(data).__name__ == "DataFrame" and \
            type(data).__module__.split(".")[0] in ("pandas", "cudf"):
        return dd.from_pandas(data, npartitions=1)  # a small in-memory evaluation set
    raise TypeError(f"{what} must be a Dask DataFrame like the training data, got "
                    f"{type(data).__name__}")


def column_name(value, role: str):
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"with a Dask DataFrame, {role} must name one of its columns (a str), got "
                    f"{type(value).__name__}; add the values as a column first, e.g. "
                    f"ddf.assign({role}=...)")


def _table(ddf, what: str) -> Table:
    return Table(what=what, columns=tuple(str(c) for c in ddf._meta.columns))


def check(data, label, weight, evals, base_margin=None, qid=None, feature_types=None):
    """Everything that can be checked on the collections' metas, before any partition is computed.

    Returns (training frame, feature names, its Table, [(eval frame, name, Table)]); an
    evaluation set that is the training frame itself comes as (None, name, None): training's
    own margins serve it. Raises TypeError/KeyError/ValueError naming the collection and column
    at fault. feature_types: XGBoost's (``inputs.load``; checked against the features here).
    """
    ddf = as_dask_frame(data, "training data")
    label, weight = column_name(label, "label"), column_name(weight, "weight")
    base_margin = column_name(base_margin, "base_margin")
    qid = column_name(qid, "qid")
    meta = inputs.load(ddf._meta, label, weight, "training data", allow_empty=True,
                       base_margin=base_margin, qid=qid, feature_types=feature_types)
    features = meta.feature_names
    checked = []
    for i, entry in enumerate(evals or []):
        frame, name, what = inputs.eval_pair(entry, i)
        if frame is data:
            checked.append((None, name, None))
            continue
        frame = as_dask_frame(frame, what)
        inputs.load(frame._meta, label, weight, what, feature_names=features, allow_empty=True,
                    base_margin=base_margin, qid=qid, feature_types=feature_types)
        checked.append((frame, name, _table(frame, what)))
    return ddf, features, _table(ddf, "training data"), checked
