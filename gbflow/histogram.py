"""Histogram layout and the integer identities the grower relies on.

A level's histograms are one array ``hist`` of shape (n_nodes, n_features, n_bins, 2), int64, in
the backend's namespace: the fixed-point gradient (last index 0) and hessian (1) summed per node,
feature and bin, bin 0 holding missing values. Because the entries are exact integers:

- every feature's bins add up to the same node total (each row sits in one bin of each feature);
- a sibling's histogram is the parent's minus the other child's, exactly.
"""
from __future__ import annotations


def node_totals(hist):
    """(n_nodes, 2) int64 total [g, h] of each node (sum over the bins of feature 0)."""
    return hist[:, 0, :, :].sum(axis=1)


def subtract(parent, child):
    """The sibling's histogram: ``parent - child`` (same shape, exact)."""
    return parent - child


def children(xp, small, big, small_is_left):
    """Interleave the built and the subtracted child histograms as [left0, right0, left1, ...].

    small, big: (n_splits, F, B, 2); small_is_left: (n_splits,) bool. Returns (2 * n_splits, F, B, 2).
    """
    n = small.shape[0]
    out = xp.empty((2 * n,) + small.shape[1:], dtype=small.dtype)
    mask = small_is_left[:, None, None, None]
    out[0::2] = xp.where(mask, small, big)
    out[1::2] = xp.where(mask, big, small)
    return out
