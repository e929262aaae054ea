"""Categorical features' categories: one sorted list of values per feature over every part and
process, and the parts' codes moved onto it.

A categorical feature's column of X holds positions in a list of category *values* sorted by
value (``backend.frames.observed_categories``): frames that order or declare their categories
differently give the same lists. Each part (a frame, a Dask partition, a worker's joined
partitions) starts with the categories it holds; training takes the union over all parts and
processes, sorted, so the lists, and the model, do not depend on the partitioning.

Numeric columns become categorical features too when XGBoost's ``feature_types`` marks them
"c" (arrays of category codes, say): their distinct values are the categories
(``encode_values``), found and matched by value like a category column's.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import _dtypes
from .backend import backend_for
from .backend.arrays import to_host
from .backend.frames import check_category_kind

# Bins are uint16 at most (``_dtypes.bin_dtype``): the missing bin and one bin per category.
MAX_CATEGORIES = 2**16 - 1
# XGBoost's feature_types entries: "c" a categorical feature, the others numeric ones
FEATURE_TYPES = ("q", "c", "int", "float", "i")


def parse_feature_types(value, enable_categorical: bool = True) -> tuple | None:
    """XGBoost's ``feature_types`` parameter checked: None, or a tuple of one entry of
    ``FEATURE_TYPES`` per feature. ValueError naming an entry gbflow does not know, or a "c"
    when ``enable_categorical`` is False."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise TypeError(f"parameter feature_types must be a list of one type per feature "
                        f"({', '.join(map(repr, FEATURE_TYPES))}), got {value!r}")
    for i, entry in enumerate(value):
        if entry not in FEATURE_TYPES:
            raise ValueError(f"parameter feature_types[{i}] is {entry!r}; each entry is one of "
                             f"{', '.join(map(repr, FEATURE_TYPES))} ('c': categorical)")
    if "c" in value and not enable_categorical:
        raise ValueError("parameter feature_types marks categorical features ('c') but "
                         "enable_categorical=False; leave it True (the default) to train on them")
    return tuple(value)


def typed_categorical(feature_types: tuple | None, features: list, what: str) -> list[str]:
    """The features ``feature_types`` marks "c", in feature order; ValueError when it does not
    list one type per feature of ``what``."""
    if feature_types is None:
        return []
    if len(feature_types) != len(features):
        raise ValueError(f"parameter feature_types lists {len(feature_types)} types but {what} "
                         f"has {len(features)} features ({features[:5]}...)")
    return [name for name, kind in zip(features, feature_types) if kind == "c"]


# float32 features hold whole numbers exactly up to 2**24: larger category values could merge
LARGEST_VALUE = 2.0**24


def by_value_features(collective, parts: list, feature_types) -> tuple:
    """The features categorical by value (``DataSet.by_value``: feature_types "c" on numeric
    columns) of any part of any process, in feature order; () without ``feature_types``
    (then no reduction: every process skips it alike)."""
    if feature_types is None:
        return ()
    names = parts[0].feature_names
    found = {n for process in collective.allgather([p.by_value for p in parts])
             for part in process for n in part}
    return tuple(n for n in names if n in found)


def encode_values(X, columns: list[int], names: list[str], what: str,
                  lists: dict | None = None, copy: bool = True) -> tuple:
    """Numeric columns of X (n, F) float32 (host or device; NaN missing) made categorical: each
    value becomes its position in the sorted list of the column's distinct values (``lists``
    [name] where given, a model's: values not in it become NaN, unseen categories). columns:
    positions in X; names: their features. Returns (X so encoded: a copy, so that X, which may
    be the caller's array, is not written, or X itself with ``copy`` False (a matrix made from
    a frame); {name: sorted values}, host float64; -0.0 is 0.0).
    Without ``lists`` (training), ValueError naming the feature of ``what`` when a column holds
    infinite values or values of magnitude 2**24 or more (float32 features could have merged
    neighbouring ones); with them such values are unseen categories."""
    xp = backend_for(X).xp
    X = X.copy() if copy else X
    found = {}
    for j, name in zip(columns, names):
        column = X[:, j].astype(np.float64) + 0.0  # -0.0 and 0.0: one category
        present = column[~xp.isnan(column)]
        if lists is None and len(present) and not float(xp.abs(present).max()) < LARGEST_VALUE:
            raise ValueError(f"{what}: feature {name!r} is categorical (feature_types 'c') "
                             f"but holds values of magnitude 2**24 or more (or infinite); its "
                             f"values are its categories: give codes below 2**24, or a "
                             f"category column")
        values = to_host(xp.unique(present)) if lists is None else \
            np.asarray(lists[name], dtype=np.float64)
        found[name] = values
        if not len(values):
            X[:, j] = np.float32(np.nan)
            continue
        on_device = xp.asarray(values)
        at = xp.minimum(xp.searchsorted(on_device, column), len(values) - 1)
        X[:, j] = xp.where(on_device[at] == column, at.astype(np.float32), np.float32(np.nan))
    return X, found


def export_codes(feature_names: list, lists: dict, by_value) -> dict:
    """{feature position: (K,) int64 code of each category position} for the features
    categorical by value (``Booster.by_value``): formats that read a row's raw value as its
    category code (XGBoost's, Treelite's) get these codes in their sets, not gbflow's
    positions (a category column's frames carry the positions as codes). ValueError naming a
    feature whose categories are not whole numbers in [0, 2**31), which such formats cannot
    read."""
    codes = {}
    for name in by_value:
        values = np.asarray(lists[name], dtype=np.float64)
        if len(values) and not (np.all(values == np.floor(values)) and values.min() >= 0
                                and values.max() < 2**31):
            raise ValueError(f"feature {name!r} (feature_types 'c') has categories that are "
                             f"not whole numbers in [0, 2**31) (e.g. {values[:3].tolist()}); "
                             f"XGBoost and Treelite read a row's value as its category code")
        codes[list(feature_names).index(name)] = values.astype(np.int64)
    return codes


def export_thresholds(feature, threshold, codes: dict) -> np.ndarray:
    """float32 thresholds of value-order splits with ``export_codes``' features' moved from
    positions to values: a cut at position p (positions below p go left) is the p-th value
    (the values below it go left); other features' thresholds, and the one below every value,
    as they are. feature, threshold: (n,) arrays of a tree's nodes."""
    out = np.asarray(threshold, dtype=_dtypes.CUT).copy()
    for f, values in codes.items():
        at = (np.asarray(feature) == f) & (out >= 1) & (out < len(values))
        out[at] = values[out[at].astype(np.int64)]
    return out


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
    ({name: sorted values} both), in place. TypeError naming a feature whose categories are of
    another kind than the target's (numbers against strings: no value would match, and every
    row would silently become missing)."""
    xp = backend_for(X).xp
    for name, values in target.items():
        if name in own:
            check_category_kind(name, own[name], values)
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
