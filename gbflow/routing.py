"""Sparsity-aware column routing: which features the dense store holds and which the sparse one.

A feature whose most common bin holds more than ``sparse_threshold`` of all rows (over every
shard and worker) is *sparse*: a shard stores, row by row, only its entries in the other bins, and
its histograms are built from those entries, the common bin filled in from the node totals.
Everything else goes to the dense (n_rows, D) binned matrix. By default
(``sparse_threshold=None``) the threshold is 0.8 and only features whose entries take less memory
than their dense columns go sparse: a few mostly-constant columns among dense ones stay dense, and
so does a small table whose features have alike bin counts (``SMALL_TABLE_CELLS``).
Both stores feed the same split search, so routing changes speed and memory, never the model.
The decision depends only on integer bin counts summed over all processes, so every process
routes the same way.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _dtypes
from .cuts import Cuts


@dataclasses.dataclass
class Routing:
    """Where each feature lives (host arrays).

    dense: (D,) int64 global ids of the dense features, ascending; sparse: (S,) likewise.
    common_bin: (S,) int32 most common bin of each sparse feature (the first of equal counts).
    bin_offsets: (S + 1,) int64: sparse feature s's bins 0..n_value_bins[s] occupy slots
    bin_offsets[s]..bin_offsets[s + 1] - 1 of the compact sparse histograms.
    n_value_bins: (S,) int32 value bins of each sparse feature.
    """

    dense: np.ndarray
    sparse: np.ndarray
    common_bin: np.ndarray
    bin_offsets: np.ndarray
    n_value_bins: np.ndarray

    @property
    def has_sparse(self) -> bool:
        return len(self.sparse) > 0

    @property
    def n_slots(self) -> int:
        return int(self.bin_offsets[-1])

    @classmethod
    def all_dense(cls, n_features: int) -> "Routing":
        return cls(dense=np.arange(n_features, dtype=np.int64), sparse=np.zeros(0, np.int64),
                   common_bin=np.zeros(0, np.int32), bin_offsets=np.zeros(1, np.int64),
                   n_value_bins=np.zeros(0, np.int32))


def slot_offsets(cuts: Cuts) -> np.ndarray:
    """(F + 1,) int64 offsets of every feature's bins 0..n_value_bins in a compact table."""
    return np.concatenate([[0], np.cumsum(cuts.n_value_bins.astype(np.int64) + 1)])


# The threshold of ``sparse_threshold=None`` (the default), which also keeps only the features
# whose entries save memory (``_smaller_subset``).
AUTO_THRESHOLD = 0.8
# ... and keeps a table of at most this many cells dense whole when its features' bin counts are
# alike (the dense histograms at most twice the compact ones): there the sparse store saves
# neither memory that matters nor histogram width, and a second store costs host work every
# level, and takes the CPU's whole-tree grower away (sklearn's digits, 1,797 x 64: 1.2 s with
# 12 columns sparse, 0.4 s all dense).
SMALL_TABLE_CELLS = 1 << 20


def _smaller_subset(above: np.ndarray, largest: np.ndarray, n_rows: int, cuts: Cuts) -> np.ndarray:
    """The features of ``above`` (bool, (F,)) worth storing sparse: the sparsest k of them, k
    saving the most bytes (none if no k saves any). A dense column costs 2 bins a row (row by
    row and column by column); the sparse store costs its 8-byte row starts once, then a
    feature id and a bin per entry (the rows outside the common bin). So a few columns of 5%
    entries cost more sparse than dense, and, on the GPU, a sparse store turns planned trees off
    (every level waits for the device); a thousand one-hot columns cost a tenth."""
    candidates = np.flatnonzero(above)
    entries = n_rows - largest[candidates]
    order = np.argsort(entries, kind="stable")
    k = np.arange(1, len(order) + 1)
    bin_bytes = cuts.bin_dtype.itemsize
    id_bytes = np.where(k <= _dtypes.ENTRY_FEATURE_NARROW_MAX, 2, 4)
    saving = 2 * bin_bytes * n_rows * k - (8 * (n_rows + 1) + np.cumsum(entries[order]) *
                                          (id_bytes + bin_bytes))
    chosen = np.zeros_like(above)
    if len(saving) and saving.max() > 0:
        chosen[candidates[order[: int(np.argmax(saving)) + 1]]] = True
    return chosen


def decide(counts: np.ndarray, cuts: Cuts, threshold: float | None,
           keep_dense: np.ndarray | None = None) -> Routing:
    """Route the features from the global ``bin_counts``: sparse where the most common bin holds
    more than ``threshold`` of the rows (1.0: nothing is sparse); None (``sparse_threshold``'s
    default): more than ``AUTO_THRESHOLD``, and only the ones whose entries take fewer bytes
    than their dense columns (``_smaller_subset``). keep_dense: (F,) bool, features that stay
    dense whatever their counts (the categorical ones: their splits read the dense store)."""
    smaller_only = threshold is None
    if smaller_only:
        threshold = AUTO_THRESHOLD
    n_features = cuts.n_features
    offsets = slot_offsets(cuts)
    n_rows_total = int(counts[offsets[0] : offsets[1]].sum()) if n_features else 0
    if threshold >= 1.0 or n_rows_total == 0:
        return Routing.all_dense(n_features)
    feature_of_slot = np.repeat(np.arange(n_features), np.diff(offsets))
    largest = np.maximum.reduceat(counts, offsets[:-1])
    # the first slot of each feature holding its largest count (np.unique: first occurrences)
    holding = np.flatnonzero(counts == largest[feature_of_slot])
    _, first = np.unique(feature_of_slot[holding], return_index=True)
    common = (holding[first] - offsets[:-1]).astype(np.int32)
    if smaller_only and n_rows_total * n_features <= SMALL_TABLE_CELLS and \
            n_features * cuts.n_bins <= 2 * int(offsets[-1]):
        return Routing.all_dense(n_features)
    sparse = largest > threshold * n_rows_total
    if keep_dense is not None:
        sparse &= ~keep_dense
    if smaller_only:
        sparse = _smaller_subset(sparse, largest, n_rows_total, cuts)
    nvb = cuts.n_value_bins[sparse]
    return Routing(dense=np.flatnonzero(~sparse).astype(np.int64),
                   sparse=np.flatnonzero(sparse).astype(np.int64), common_bin=common[sparse],
                   bin_offsets=np.concatenate([[0], np.cumsum(nvb.astype(np.int64) + 1)]),
                   n_value_bins=nvb.astype(np.int32))
