"""Prediction on raw feature values: trees flattened into one set of node arrays, walked per row."""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _dtypes
from .backend.common import aligned_slots
from .csr import CSR
from .tree import Tree


@dataclasses.dataclass
class FlatForest:
    """All trees' nodes in one set of host arrays (node ids made absolute), in training order.

    feature int32, threshold float32, bin_threshold int32 (the same split in bins of the cuts
    the trees were grown on), default_left bool, left/right int32 (right = left + 1 on inner
    nodes, as in ``Tree``: the CPU kernels step to left + 1 without a branch), value float64,
    each (n_nodes,).
    tree_root int64 (n_trees,), tree_group int32 (n_trees,). cat_start (n_nodes,) int32 and
    cat_bits uint32: the categorical splits' sets (``numpy_kernels.in_category_set``; -1 on
    the other nodes), or None when no tree has one.
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
    cat_start: np.ndarray | None = None
    cat_bits: np.ndarray | None = None

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
            parts = [_children_at(getattr(t, name), r) for t, r in zip(trees, roots)]
            return np.concatenate(parts).astype(_dtypes.NODE)

        cat_start, cat_bits = _category_sets(trees, roots, int(sizes.sum()))
        return cls(feature=joined("feature", _dtypes.NODE),
                   threshold=joined("threshold", _dtypes.CUT),
                   bin_threshold=joined("bin_threshold", np.int32),
                   default_left=joined("default_left", np.bool_), left=children("left"),
                   right=children("right"), value=joined("value", _dtypes.MARGIN), tree_root=roots,
                   tree_group=np.array([t.group for t in trees], dtype=np.int32),
                   cat_start=cat_start, cat_bits=cat_bits)


def _children_at(children: np.ndarray, root: int) -> np.ndarray:
    """A tree's child ids (-1: a leaf's) as ids of a forest whose node ``root`` is its root."""
    return np.where(children >= 0, children + root, -1)


def _category_sets(trees: list[Tree], roots: np.ndarray, n_nodes: int) -> tuple:
    """(cat_start, cat_bits) of the trees' categorical splits (None, None without any): each
    set as its word count and the bit words of its category positions."""
    if not any(t.categories for t in trees):
        return None, None
    cat_start = np.full(n_nodes, -1, dtype=np.int32)
    words = []
    at = 0
    for tree, root in zip(trees, roots):
        for node, positions in sorted(tree.categories.items()):
            positions = np.asarray(positions, dtype=np.int64)
            n_words = int(positions.max()) // 32 + 1 if len(positions) else 0
            bits = np.zeros(n_words + 1, dtype=np.uint32)
            bits[0] = n_words
            np.bitwise_or.at(bits, 1 + positions // 32,
                             np.left_shift(np.uint32(1), (positions % 32).astype(np.uint32)))
            cat_start[root + node] = at
            words.append(bits)
            at += len(bits)
    return cat_start, np.concatenate(words)


# A staged forest's node arrays: (name, dtype) in the order of its device image.
_STAGED = (("feature", _dtypes.NODE), ("threshold", _dtypes.CUT), ("bin_threshold", np.int32),
           ("default_left", np.bool_), ("left", _dtypes.NODE), ("right", _dtypes.NODE),
           ("value", _dtypes.MARGIN), ("tree_root", np.int64), ("tree_group", np.int32))


class StagedForest:
    """A few trees at a time (an evaluation round's) as a ``FlatForest`` whose arrays stay
    where they are on the device and are written again for the next trees: a recorded walk
    (``Backend.recorder``) reads the same arrays at every replay. Each tree takes ``stride``
    node slots (its nodes first, then unreachable padding: feature -1, no children), so the
    arrays' sizes depend only on the tree count and the largest tree seen (the stride grows to
    the next power of two when a tree is larger). Trees with categorical splits are not
    staged (their category sets vary in size)."""

    def __init__(self, backend):
        self.backend = backend
        self.forest: FlatForest | None = None  # the device views, for the staged trees
        self._shape = (0, 0)  # (trees, stride) of the arrays held
        self._image = None  # the device bytes the views are of

    # At most this many node slots (about 29 bytes each, on the host and the device): a large
    # metric_period of many classes' deep trees would otherwise stage gigabytes of padding.
    MAX_SLOTS = 1 << 20

    def _stride(self, trees: list) -> int:
        """The stride ``trees`` are staged at: the held one, doubled until the largest fits."""
        stride, largest = max(self._shape[1], 1), max(t.n_nodes for t in trees)
        while stride < largest:
            stride *= 2
        return stride

    def can_stage(self, trees: list) -> bool:
        """Whether ``trees`` may be staged: some, none with a categorical split, and their
        padded slots within ``MAX_SLOTS``."""
        if not trees or any(t.categories for t in trees):
            return False
        return len(trees) * self._stride(trees) <= self.MAX_SLOTS

    def write(self, trees: list) -> FlatForest:
        """Stage ``trees`` (``can_stage``): their node arrays written into the held device
        arrays (new ones when the tree count or stride changes). Returns the staged forest.
        Side effect: one host-to-device copy, queued on the current stream."""
        stride, n_trees = self._stride(trees), len(trees)
        # one host image in ``aligned_slots``' layout, filled in place: one copy to the device
        lengths = [n_trees if name in ("tree_root", "tree_group") else n_trees * stride
                   for name, _ in _STAGED]
        offsets, total = aligned_slots([n * np.dtype(d).itemsize
                                        for n, (_, d) in zip(lengths, _STAGED)])

        def views(image) -> dict:
            return {name: image[at:at + n * np.dtype(d).itemsize].view(d)
                    for (name, d), at, n in zip(_STAGED, offsets, lengths)}
        image = np.zeros(max(total, 8), dtype=np.uint8)
        host = views(image)
        host["feature"][:] = host["left"][:] = host["right"][:] = -1
        for i, t in enumerate(trees):
            root = i * stride
            at = slice(root, root + t.n_nodes)
            for name in ("feature", "threshold", "bin_threshold", "default_left", "value"):
                host[name][at] = getattr(t, name)
            host["left"][at] = _children_at(t.left, root)
            host["right"][at] = _children_at(t.right, root)
            host["tree_root"][i] = root
            host["tree_group"][i] = t.group
        if self._shape != (n_trees, stride):
            self._shape = (n_trees, stride)
            self._image = self.backend.xp.empty(image.shape, dtype=np.uint8)
            self.forest = FlatForest(**views(self._image))
        self._image[...] = self.backend.xp.asarray(image)
        return self.forest


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
    sets = () if forest.cat_start is None else (forest.cat_start, forest.cat_bits)
    if isinstance(X, BinnedRows):
        arrays[1] = forest.bin_threshold
        return backend.kernels.predict_margins_binned(X.bins, *arrays, margin, *sets)
    if isinstance(X, CSR):
        if sets:  # (inputs.check_categorical refuses them first)
            raise TypeError("a model with categorical splits predicts DataFrames, not CSRs")
        return backend.kernels.predict_margins_csr(X.indptr, X.indices, X.data, *arrays, margin)
    return backend.kernels.predict_margins(X, *arrays, margin, *sets)


def add_trees_on_pages(backend, pages: list, n_features: int, forest: FlatForest,
                       margins: list) -> None:
    """margins[j] += every tree of ``forest`` on host page j's bins (``add_trees`` on
    ``BinnedRows`` of each page's first ``n_features`` columns, in one backend call:
    ``Backend.predict_pages_binned``). pages: (n_j, W) ``Backend.to_page`` pages binned with the
    forest's cuts; margins: (n_j, n_groups) float64 on the device, any strides."""
    if len(forest.tree_root) == 0:
        return
    sets = () if forest.cat_start is None else (forest.cat_start, forest.cat_bits)
    backend.predict_pages_binned(pages, n_features, forest.feature, forest.bin_threshold,
                                 forest.default_left, forest.left, forest.right, forest.value,
                                 forest.tree_root, forest.tree_group, margins, *sets)


def predict_margin(backend, X, forest: FlatForest, base_margin: np.ndarray, row_margin=None,
                   block_rows: int | None = None):
    """(n_rows, n_groups) float64 margins on the backend's device: base margin plus every
    tree. X: on the device, or in host memory and copied there whole, or ``block_rows`` rows
    at a time when given (a dense X larger than the device). row_margin: None, or each row's
    own starting margin ((n_rows,) or (n_rows, n_groups), XGBoost's base_margin) in place of
    the model's base margin."""
    xp = backend.xp
    margin = xp.empty((X.shape[0], len(base_margin)), dtype=_dtypes.MARGIN)
    margin[:] = xp.asarray(base_margin)[None, :] if row_margin is None else \
        starting_margins(xp, backend.asarray(row_margin), len(base_margin))
    if len(forest.tree_root) == 0:
        return margin
    if block_rows is None or isinstance(X, CSR):
        return add_trees(backend, backend.asarray(X), forest, margin)
    for r0 in range(0, X.shape[0], block_rows):
        add_trees(backend, backend.asarray(X[r0:r0 + block_rows]), forest,
                  margin[r0:r0 + block_rows])
    return margin


def starting_margins(xp, row_margin, n_groups: int):
    """(n, n_groups) float64 of a (n,) or (n, n_groups) per-row base margin, on ``xp``; a
    ValueError when its width is not n_groups."""
    check_margin_width(row_margin, n_groups)
    row_margin = xp.asarray(row_margin, dtype=_dtypes.MARGIN)
    return row_margin[:, None] if row_margin.ndim == 1 else row_margin


def check_margin_width(row_margin, n_groups: int, whose: str = "the model") -> None:
    """ValueError unless a per-row base margin has one value per output group ((n,) for one);
    ``whose`` outputs the message names."""
    width = 1 if row_margin.ndim == 1 else row_margin.shape[1]
    if width != n_groups:
        raise ValueError(f"base_margin has {width} value(s) per row; {whose} has {n_groups} "
                         f"output(s) per row (give an (n, {n_groups}) array)")
