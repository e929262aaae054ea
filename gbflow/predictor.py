"""Prediction on raw feature values: trees flattened into one set of node arrays, walked per row."""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _dtypes
from .csr import CSR
from .tree import Tree


@dataclasses.dataclass
class FlatForest:
    """All trees' nodes in one set of host arrays (node ids made absolute), in training order.

    feature int32, threshold float32, bin_threshold int32 (the same split in bins of the cuts
    the trees were grown on), default_left bool, left/right int32 (right = left + 1 on inner
    nodes, as in ``Tree``: the CPU kernels step to left + 1 without a branch), value float64,
    each (n_nodes,).
    tree_root int64 (n_trees,), tree_group int32 (n_trees,).
    """

    feature: np.ndarray
    threshold: np.ndarray
    bin_threshold: np.ndarray
    default_left: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray
    tree_root: np.ndarray
    tree_group: np.ndarray

    @classmethod
    def from_trees(cls, trees: list[Tree]) -> "FlatForest":
        sizes = np.array([t.n_nodes for t in trees], dtype=np.int64)
        roots = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(trees) \
            else np.empty(0, dtype=np.int64)

        def joined(name, dtype):
            if not trees:
                return np.empty(0, dtype=dtype)
            return np.concatenate([getattr(t, name) for t in trees]).astype(dtype)

        def children(name):
            if not trees:
                return np.empty(0, dtype=_dtypes.NODE)
            parts = [np.where(getattr(t, name) >= 0, getattr(t, name) + r, -1)
                     for t, r in zip(trees, roots)]
            return np.concatenate(parts).astype(_dtypes.NODE)

        return cls(feature=joined("feature", _dtypes.NODE),
                   threshold=joined("threshold", _dtypes.CUT),
                   bin_threshold=joined("bin_threshold", np.int32),
                   default_left=joined("default_left", np.bool_), left=children("left"),
                   right=children("right"), value=joined("value", _dtypes.MARGIN), tree_root=roots,
                   tree_group=np.array([t.group for t in trees], dtype=np.int32))


@dataclasses.dataclass
class BinnedRows:
    """Rows binned with the cuts the trees are grown on: bins (n_rows, >= n_features)
    uint8/uint16 on the device (``binning.quantize``). Trees walk them by their bin thresholds,
    which agree with the raw values' tests exactly, in a quarter of the float32 matrix's
    memory: how evaluation sets are kept and predicted round after round."""

    bins: object

    @property
    def shape(self) -> tuple:
        return tuple(self.bins.shape)


def add_trees(backend, X, forest: FlatForest, margin):
    """margin += every tree of ``forest`` on X, in tree order (in place; returns margin).

    X: (n_rows, F) float32, a ``CSR`` (absent entries missing) or ``BinnedRows`` (binned with
    the forest's cuts) on the device; margin: (n_rows, n_groups) float64 on the device.
    """
    if len(forest.tree_root) == 0 or X.shape[0] == 0:
        return margin
    # host arrays: the kernels put them on their device (the GPU's in one copy)
    arrays = [forest.feature, forest.threshold, forest.default_left, forest.left, forest.right,
              forest.value, forest.tree_root, forest.tree_group]
    if isinstance(X, BinnedRows):
        arrays[1] = forest.bin_threshold
        return backend.kernels.predict_margins_binned(X.bins, *arrays, margin)
    if isinstance(X, CSR):
        return backend.kernels.predict_margins_csr(X.indptr, X.indices, X.data, *arrays, margin)
    return backend.kernels.predict_margins(X, *arrays, margin)


def predict_margin(backend, X, forest: FlatForest, base_margin: np.ndarray):
    """(n_rows, n_groups) float64 margins: base margin plus every tree, on X's device."""
    xp = backend.xp
    margin = xp.empty((X.shape[0], len(base_margin)), dtype=_dtypes.MARGIN)
    margin[:] = xp.asarray(base_margin)[None, :]
    return add_trees(backend, X, forest, margin)
