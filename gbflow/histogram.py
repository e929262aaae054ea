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

    @staticmethod
    def children(kernels, parent: "Histograms", split_nodes, small: "Histograms",
                 small_is_left) -> "Histograms":
        """The next level's histograms in both stores (``kernels.children_histograms``): the
        built children ``small`` of the parents ``split_nodes`` and their siblings, the parents'
        minus them (exact), as [left0, right0, left1, ...]."""
        return Histograms(
            kernels.children_histograms(parent.dense, split_nodes, small.dense, small_is_left),
            None if small.sparse is None else
            kernels.children_histograms(parent.sparse, split_nodes, small.sparse, small_is_left))
