"""Model files are untrusted input: every entry of a parsed model file checked before use.

``check_model(d)`` runs on the parsed JSON of a model file before any array is built from it, so
that nothing a file says can make prediction read or write out of bounds (the numba and CUDA
walks do not check indices), loop forever (a child that points back up the tree) or silently
return garbage (a split on a feature the model does not have). It raises ``ModelFileError`` (a
ValueError) naming the entry at fault: ``trees[3].left[5]``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import _dtypes
from .cuts import Cuts

_INT_FIELDS = ("feature", "bin_threshold", "left", "right")
_FLOAT_FIELDS = ("threshold", "value", "gain", "cover")
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_INT32_MAX = int(np.iinfo(np.int32).max)
MAX_DEPTH = _dtypes.MAX_TREE_DEPTH  # deeper trees are crafted


class ModelFileError(ValueError):
    """A model file entry that is missing, of the wrong type or inconsistent with the rest."""


def check_model(d: dict, n_groups: int) -> None:
    """Check a parsed gbflow model file (``format`` and ``version`` already checked, ``params``
    already made into ``n_groups`` outputs) in full; ModelFileError naming the first entry at
    fault. Reads only ``d``; nothing is built or changed."""
    names = _entry(d, "feature_names", list)
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise ModelFileError(f"feature_names[{i}] is {name!r}, not a string")
    if len(set(names)) != len(names):
        raise ModelFileError("feature_names has duplicate names")
    n_features = len(names)
    n_value_bins = _check_cuts(_entry(d, "cuts", dict), n_features)
    cuts = Cuts.from_dict(d["cuts"])
    categories = _check_categories(d.get("categories") or {}, names, n_value_bins)
    by_value = d.get("by_value") or []
    if not isinstance(by_value, list) or any(
            not isinstance(name, str) or name not in (d.get("categories") or {}) or
            any(isinstance(v, str) for v in d["categories"][name]) for name in by_value):
        raise ModelFileError("by_value is not a list of categorical features with numeric "
                             "categories")
    base = _entry(d, "base_margin", list)
    if len(base) != n_groups:
        raise ModelFileError(f"base_margin has {len(base)} values; the objective has {n_groups} "
                             f"output(s)")
    for i, v in enumerate(base):
        _finite(v, f"base_margin[{i}]")
    for key in ("label_name", "weight_name"):
        if d.get(key) is not None and not isinstance(d[key], str):
            raise ModelFileError(f"{key} is {d[key]!r}, not a string or null")
    trees = _entry(d, "trees", list)
    if len(trees) % n_groups:
        raise ModelFileError(f"the model has {len(trees)} trees, not a whole number of rounds of "
                             f"{n_groups} tree(s) (one per output)")
    for t, tree in enumerate(trees):
        _check_tree(tree, f"trees[{t}]", t % n_groups, cuts, n_value_bins, categories, names)
    rounds = len(trees) // n_groups
    best = d.get("best_iteration")
    if best is not None and (not _is_int(best) or not 0 <= best < max(rounds, 1)):
        raise ModelFileError(f"best_iteration {best!r} is not a round of the model's {rounds}")
    if d.get("best_score") is not None and d["best_score"] not in NON_FINITE_SCORES:
        _number(d["best_score"], "best_score")
    attributes = d.get("attributes", {})
    if not isinstance(attributes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()):
        raise ModelFileError("attributes is not a mapping of strings to strings")
    if not isinstance(d.get("made_up_names", False), bool):
        raise ModelFileError("made_up_names is not true or false")


def _entry(d: dict, key: str, kind: type, where: str = ""):
    if key not in d:
        raise ModelFileError(f"{where}{key} is missing")
    value = d[key]
    if not isinstance(value, kind):
        raise ModelFileError(f"{where}{key} is a {type(value).__name__}, not a "
                             f"{kind.__name__}")
    return value


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


# best_score values standard JSON has no number for (a metric's inf or nan: mape at a zero
# label, a custom metric), written as XGBoost writes its attributes: as text
NON_FINITE_SCORES = ("inf", "-inf", "nan")


def best_score_to_json(score):
    """A model file's best_score entry: the float, or its text where it is not finite."""
    if score is None or math.isfinite(score):
        return score
    return "nan" if math.isnan(score) else ("inf" if score > 0 else "-inf")


def best_score_from_json(entry):
    """The float (or None) of a checked best_score entry (``best_score_to_json``)."""
    return None if entry is None else float(entry)


def _number(v, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ModelFileError(f"{where} is {v!r}, not a number")
    try:
        return float(v)
    except OverflowError:  # an integer literal beyond every float
        raise ModelFileError(f"{where} is an integer beyond float range") from None


def _finite(v, where: str, limit: float = _FLOAT32_MAX) -> float:
    x = _number(v, where)
    if not math.isfinite(x) or abs(x) > limit:
        raise ModelFileError(f"{where} is {v!r}, not a finite value (|value| <= {limit:g})")
    return x


def _int_list(values, where: str, low: int, high: int) -> np.ndarray:
    """(n,) int64 of a list of integers each in [low, high]."""
    if not set(map(type, values)) <= {int}:  # (bool is a subclass of int, not int)
        at = next(i for i, v in enumerate(values) if type(v) is not int)
        raise ModelFileError(f"{where}[{at}] is {values[at]!r}, not an integer")
    array = np.array([v if low <= v <= high else low - 1 for v in values], dtype=np.int64)
    bad = np.flatnonzero(array < low)
    if len(bad):
        raise ModelFileError(f"{where}[{bad[0]}] is {values[bad[0]]}, outside [{low}, {high}]")
    return array


def _float_list(values, where: str) -> np.ndarray:
    """(n,) float64 of a list of finite numbers within float32's range."""
    if not set(map(type, values)) <= {int, float}:
        at = next(i for i, v in enumerate(values) if type(v) not in (int, float))
        raise ModelFileError(f"{where}[{at}] is {values[at]!r}, not a number")
    try:
        array = np.array(values, dtype=np.float64)
    except OverflowError:
        raise ModelFileError(f"{where} holds an integer beyond float range") from None
    bad = np.flatnonzero(~(np.abs(array) <= _FLOAT32_MAX))
    if len(bad):
        raise ModelFileError(f"{where}[{bad[0]}] is {values[bad[0]]!r}, not a finite float32")
    return array


def _check_cuts(cuts: dict, n_features: int) -> np.ndarray:
    """(n_features,) value bins per feature of the ``cuts`` entry, after checking it."""
    max_bin = cuts.get("max_bin")
    if not _is_int(max_bin) or not 2 <= max_bin <= 2**16:
        raise ModelFileError(f"cuts.max_bin is {max_bin!r}, not an integer in [2, 65536]")
    offsets = _int_list(_entry(cuts, "offsets", list, "cuts."), "cuts.offsets", 0, 2**62)
    values = _float_list(_entry(cuts, "values", list, "cuts."), "cuts.values")
    if len(offsets) != n_features + 1 or offsets[0] != 0 or offsets[-1] != len(values):
        raise ModelFileError(f"cuts.offsets must be {n_features + 1} offsets from 0 to the "
                             f"{len(values)} cut values (one feature per name in feature_names)")
    widths = np.diff(offsets)
    if np.any(widths < 0) or np.any(widths + 1 > _dtypes.MAX_BIN_ID):
        raise ModelFileError("cuts.offsets are not ascending, or a feature has more cuts than "
                             "bins can number")
    as_float32 = values.astype(np.float32)
    for f in range(n_features):
        mine = as_float32[offsets[f]:offsets[f + 1]]
        if np.any(mine[1:] <= mine[:-1]):
            raise ModelFileError(f"cuts.values of feature {f} are not strictly ascending")
    return (widths + 1).astype(np.int64)


def _category_kind(value) -> str | None:
    """"string", "boolean" or "number" for a category value read from JSON; None otherwise."""
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    return "number" if isinstance(value, numbers.Real) else None


def _check_categories(categories, names: list, n_value_bins: np.ndarray) -> dict:
    """{feature index: number of categories} of the ``categories`` entry, after checking it."""
    if not isinstance(categories, dict):
        raise ModelFileError("categories is not a mapping of feature names to category lists")
    counts = {}
    for name, values in categories.items():
        if name not in names:
            raise ModelFileError(f"categories names {name!r}, which is not in feature_names")
        if not isinstance(values, list):
            raise ModelFileError(f"categories[{name!r}] is not a list")
        # one kind a feature (none: a column that held no category); a bool column's categories
        # are written as JSON's true and false
        kinds = {_category_kind(v) for v in values}
        if len(kinds) > 1 or None in kinds:
            raise ModelFileError(f"categories[{name!r}] mixes kinds or holds values that are "
                                 f"neither numbers, strings nor booleans")
        if any(isinstance(v, float) and not math.isfinite(v) for v in values) or \
                any(b <= a for a, b in zip(values, values[1:])):
            raise ModelFileError(f"categories[{name!r}] is not sorted and distinct")
        f = names.index(name)
        if n_value_bins[f] != max(len(values), 1):
            raise ModelFileError(f"categories[{name!r}] has {len(values)} categories but the "
                                 f"cuts give feature {name!r} {n_value_bins[f]} bins")
        counts[f] = len(values)
    return counts


def _check_tree(tree, where: str, group: int, cuts: Cuts, n_value_bins: np.ndarray,
                categories: dict, names: list) -> None:
    """One tree entry: its group, equal-length node arrays of the right types, a tree shape
    (every node but the root the child of exactly one node with a smaller id), features and
    bin thresholds within the cuts, categorical sets within their category lists."""
    if not isinstance(tree, dict):
        raise ModelFileError(f"{where} is not a mapping")
    if tree.get("group", 0) != group or not _is_int(tree.get("group", 0)):
        raise ModelFileError(f"{where}.group is {tree.get('group')!r}; tree {where} of the "
                             f"model's round order adds to output {group}")
    lists = {name: _entry(tree, name, list, f"{where}.") for name in
             _INT_FIELDS + _FLOAT_FIELDS + ("default_left",)}
    n = len(lists["feature"])
    if n == 0 or n > _INT32_MAX or any(len(v) != n for v in lists.values()):
        raise ModelFileError(f"{where}'s node arrays are empty or of different lengths")
    if not set(map(type, lists["default_left"])) <= {bool}:
        raise ModelFileError(f"{where}.default_left holds values that are not true/false")
    feature = _int_list(lists["feature"], f"{where}.feature", -1, len(n_value_bins) - 1)
    left = _int_list(lists["left"], f"{where}.left", -1, n - 1)
    right = _int_list(lists["right"], f"{where}.right", -1, n - 1)
    bins = _int_list(lists["bin_threshold"], f"{where}.bin_threshold", 0, _dtypes.MAX_BIN_ID)
    for name in _FLOAT_FIELDS:
        _float_list(lists[name], f"{where}.{name}")
    inner = feature != _dtypes.LEAF
    ids = np.arange(n)
    if np.any(left[~inner] != -1) or np.any(right[~inner] != -1):
        node = ids[~inner & ((left != -1) | (right != -1))][0]
        raise ModelFileError(f"{where}: leaf node {node} has children")
    bad = inner & ((left <= ids) | (right != left + 1))
    if bad.any():
        raise ModelFileError(f"{where}: node {ids[bad][0]}'s children are not gbflow's layout "
                             f"(the right child right after the left one, both after the node)")
    parents = np.bincount(np.concatenate([left[inner], right[inner]]), minlength=n)
    if parents[0] != 0 or np.any(parents[1:] != 1):
        node = 0 if parents[0] else 1 + int(np.flatnonzero(parents[1:] != 1)[0])
        raise ModelFileError(f"{where}: node {node} is the child of {parents[node]} nodes; a "
                             f"tree's nodes other than the root have one parent each")
    depth, frontier = 0, np.array([0])
    while True:  # breadth-first: at most MAX_DEPTH + 1 vectorised steps
        frontier = frontier[inner[frontier]]
        if not len(frontier):
            break
        depth += 1
        if depth > MAX_DEPTH:
            raise ModelFileError(f"{where} is deeper than {MAX_DEPTH} levels (max_depth's "
                                 f"largest value)")
        frontier = np.concatenate([left[frontier], right[frontier]])
    if np.any(np.array(lists["cover"], dtype=np.float64) < 0):
        raise ModelFileError(f"{where}.cover has negative values")
    by_bins = inner.copy()  # the splits walked by bin thresholds: all but the category sets
    set_nodes = tree.get("categorical_nodes", [])
    by_bins[[k for k in set_nodes if _is_int(k) and 0 <= k < n] if isinstance(set_nodes, list)
            else []] = False
    if not by_bins.any():
        _check_tree_categories(tree, where, feature, inner, categories, names)
        return
    over = by_bins & (bins > n_value_bins[np.maximum(feature, 0)] - 1)
    if over.any():
        node = ids[over][0]
        raise ModelFileError(f"{where}: node {node}'s bin_threshold {bins[node]} is beyond "
                             f"feature {names[feature[node]]!r}'s {n_value_bins[feature[node]]} "
                             f"value bins")
    nodes = np.flatnonzero(by_bins)
    expected = cuts.split_thresholds(feature[nodes], bins[nodes])
    given = np.array(lists["threshold"], dtype=np.float64)[nodes].astype(np.float32)
    wrong = np.flatnonzero(expected != given)
    if len(wrong):
        node = nodes[wrong[0]]
        raise ModelFileError(f"{where}: node {node}'s threshold {float(given[wrong[0]]):g} is "
                             f"not the cut of its bin_threshold {bins[node]} "
                             f"({float(expected[wrong[0]]):g})")
    _check_tree_categories(tree, where, feature, inner, categories, names)


def _check_tree_categories(tree: dict, where: str, feature: np.ndarray, inner: np.ndarray,
                           categories: dict, names: list) -> None:
    nodes, sets = tree.get("categorical_nodes", []), tree.get("categories", [])
    if not isinstance(nodes, list) or not isinstance(sets, list) or len(nodes) != len(sets):
        raise ModelFileError(f"{where}.categorical_nodes and .categories are not lists of one "
                             f"length")
    nodes = _int_list(nodes, f"{where}.categorical_nodes", 0, len(feature) - 1)
    if len(set(nodes.tolist())) != len(nodes):
        raise ModelFileError(f"{where}.categorical_nodes has repeated nodes")
    for node, members in zip(nodes.tolist(), sets):
        f = int(feature[node])
        if not inner[node] or f not in categories:
            raise ModelFileError(f"{where}: node {node} has a category set but does not split "
                                 f"on a categorical feature")
        if not isinstance(members, list):
            raise ModelFileError(f"{where}.categories of node {node} is not a list")
        positions = _int_list(members, f"{where}.categories of node {node}", 0,
                              categories[f] - 1)
        if np.any(np.diff(positions) <= 0):
            raise ModelFileError(f"{where}.categories of node {node} are not ascending and "
                                 f"distinct (feature {names[f]!r})")
