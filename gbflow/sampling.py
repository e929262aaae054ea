"""Row and feature sampling (``subsample``, ``colsample_bytree``, ``_bylevel``, ``_bynode``) from
global numbers only."""
from __future__ import annotations

import dataclasses

import numpy as np


def _mix64(x):
    # splitmix64 finaliser on uint64 arrays (wrapping arithmetic): a counter-based random stream.
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def row_sample_mask(xp, n_rows: int, row_offset, seed: int, round_index: int, rate: float):
    """(n_rows,) bool: rows kept by ``subsample`` in this round.

    Each row's draw depends only on (seed, round, global row number), never on how rows are split
    into shards, so sharded and unsharded training sample the same rows. row_offset: the global
    number of the shard's first row (its rows follow each other), or an (n_rows,) uint64 array of
    every row's global number (a shard joining partitions that are not adjacent).
    """
    key = _mix64(xp.asarray([seed % 2**64], dtype=xp.uint64)
                 ^ _mix64(xp.asarray([round_index + 1], dtype=xp.uint64)))
    if isinstance(row_offset, (int, np.integer)):
        rows = xp.arange(row_offset, row_offset + n_rows, dtype=xp.uint64)
    else:
        rows = xp.asarray(row_offset, dtype=xp.uint64)
    u = (_mix64(rows ^ key) >> xp.uint64(11)).astype(xp.float64) * (1.0 / 2**53)
    return u < rate


def feature_sample(n_features: int, seed: int, round_index: int, group: int, rate: float):
    """(n_features,) bool: features a tree may split on (``colsample_bytree``), the same on every
    process."""
    allowed = np.ones(n_features, dtype=bool)
    if rate >= 1.0:
        return allowed
    k = max(1, int(np.floor(rate * n_features + 1e-9)))
    rng = np.random.default_rng([seed % 2**63, round_index, group])
    allowed[:] = False
    allowed[rng.choice(n_features, size=k, replace=False)] = True
    return allowed


def level_samples(tree_allowed: np.ndarray, seed: int, round_index: int, group: int,
                  rate: float, n_levels: int) -> np.ndarray:
    """(n_levels, F) bool: the features the nodes of each depth may split on
    (``colsample_bylevel``, XGBoost's meaning): a sample of ``rate`` of the tree's allowed
    features ((F,) bool), at least one, drawn anew for every level; the same on every process."""
    if rate >= 1.0:
        return np.broadcast_to(tree_allowed, (n_levels, len(tree_allowed)))
    chosen = np.flatnonzero(tree_allowed)
    k = max(1, int(np.floor(rate * len(chosen) + 1e-9)))
    levels = np.zeros((n_levels, len(tree_allowed)), dtype=bool)
    for depth in range(n_levels):  # a stream apart from the tree's ([seed, round, group])
        rng = np.random.default_rng([seed % 2**63, round_index, group, depth + 1])
        levels[depth, rng.choice(chosen, size=k, replace=False)] = True
    return levels


@dataclasses.dataclass
class FeatureSample:
    """The features a tree's nodes may split on: each depth's (``by_level``, (max_depth, F)
    host bool: the tree's sample and the level's), and with ``node_rate`` < 1
    (``colsample_bynode``) a share of the level's drawn for every node from (seed, round,
    group, node id): the same node gets the same features in any run and on every process."""

    by_level: np.ndarray
    seed: int = 0
    round_index: int = 0
    group: int = 0
    node_rate: float = 1.0

    @classmethod
    def draw(cls, n_features: int, params, round_index: int, group: int) -> "FeatureSample":
        """The tree's sample (``colsample_bytree``), its levels' (``_bylevel``) and the rate of
        its nodes' (``_bynode``), from ``params``' seed, for the tree of a round and group."""
        seed = params.seed
        tree = feature_sample(n_features, seed, round_index, group, params.colsample_bytree)
        return cls(level_samples(tree, seed, round_index, group, params.colsample_bylevel,
                                 params.depth_limit), seed, round_index, group,
                   params.colsample_bynode)

    def nodes(self, depth: int, node_ids: np.ndarray) -> np.ndarray:
        """(F,) host bool for every node of the depth, or (len(node_ids), F) per node."""
        level = self.by_level[depth]
        if self.node_rate >= 1.0:
            return level
        chosen = np.flatnonzero(level)
        k = max(1, int(np.floor(self.node_rate * len(chosen) + 1e-9)))
        # a counter-based draw per (node, feature): each node keeps its k smallest
        key = _mix64(np.array([self.seed % 2**64], dtype=np.uint64)
                     ^ _mix64(np.array([self.round_index + 1], dtype=np.uint64)
                              ^ _mix64(np.array([self.group + 1], dtype=np.uint64))))
        nodes = np.asarray(node_ids, dtype=np.uint64)[:, None]
        draw = _mix64(_mix64(nodes ^ key) ^ chosen.astype(np.uint64)[None, :])
        keep = np.argsort(draw, axis=1, kind="stable")[:, :k]
        masks = np.zeros((len(nodes), len(level)), dtype=bool)
        masks[np.arange(len(nodes))[:, None], chosen[keep]] = True
        return masks

    def at(self, depth: np.ndarray, node_keys: np.ndarray) -> np.ndarray:
        """(n, F) host bool: ``nodes`` for nodes of several depths ((n,) int each), the per-node
        draw keyed by ``node_keys`` ((n,) uint64)."""
        masks = np.zeros((len(depth), self.by_level.shape[1]), dtype=bool)
        for d in np.unique(depth):
            here = depth == d
            masks[here] = self.nodes(int(d), np.asarray(node_keys)[here])
        return masks


def child_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """((n,), (n,)) uint64: the keys of the left and right children of nodes of ``keys``
    ((n,) uint64; the root's is 0). A best-first tree draws its nodes' features by these keys:
    they follow from the path, while its node ids follow the order of growth, which is not
    known when a node's split is searched."""
    keys = np.asarray(keys, dtype=np.uint64)
    return _mix64(keys * np.uint64(2) + np.uint64(1)), _mix64(keys * np.uint64(2) + np.uint64(2))
