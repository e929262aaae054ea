"""Histogram layout and the integer identities the grower relies on.

A level's dense histograms are one array ``hist`` of shape (n_nodes, n_features, n_bins, 2),
int64, in the backend's namespace: the fixed-point gradient (last index 0) and hessian (1) summed per node,
feature and bin, bin 0 holding missing values. Because the entries are exact integers:

- every feature's bins add up to the same node total (each row sits in one bin of each feature);
- a sibling's histogram is the parent's minus the other child's, exactly.
"""
from __future__ import annotations

import dataclasses

import numpy as np


def node_totals(hist):
    """(n_nodes, 2) int64 total [g, h] of each node (sum over the bins of feature 0)."""
    return hist[:, 0, :, :].sum(axis=1)


@dataclasses.dataclass
class Histograms:
    """A level's histograms in the two stores' layouts (see ``gbflow.routing``).

    dense: (n_nodes, D, n_bins, 2) int64 of the dense features (D may be 0). sparse: (n_nodes,
    n_slots, 2) int64 compact histograms of the sparse features, or None when there are none.
    Device arrays.
    """

    dense: object
    sparse: object = None

    def take(self, xp, nodes: np.ndarray) -> "Histograms":
        index = xp.asarray(nodes)
        return Histograms(self.dense[index], None if self.sparse is None else self.sparse[index])

    def subtract(self, other: "Histograms") -> None:
        """self -= other, in place (exact): turns the parents' histograms into the siblings' of
        the built children ``other``."""
        self.dense -= other.dense
        if self.sparse is not None:
            self.sparse -= other.sparse

    @staticmethod
    def interleave(xp, small: "Histograms", big: "Histograms", small_is_left) -> "Histograms":
        """``children`` of both stores."""
        mask = xp.asarray(small_is_left)
        return Histograms(children(xp, small.dense, big.dense, mask),
                          None if small.sparse is None else
                          children(xp, small.sparse, big.sparse, mask))


def children(xp, small, big, small_is_left):
    """Interleave the built and the subtracted child histograms as [left0, right0, left1, ...].

    small, big: (n_splits, ...) of any trailing shape; small_is_left: (n_splits,) bool.
    Returns (2 * n_splits, ...).
    """
    n = small.shape[0]
    out = xp.empty((2 * n,) + small.shape[1:], dtype=small.dtype)
    mask = small_is_left.reshape((n,) + (1,) * (small.ndim - 1))
    out[0::2] = xp.where(mask, small, big)
    out[1::2] = xp.where(mask, big, small)
    return out
