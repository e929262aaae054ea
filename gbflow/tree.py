"""One regression tree as flat node arrays: built from level records, and its JSON form."""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _dtypes

_FIELDS = {  # name -> dtype of the flat node arrays, in model-file order
    "feature": _dtypes.NODE, "bin_threshold": np.int32, "threshold": _dtypes.CUT,
    "default_left": np.bool_, "left": _dtypes.NODE, "right": _dtypes.NODE,
    "value": _dtypes.MARGIN, "gain": np.float64, "cover": np.float64,
}


@dataclasses.dataclass
class Tree:
    """Nodes in breadth-first order (best-first trees: in the order they split, as XGBoost
    numbers them), node 0 the root, children after their parent; all arrays (n_nodes,), host.

    feature: split feature (-1 for a leaf). bin_threshold: bins 1..t go left. threshold: float32
    cut, ``x < threshold`` goes left (the same test as the bins). default_left: where NaN goes.
    left/right: child node ids (-1 for a leaf); right = left + 1 (prediction relies on it).
    value: leaf value (learning rate applied; on inner nodes the value the node would have as a
    leaf). gain: loss reduction of the split (0 on leaves). cover: hessian sum of the node.
    group: the output column (class) this tree adds to. categories: {node id: (k,) int32
    ascending positions in its feature's category list (``gbflow.categories``)} of the nodes
    that split on a categorical feature: those categories go right, the others left, missing
    values by default_left (bin_threshold and threshold are 0 and not read there).
    """

    feature: np.ndarray
    bin_threshold: np.ndarray
    threshold: np.ndarray
    default_left: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray
    gain: np.ndarray
    cover: np.ndarray
    group: int = 0
    categories: dict = dataclasses.field(default_factory=dict)

    @property
    def n_nodes(self) -> int:
        return len(self.feature)

    @property
    def is_leaf(self) -> np.ndarray:
        return self.feature == _dtypes.LEAF

    def node_arrays(self) -> list[np.ndarray]:
        """The node arrays, in model-file order."""
        return [getattr(self, name) for name in _FIELDS]

    def to_dict(self) -> dict:
        d = {"group": int(self.group)}
        for name in _FIELDS:
            values = getattr(self, name)
            d[name] = [bool(v) for v in values] if name == "default_left" else \
                [int(v) for v in values] if values.dtype.kind == "i" else [float(v) for v in values]
        if self.categories:  # only then: trees without categorical splits keep their bytes
            nodes = sorted(self.categories)
            d["categorical_nodes"] = nodes
            d["categories"] = [[int(c) for c in self.categories[n]] for n in nodes]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Tree":
        """A tree from its model-file entry, checked first by ``model_check.check_model``."""
        arrays = {name: np.asarray(d[name], dtype=dtype) for name, dtype in _FIELDS.items()}
        categories = {int(n): np.asarray(c, dtype=np.int32)
                      for n, c in zip(d.get("categorical_nodes", []), d.get("categories", []))}
        return cls(group=int(d.get("group", 0)), categories=categories, **arrays)

    @classmethod
    def concatenate_levels(cls, levels: list[dict], group: int) -> "Tree":
        """Join per-level dicts of node arrays (same keys as the fields) into one tree."""
        arrays = {name: np.concatenate([lv[name] for lv in levels]).astype(dtype)
                  for name, dtype in _FIELDS.items()}
        categories, first = {}, 0
        for lv in levels:
            categories.update({first + k: v for k, v in lv.get("categories", {}).items()})
            first += len(lv["feature"])
        return cls(group=group, categories=categories, **arrays)


def write_splits(arrays: dict, at, cuts, feature, bin_threshold, default_left, gain,
                 left_id) -> None:
    """Write splits into a dict of node arrays (the fields' names), in place, at positions
    ``at``: their global feature ids, bin thresholds (and the float thresholds ``cuts`` makes of
    them), default directions, gains and left child ids (the right child follows the left)."""
    arrays["feature"][at] = feature
    arrays["bin_threshold"][at] = bin_threshold
    arrays["threshold"][at] = cuts.split_thresholds(feature, bin_threshold)
    arrays["default_left"][at] = default_left
    arrays["gain"][at] = gain
    arrays["left"][at] = left_id
    arrays["right"][at] = left_id + 1


def level_arrays(cuts, value, cover, at, sp, feature, bin_threshold, default_left, gain,
                 left_id, right_bins=None) -> dict:
    """One level's node arrays (a dict for ``Tree.concatenate_levels``) in id order (a node's id
    is its place in the tree), from arrays in the level's own order: value, cover (n,) float64
    per node, ``at`` each node's place in id order; sp (n_split,) the positions of the nodes
    that split, with their global feature ids, bin thresholds (written as float thresholds with
    ``cuts``), default directions, gains and left child ids (None when none split).
    right_bins: None, or (n_split,  n_bins) bool, the bins going right of the categorical splits
    (rows of False for the others): the level's ``categories`` entry."""
    n = len(value)
    level = {
        "feature": np.full(n, _dtypes.LEAF), "bin_threshold": np.zeros(n),
        "threshold": np.zeros(n), "default_left": np.zeros(n, dtype=bool),
        "left": np.full(n, -1), "right": np.full(n, -1), "value": value,
        "gain": np.zeros(n), "cover": cover,
    }
    if len(sp):
        write_splits(level, sp, cuts, feature, bin_threshold, default_left, gain, left_id)
    for name, values in level.items():
        level[name] = np.empty_like(values)
        level[name][at] = values
    if right_bins is not None:
        on_categories = np.flatnonzero(right_bins.any(axis=1))
        level["threshold"][at[sp[on_categories]]] = 0.0
        level["categories"] = {int(at[sp[j]]): (np.flatnonzero(right_bins[j]) - 1)
                               .astype(np.int32) for j in on_categories}
    return level
