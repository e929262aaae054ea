"""Categorical features' categories: one sorted list of values per feature over every part and
process, and the parts' codes moved onto it.

A categorical feature's column of X holds positions in a list of category *values* sorted by
value (``backend.frames.observed_categories``): frames that order or declare their categories
differently give the same lists. Each part (a frame, a Dask partition, a worker's joined
partitions) starts with the categories it holds; training takes the union over all parts and
processes, sorted, so the lists, and the model, do not depend on the partitioning.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import _dtypes
from .backend import backend_for

# Bins are uint16 at most (``_dtypes.bin_dtype``): the missing bin and one bin per category.
MAX_CATEGORIES = 2**16 - 1


def union(lists) -> np.ndarray:
    """The sorted distinct values of several sorted category lists (host arrays)."""
    lists = [np.asarray(v) for v in lists]
    non_empty = [v for v in lists if len(v)]
    if not non_empty:
        return lists[0][:0] if lists else np.zeros(0)
    return np.unique(np.concatenate(non_empty))


def recode(xp, X, feature: int, own: np.ndarray, target: np.ndarray) -> None:
    """Column ``feature`` of X (n, F) float32 (host or device): positions in ``own`` become
    positions in ``target`` (both sorted host value arrays), in place; values absent from
    ``target`` and NaN become NaN."""
    if len(own) == 0 or np.array_equal(own, target):
        return
    lookup = pd.Index(target).get_indexer(pd.Index(own)).astype(_dtypes.FEATURE)
    lookup[lookup < 0] = np.nan
    column = X[:, feature]
    present = ~xp.isnan(column)
    at = xp.where(present, column, 0).astype(np.int64)
    X[:, feature] = xp.where(present, xp.asarray(lookup)[at], np.float32(np.nan))


def check_same_features(found: list[dict], names: list[str], pieces: str = "partitions"
                        ) -> list[str]:
    """The categorical features (in feature order) of every part's ``categories``; TypeError
    naming a feature that is categorical in some parts and not in others (a category column in
    one partition, or batch: ``pieces``, and a numeric one in another)."""
    every = [set(d) for d in found]
    if not every:
        return []
    everywhere, somewhere = set.intersection(*every), set.union(*every)
    if somewhere != everywhere:
        odd = sorted(somewhere - everywhere)
        raise TypeError(f"feature column(s) {odd} are category dtype in some {pieces} and not "
                        f"in others; give them one dtype everywhere (.astype('category'))")
    return [name for name in names if name in everywhere]


def join_pieces(X, feature_names: list[str], pieces: list, what: str = "partitions") -> dict:
    """Pieces of a table copied one after the other into X (n, F) float32, each with its own
    category lists: every piece's codes moved onto the union of the lists, in place. pieces:
    (row slice of X, its ``categories``) each; what: what errors call them. Returns the union
    ({name: sorted values}; empty without categorical features)."""
    names = check_same_features([c for _, c in pieces], feature_names, what)
    if not names:
        return {}
    try:
        joined = {name: union(c[name] for _, c in pieces) for name in names}
    except TypeError:
        raise TypeError(f"the categories of feature(s) {names} mix numbers and strings over the "
                        f"{what}; give each column one kind of category") from None
    for rows, own in pieces:
        recode_columns(X[rows], feature_names, own, joined)
    return joined


def unify(collective, parts: list, fixed: dict | None = None) -> dict[str, np.ndarray]:
    """Give every part of every process the same category lists: the union of all parts' lists
    over every process (one all-gather), or ``fixed`` (a model's, when training continues it:
    categories it never saw become missing). Recodes each part's X in place and sets its
    ``categories``. Returns {name: sorted values}. Raises ValueError naming a feature with more
    than ``MAX_CATEGORIES`` categories."""
    names = parts[0].feature_names
    gathered = collective.allgather([p.categories for p in parts])
    every_part = [d for process in gathered for d in process]
    categorical = check_same_features(every_part, names)
    if not categorical:
        return {}
    if fixed is not None:
        target = {name: np.asarray(fixed[name]) for name in categorical}
    else:
        try:
            target = {name: union(d[name] for d in every_part) for name in categorical}
        except TypeError:
            raise TypeError(f"the categories of feature(s) {categorical} mix numbers and strings "
                            f"over the partitions; give each column one kind of category") \
                from None
    for name, values in target.items():
        if len(values) > MAX_CATEGORIES:
            raise ValueError(f"categorical feature {name!r} has {len(values)} categories; gbflow "
                             f"takes at most {MAX_CATEGORIES} per feature")
    for part in parts:
        recode_part(part, target)
    return target


def recode_part(part, target: dict) -> None:
    """Move one ``DataSet``'s categorical columns onto the lists of ``target`` (in place)."""
    recode_columns(part.X, part.feature_names, part.categories, target)
    part.categories = dict(target)


def recode_columns(X, feature_names: list, own: dict, target: dict) -> None:
    """X's (n, F) categorical columns, coded in the lists ``own``, moved onto ``target``'s
    ({name: sorted values} both), in place."""
    xp = backend_for(X).xp
    for name, values in target.items():
        if name in own:
            recode(xp, X, feature_names.index(name), own[name], values)


def category_cuts(n_categories: int) -> np.ndarray:
    """The cut points that give category position k (0-based) bin k + 1: 1, 2, ..., K - 1."""
    return np.arange(1, max(n_categories, 1), dtype=_dtypes.CUT)


def to_json(categories: dict) -> dict:
    """{name: list of plain Python values} for the model file."""
    return {name: np.asarray(values).tolist() for name, values in categories.items()}


def from_json(d: dict | None) -> dict[str, np.ndarray]:
    """The model file's categories back as sorted host arrays."""
    return {name: np.asarray(values) for name, values in (d or {}).items()}
