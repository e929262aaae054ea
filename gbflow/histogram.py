"""Histogram layout and the integer identities the grower relies on.

A level's dense histograms are one array ``hist`` of shape (n_nodes, n_features, n_bins, 2),
int64, in the backend's namespace (the sparse store's are compact, see ``gbflow.stores``): the
fixed-point gradient (last index 0) and hessian (1) summed per node, feature and bin, bin 0
holding missing values. Because the entries are exact integers:

- every feature's bins add up to the same node total (each row sits in one bin of each feature);
- a sibling's histogram is the parent's minus the other child's, exactly.

The root level holds one node. Below it, a level made by splitting n nodes holds 2n, in the
order [sibling of split 0, ..., sibling of split n-1, built child of split 0, ..., built child of
split n-1]: the built children (the ones with the smaller hessian) are accumulated straight into
the second half by the partition kernels, and the siblings are then written into the first half
from the parents (``Histograms.next_level``, ``Histograms.fill_siblings``). So the order of a
level's nodes is not their tree order: the grower keeps each node's tree id beside it.
"""
from __future__ import annotations

import dataclasses

import numpy as np


def node_totals(hist, feature: int = 0, n_bins: int | None = None):
    """(n_nodes, 2) int64 total [g, h] of each node: the sum over the first ``n_bins`` bins
    (default all) of ``feature`` (store-local), which must hold all of that feature's bins.
    Every feature's bins sum to the node's total; the narrowest feature's
    (``DenseStore.narrowest``) are the fewest to read when categorical features make the
    histograms thousands of bins wide."""
    return hist[:, feature, :n_bins, :].sum(axis=1)


@dataclasses.dataclass
class Histograms:
    """A level's histograms: one array per column store of the shard set, in its store order
    (``gbflow.stores``): (n_nodes, D, n_bins, 2) int64 for the dense store (D may be 0),
    (n_nodes, n_slots, 2) int64 for the sparse one. Device arrays, in the level's node order (see
    the module docstring); C-contiguous, or contiguous node ranges of such arrays (``nodes``).
    """

    arrays: tuple

    @classmethod
    def next_level(cls, buffers: "LevelBuffers", parent: "Histograms", n_split: int,
                   depth: int) -> "Histograms":
        """The arrays of the level ``depth`` below ``parent`` when ``n_split`` of its nodes
        split: 2 * n_split nodes per store, the parent's layout, in ``buffers``' storage for
        the level's parity. The built children's half (the second) is zeroed, as the partition
        kernels add into it; the siblings' half is left unset for ``fill_siblings``. Taken
        before the partition, so that a level's histograms are one array per store and the
        built children need no arrays of their own."""
        def take(store, like):
            array = buffers.take(store, depth % 2, (2 * n_split,) + like.shape[1:], like.dtype)
            array[n_split:] = 0
            return array
        return cls(tuple(take(i, a) for i, a in enumerate(parent.arrays)))

    def nodes(self, start: int, stop: int) -> "Histograms":
        """Views of nodes start..stop-1 of every store (contiguous: written in place)."""
        return Histograms(tuple(a[start:stop] for a in self.arrays))

    def fill_siblings(self, kernels, parent: "Histograms", split_nodes) -> "Histograms":
        """Write the siblings' half of this level (``next_level``) in place, in every store:
        sibling k is ``parent``'s node ``split_nodes[k]`` minus built child k (exact integers;
        ``kernels.sibling_histograms``). Returns self."""
        for mine, theirs in zip(self.arrays, parent.arrays):
            kernels.sibling_histograms(theirs, split_nodes, mine)
        return self


class LevelBuffers:
    """Reused device storage for the levels' histograms: per store (its place in the shard set's
    store order), one buffer for the even and one for the odd levels below the root (a level and
    its parent never share one).

    Level arrays of every size, allocated and freed level after level and tree after tree,
    fragmented CuPy's pool: on a sparse benchmark it held 352 MiB where at most 237 MiB were in
    use. A buffer grows (the old one let go first) when a level needs more than it has. Side
    effect: the largest levels' storage stays allocated until training ends.
    """

    def __init__(self, xp):
        self.xp = xp
        self._storage = {}  # (store index, parity) -> flat device array

    def rows_held(self, store: int, key, row_shape: tuple, dtype) -> int:
        """How many rows of ``row_shape`` the (store, key) buffer holds without growing."""
        flat = self._storage.get((store, key))
        if flat is None or flat.dtype != np.dtype(dtype):
            return 0
        return int(flat.size // max(1, int(np.prod(row_shape))))

    def storage(self) -> list:
        """The buffers as they are now (flat device arrays), in a fixed order."""
        return [self._storage[name] for name in sorted(self._storage, key=repr)]

    def take(self, store: int, key, shape: tuple, dtype):
        """A C-contiguous (shape) view of the (store, key) buffer, contents unset (key: a
        level's parity, or another user's name). Any earlier view of that buffer must be dead
        (a level's: two levels up)."""
        size = int(np.prod(shape))
        name = (store, key)
        flat = self._storage.get(name)
        if flat is None or flat.size < size or flat.dtype != np.dtype(dtype):
            self._storage.pop(name, None)
            flat = self.xp.empty(size, dtype=dtype)
            self._storage[name] = flat
        return flat[:size].reshape(shape)
