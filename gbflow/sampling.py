"""Row and feature sampling (``subsample`` uniform or gradient-based, ``colsample_bytree``,
``_bylevel``, ``_bynode``) from global numbers only."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .backend import to_host
from .backend.tables import table_counts


def _mix64(x):
    # splitmix64 finaliser on uint64 arrays (wrapping arithmetic): a counter-based random stream.
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _stream_key(*words: int) -> np.uint64:
    """The uint64 key of a stream of draws: _mix64(w0 ^ _mix64(w1 ^ ... _mix64(w_last))),
    computed on the host and given to the device's arithmetic as a scalar (a small array
    uploaded per call made the host wait for the device each time)."""
    key = _mix64(np.array([words[-1]], dtype=np.uint64))
    for word in reversed(words[:-1]):
        key = _mix64(np.array([word], dtype=np.uint64) ^ key)
    return key[0]


def row_sample_mask(xp, n_rows: int, row_offset, seed: int, round_index: int, rate: float):
    """(n_rows,) bool: rows kept by ``subsample`` in this round.

    Each row's draw depends only on (seed, round, global row number), never on how rows are split
    into shards, so sharded and unsharded training sample the same rows. row_offset: the global
    number of the shard's first row (its rows follow each other), or an (n_rows,) uint64 array of
    every row's global number (a shard joining partitions that are not adjacent).
    """
    return _draws(xp, n_rows, row_offset, _stream_key(seed % 2**64, round_index + 1)) < rate


def _draws(xp, n_rows: int, row_offset, key: np.uint64):
    """(n_rows,) float64 in [0, 1): the draws of stream ``key`` for rows numbered from
    ``row_offset`` (an int), or numbered by it ((n_rows,) array of global row numbers)."""
    if isinstance(row_offset, (int, np.integer)):
        rows = xp.arange(row_offset, row_offset + n_rows, dtype=xp.uint64)
    else:
        rows = xp.asarray(row_offset, dtype=xp.uint64)
    return (_mix64(rows ^ key) >> xp.uint64(11)).astype(xp.float64) * (1.0 / 2**53)


# Gradient-based sampling (XGBoost's sampling_method="gradient_based": Minimal Variance Sampling,
# Ibragimov and Gusev 2019, with XGBoost's lambda). A row of combined gradient
# c = sqrt(g**2 + MVS_LAMBDA * h**2) (as float32) is kept with probability min(1, c / mu), its
# gradient pair divided by that probability, where the threshold mu makes the expected number
# of rows kept the subsample's share of every row. mu is found in one exact integer table
# over every process: per bucket of c's float32 bits (exponent and top _MANTISSA_BITS mantissa
# bits: 2**-11 of relative width; the _THRESHOLD_BINADES binades below the largest c, smaller c
# sharing the lowest bucket), the rows' count and their fixed-point sum of c. mu is the highest
# bucket edge whose expected count is at least the target (or, beyond the top edge, sum(c) over
# the target), so the same on any split of the rows.
MVS_LAMBDA = 0.1
_MANTISSA_BITS = 11
_THRESHOLD_BINADES = 16
_N_BUCKETS = _THRESHOLD_BINADES << _MANTISSA_BITS
_SAMPLE_STREAM = 0x6772616469656E74  # tells the gradient-based draws from the uniform ones
# Rows per block of gradient-based sampling's per-row steps: their float64 temporaries (draws,
# factors) over whole 10M-row shards took 0.45 GiB of the device beside the training's arrays.
SAMPLE_BLOCK_ROWS = 1 << 21


def _bucket_keys(xp, c32):
    """uint32 bucket keys (c's float32 bits without the lowest mantissa bits) of (n,) float32
    values >= 0: ascending with the values."""
    return c32.view(xp.uint32) >> xp.uint32(23 - _MANTISSA_BITS)


def _gradient_stream(seed: int, round_index: int, group: int) -> np.uint64:
    """The key of gradient-based sampling's draws for (seed, round, output group)."""
    return _stream_key(seed % 2**64, round_index + 1, (group + 1) ^ _SAMPLE_STREAM)


def gradient_threshold(xp, collective, combined: list, n_total: int, rate: float):
    """The threshold mu of gradient-based sampling over every process's rows: combined is per
    shard the (n_i,) float32 combined gradients (>= 0; 0: never kept), n_total the rows of
    every process. Returns mu, a 0-d float64 array on the device (every row with c >= mu is
    kept; 0.0: every row is), such that the expected count of rows kept is at least
    ``rate * n_total`` and the next bucket edge's is below it. In one process nothing is read
    back (the device runs on); several add their tables (two reductions)."""
    present = [c for c in combined if len(c)]
    largest = xp.stack([c.max() for c in present]).max() if present else \
        xp.zeros((), dtype=xp.float32)
    if collective.size > 1:
        largest = xp.asarray(np.max(collective.allreduce_max(float(to_host(largest)))),
                             dtype=xp.float32)
    largest = largest.astype(xp.float32).reshape(())
    top = _bucket_keys(xp, largest.reshape(1)).astype(xp.int64)[0]
    low = xp.maximum(top - (_N_BUCKETS - 1), 0)
    # a power of two below 2**52 / (n_total * largest) (frexp: exact), so that the float64
    # table's sums of rint(c * scale) are exact integers; 1.0 when there is no gradient
    room = 2.0**52 / (n_total * xp.maximum(largest.astype(xp.float64), 2.0**-1000))
    scale = xp.ldexp(xp.ones((), dtype=xp.float64), xp.frexp(room)[1] - 1)
    counts = xp.zeros(_N_BUCKETS, dtype=xp.int64)
    sums = xp.zeros(_N_BUCKETS, dtype=xp.int64)
    for c in present:  # rows of c == 0 count for nothing (weights, not a mask: no read-back)
        bucket = xp.maximum(_bucket_keys(xp, c).astype(xp.int64) - low, 0)
        counts += table_counts(xp, bucket, _N_BUCKETS, (c > 0).astype(xp.float64)
                               ).astype(xp.int64)
        sums += table_counts(xp, bucket, _N_BUCKETS,
                             xp.rint(c.astype(xp.float64) * scale)).astype(xp.int64)
    if collective.size > 1:
        both = collective.allreduce_sum(np.concatenate([to_host(counts), to_host(sums)]))
        counts, sums = (xp.asarray(part) for part in np.split(np.asarray(both), 2))
    at_or_above = xp.cumsum(counts[::-1])[::-1]  # rows of c >= each bucket's edge
    below = xp.cumsum(sums) - sums  # their fixed-point sum of c below each edge
    target = rate * n_total
    edges = ((xp.arange(1, _N_BUCKETS, dtype=xp.int64) + low) << (23 - _MANTISSA_BITS))
    edges = edges.astype(xp.uint32).view(xp.float32).astype(xp.float64)
    expected = below[1:] / scale / edges + at_or_above[1:]  # non-increasing in the edge
    last = xp.count_nonzero(expected >= target) - 1  # the highest edge reaching the target
    # beyond the top bucket's edge every row is drawn: the expected count is sum(c) / mu
    beyond = xp.maximum(edges[-1], sums.sum() / scale / target)
    mu = xp.where(last == len(edges) - 1, beyond, edges[xp.maximum(last, 0)])
    return xp.where(at_or_above[0] <= target, 0.0, mu)


def reweighted_bounds(bounds: np.ndarray, rate: float) -> np.ndarray:
    """Bounds on |g| and |h| ((n_groups, 2) float64) after gradient-based sampling at ``rate``,
    from the loss's ``bounds`` before it: a kept pair is multiplied by mu / c >= 1 only when
    c < mu, and mu is at most the largest c over the rate (the expected count sum(c) / mu is
    the target then), while c >= |g| and c >= sqrt(MVS_LAMBDA) |h|; 1% of headroom over the
    fixed-point table's rounding. Training keeps its fixed-point scales from bounds, so a
    round need not wait for the device to learn the largest pair."""
    bounds = np.asarray(bounds, dtype=np.float64)
    largest_c = np.sqrt(bounds[:, 0] ** 2 + MVS_LAMBDA * bounds[:, 1] ** 2)
    mu = 1.01 * largest_c / rate
    return np.stack([np.maximum(bounds[:, 0], mu),
                     np.maximum(bounds[:, 1], mu / np.sqrt(MVS_LAMBDA))], axis=1)


def gradient_based_sample(xp, collective, grads: list, hesses: list, row_offsets: list,
                          n_total: int, seed: int, round_index: int, group: int,
                          rate: float) -> None:
    """Gradient-based sampling of one output's gradient pairs, in place (``sampling_method=
    "gradient_based"``): per shard grads[i], hesses[i] are (n_i,) float64 views (any strides)
    on the backend's device, row_offsets[i] its rows' global numbering (as
    ``row_sample_mask``'s). A row of combined gradient c below the threshold (``
    gradient_threshold``) is kept when its draw u (``_draws`` of ``_gradient_stream``) has
    u * mu < c, its pair multiplied by mu / c; rows of c >= mu keep theirs; the others' become
    0. Every step is
    per row or an integer sum, so the result does not depend on how the rows are split (nor on
    the blocks of ``SAMPLE_BLOCK_ROWS`` rows the per-row steps take at a time)."""
    combined = []
    for g, h in zip(grads, hesses):
        c = xp.empty(len(g), dtype=xp.float32)
        for a, b in _row_blocks(len(g)):
            ga, ha = g[a:b], h[a:b]
            c[a:b] = xp.sqrt(ga * ga + MVS_LAMBDA * (ha * ha)).astype(xp.float32)
        combined.append(c)
    mu = gradient_threshold(xp, collective, combined, n_total, rate)
    key = _gradient_stream(seed, round_index, group)
    for g, h, c, offset in zip(grads, hesses, combined, row_offsets):
        for a, b in _row_blocks(len(g)):
            # (mu 0: every factor 1; rows of c == 0 have a zero pair already)
            cb = c[a:b].astype(xp.float64)
            rows = offset + a if isinstance(offset, (int, np.integer)) else offset[a:b]
            u = _draws(xp, b - a, rows, key)
            factor = xp.where(cb >= mu, 1.0,
                              xp.where(u * mu < cb, mu / xp.where(cb > 0, cb, 1.0), 0.0))
            g[a:b] *= factor
            h[a:b] *= factor


def _row_blocks(n_rows: int) -> list:
    """(start, stop) of ``SAMPLE_BLOCK_ROWS`` rows at a time over n_rows rows (none for 0)."""
    return [(a, min(n_rows, a + SAMPLE_BLOCK_ROWS)) for a in range(0, n_rows, SAMPLE_BLOCK_ROWS)]


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


@functools.lru_cache(maxsize=16)
def _every_feature(n_features: int, n_levels: int) -> np.ndarray:
    """(n_levels, n_features) read-only True: every feature at every depth (one row broadcast,
    as ``level_samples`` gives it), made once."""
    return np.broadcast_to(np.ones(n_features, dtype=bool), (n_levels, n_features))


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
        if params.colsample_bytree >= 1.0 and params.colsample_bylevel >= 1.0:
            by_level = _every_feature(n_features, params.depth_limit)  # no draw to make
        else:
            tree = feature_sample(n_features, seed, round_index, group, params.colsample_bytree)
            by_level = level_samples(tree, seed, round_index, group, params.colsample_bylevel,
                                     params.depth_limit)
        return cls(by_level, seed, round_index, group, params.colsample_bynode)

    def nodes(self, depth: int, node_ids: np.ndarray) -> np.ndarray:
        """(F,) host bool for every node of the depth, or (len(node_ids), F) per node."""
        level = self.by_level[depth]
        if self.node_rate >= 1.0:
            return level
        chosen = np.flatnonzero(level)
        k = max(1, int(np.floor(self.node_rate * len(chosen) + 1e-9)))
        # a counter-based draw per (node, feature): each node keeps its k smallest
        key = _stream_key(self.seed % 2**64, self.round_index + 1, self.group + 1)
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
