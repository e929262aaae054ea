"""What every backend's kernels share besides kernels: layouts, work lists, argument checks.

- Packed layouts: small arrays laid one after the other in 8-byte aligned slots of one allocation
  (``aligned_slots``, ``packed_empty``), so that uploads and fetches take one copy.
- Work lists: a level's node segments dealt to blocks of rows (``work_list_rows``), the layout
  the CUDA kernels and the level plans read.
- Argument checks the NumPy twins and the fast kernels must make alike (a fast kernel reading
  past a node must fail the same way its twin does).
- ``GrownTree``, ``TreeFinish``, ``SparseSide``: what the whole-tree growers
  (``grow_whole_tree``) hand back, what they need to finish a tree and add it to the margins,
  and the sparse store's arrays they take.
- Definitions written once against an array namespace, which the NumPy twins and the CUDA
  kernels both run (``ordered_keys``, ``sigmoid_with``, ``prediction_keys_with``,
  ``key_buckets_with``, ``occupied_keys_with``).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import _dtypes


def aligned_slots(nbytes: list) -> tuple[list, int]:
    """(offsets, total bytes) of arrays of ``nbytes`` bytes laid one after the other in 8-byte
    aligned slots. The one layout of packed uploads, of the split search's results and of
    ``to_host_all``'s buffer: device views laid out by it are fetched in one copy."""
    offsets, total = [], 0
    for n in nbytes:
        offsets.append(total)
        total += -(-int(n) // 8) * 8
    return offsets, total


def packed_empty(xp, layout: list) -> list:
    """Uninitialised arrays of ``layout``'s (shape, dtype) pairs, in ``xp``: views of one
    allocation in ``aligned_slots``' layout, so that ``Backend.to_host_all`` and
    ``to_host_later`` fetch device ones given in this order with one copy."""
    nbytes = [int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in layout]
    offsets, size = aligned_slots(nbytes)
    memory = xp.empty(max(size, 8), dtype=np.uint8)
    if xp is not np:  # CuPy: one constructor a view (a slice, view and reshape cost 3x that)
        return [xp.ndarray(shape, dtype=dtype, memptr=memory.data + offset)
                for (shape, dtype), offset in zip(layout, offsets)]
    return [memory[offset: offset + n].view(dtype).reshape(shape)
            for (shape, dtype), offset, n in zip(layout, offsets, nbytes)]


def rows_per_block(n_rows: int) -> int:
    """Rows per block of the level plans' work lists for a shard of n_rows rows on the CPU
    (``Backend.plan_rows_per_block``; the GPU picks its own). Any choice gives the same model
    (integer sums, stable partition)."""
    return max(2048, -(-int(n_rows) // 256))


def work_list_rows(seg_start, seg_count, rows_per_block: int) -> np.ndarray:
    """(n_blocks, 5) int64 work list: per block [node, begin, end, first block of node, node
    start]; node k's segment dealt to consecutive blocks of at most rows_per_block rows, empty
    nodes get none."""
    start = np.asarray(seg_start, dtype=np.int64)
    count = np.asarray(seg_count, dtype=np.int64)
    blocks = -(-count // rows_per_block)
    node = np.repeat(np.arange(len(start), dtype=np.int64), blocks)
    first = np.cumsum(blocks) - blocks
    j = np.arange(len(node), dtype=np.int64) - first[node]
    begin = start[node] + j * rows_per_block
    end = np.minimum(begin + rows_per_block, start[node] + count[node])
    return np.stack([node, begin, end, first[node], start[node]], axis=1).reshape(-1, 5)


def segments_of_work(work, n_work, n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """(seg_start, seg_count) (n_nodes,) int64 of the nodes of a work list's first n_work[0]
    rows (nodes without a block: an empty segment)."""
    rows = np.asarray(work)[: int(n_work[0])]
    seg_start = np.zeros(n_nodes, dtype=np.int64)
    seg_count = np.zeros(n_nodes, dtype=np.int64)
    if len(rows):
        seg_start[rows[:, 0]] = rows[:, 4]
        np.add.at(seg_count, rows[:, 0], rows[:, 2] - rows[:, 1])
    return seg_start, seg_count


def check_dest(dest, row_index):
    """``partition_and_histogram``'s dest, checked (NumPy and numba): an array of row_index's
    shape and dtype, not sharing its memory (None is how to partition in place). Returns it."""
    if not isinstance(dest, np.ndarray) or dest.shape != row_index.shape or \
            dest.dtype != row_index.dtype:
        raise ValueError(f"partition_and_histogram: dest must be a {row_index.dtype} array of "
                         f"shape {row_index.shape}")
    if dest.size and np.may_share_memory(dest, row_index):
        raise ValueError("partition_and_histogram: dest must be another array than row_index "
                         "(None partitions row_index in place)")
    return dest


def check_column_out(x, out, name: str):
    """An elementwise kernel's arguments, checked alike by every version (a fast kernel must not
    write past ``out``): ``x`` one-dimensional, ``out`` a float64 array of its shape, on either
    device. Returns ``out``."""
    if getattr(x, "ndim", None) != 1:
        raise ValueError(f"{name}: x must be one-dimensional, got shape "
                         f"{getattr(x, 'shape', ())}")
    if getattr(out, "shape", None) != x.shape or getattr(out, "dtype", None) != np.float64:
        raise ValueError(f"{name}: out must be a float64 array of shape {x.shape}")
    return out


def integer_scalar(value, name: str):
    """``value`` as the integer kernels take it, checked alike by every version: a Python or
    NumPy signed integer, or a 0-d signed integer array on either device (nothing is read
    back). TypeError naming ``name`` otherwise."""
    if hasattr(value, "dtype") and hasattr(value, "ndim"):
        if value.ndim != 0 or value.dtype.kind != "i":
            raise TypeError(f"{name} must be a signed integer or a 0-d signed integer array, "
                            f"got {value.dtype} of shape {value.shape}")
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a signed integer, got {type(value).__name__}")
    return value


def feature_widths(n_value_bins, n_features: int, n_bins: int) -> np.ndarray:
    """The histogram kernels' optional ``n_value_bins`` (host (F,) ints: feature f's bins are
    0..n_value_bins[f]) as (F,) int64 bin counts, checked against the (F, n_bins) histograms;
    None: n_bins each."""
    if n_value_bins is None:
        return np.full(n_features, n_bins, dtype=np.int64)
    widths = np.asarray(n_value_bins, dtype=np.int64).reshape(-1) + 1
    if widths.shape != (n_features,) or (n_features and (widths.min() < 1 or
                                                         widths.max() > n_bins)):
        raise ValueError(f"n_value_bins must hold {n_features} counts in 0..{n_bins - 1} "
                         f"(one per feature, below n_bins), got {np.asarray(n_value_bins)!r}")
    return widths


def check_value_bins(bins, n_value_bins, n_bins: int) -> None:
    """ValueError unless every bin of feature f (column f of the (n, F) ``bins``) is at most
    n_value_bins[f] (None: nothing to check). The NumPy twins check what the fast kernels rely
    on: their histograms of a feature are only as wide as its bins."""
    if n_value_bins is None:
        return
    widths = feature_widths(n_value_bins, bins.shape[1], n_bins)
    if len(bins) and bins.shape[1]:
        over = np.flatnonzero(bins.max(axis=0) >= widths)
        if len(over):
            raise ValueError(f"feature {over[0]} has bin {int(bins[:, over[0]].max())} above "
                             f"its n_value_bins {widths[over[0]] - 1}")


def check_side_map(side_map, n_nodes: int, n_bins: int) -> np.ndarray:
    """A partition's host side map (``map_sides``: (n_nodes, n_bins) uint8, 0 missing, 1 left,
    2 right per bin) checked and made C-contiguous uint8. Returns it."""
    side_map = np.ascontiguousarray(side_map, dtype=np.uint8)
    if side_map.shape != (n_nodes, n_bins):
        raise ValueError(f"side_map must have shape ({n_nodes}, {n_bins}), got "
                         f"{side_map.shape}")
    return side_map


def gradient_out(xp, out, n_rows: int):
    """``quantise_gradients``'s output: a new (n_rows, 2) int64 array of ``xp``, or the caller's
    ``out`` once checked (an array of that shape and dtype, C-contiguous, of ``xp``)."""
    if out is None:
        return xp.empty((n_rows, 2), dtype=_dtypes.FIXED)
    if not isinstance(out, xp.ndarray) or out.shape != (n_rows, 2) or \
            out.dtype != _dtypes.FIXED or not out.flags.c_contiguous:
        raise ValueError(f"quantise_gradients: out must be a C-contiguous ({n_rows}, 2) int64 "
                         f"{xp.__name__} array")
    return out


def check_sibling_shapes(parent, n_split: int, children) -> None:
    """``sibling_histograms``' shape checks, shared by its three versions (the fast ones read
    nodes as flat words, so a mismatch would read out of bounds instead of failing)."""
    if children.shape[0] != 2 * n_split:
        raise ValueError(f"sibling_histograms: children must hold 2 * {n_split} nodes, not "
                         f"{children.shape[0]}")
    if tuple(parent.shape[1:]) != tuple(children.shape[1:]):
        raise ValueError(f"sibling_histograms: parent nodes of shape {tuple(parent.shape[1:])} "
                         f"but children of shape {tuple(children.shape[1:])}")


def check_feature_mask(feature_allowed, n_nodes: int, n_features: int) -> None:
    """ValueError unless a split search's ``feature_allowed`` is (n_features,) (every node's)
    or (n_nodes, n_features) (one row per node)."""
    shape = tuple(feature_allowed.shape)
    if shape not in ((n_features,), (n_nodes, n_features)):
        raise ValueError(f"feature_allowed must have shape ({n_features},) or ({n_nodes}, "
                         f"{n_features}), got {shape}")


def categorical_width(onehot: bool, n_categories, max_cat_threshold: int) -> int:
    """The width of ``categorical_splits``' order output: 1 for one-hot features, else the
    longest prefix any of the features may send right."""
    if onehot:
        return 1
    return max([min(int(k), max_cat_threshold) for k in n_categories] + [1])


def check_bounds(bounds, n_nodes, n_features):
    """The split searches' optional weight bounds: None, or (max_delta_step, node_bounds,
    monotone) with node_bounds (n_nodes, 2) float64 [lower, upper] and monotone None or
    (n_features,) int8 in {-1, 0, 1} (not checked with n_features None: a search that does not
    read it); returned as (float, (n, 2) array, array or None)."""
    if bounds is None:
        return None
    max_delta_step, node_bounds, monotone = bounds
    if tuple(node_bounds.shape) != (n_nodes, 2):
        raise ValueError(f"split search: node bounds of shape {tuple(node_bounds.shape)} for "
                         f"{n_nodes} nodes (expected ({n_nodes}, 2))")
    if n_features is not None and monotone is not None and \
            tuple(monotone.shape) != (n_features,):
        raise ValueError(f"split search: {len(monotone)} monotone constraints for "
                         f"{n_features} features")
    return float(max_delta_step), node_bounds, monotone


@dataclasses.dataclass
class GrownTree:
    """A tree grown whole by ``grow_whole_tree`` (host arrays, (n_nodes,) in the tree's
    breadth-first id order: a level's splits, in id order, give their children consecutive
    ids, as the level-by-level grower numbers them).

    totals: (n_nodes, 2) int64 fixed-point [g, h] sums. feature: int32 the split's feature as
    the caller numbers them (``grow_whole_tree``'s ``features``, the sparse side's
    ``features``), -1 on leaves. bin_threshold: int32, bins 1..t go left (0 on leaves, and on a
    present-versus-missing split). default_left: bool, where missing values go (False on
    leaves). gain: float64 (0 on leaves). left: int64 the left child's id (the right one's is
    left + 1), -1 on leaves. depth: int32. seg_start, seg_count: int64 the node's rows, a
    segment of the row array of its depth's parity (``grow_whole_tree``); -1 and 0 for the
    nodes of the last level of a tree that reached its depth limit (their rows were not moved:
    their parent's segment and split say where each row went).

    Finished (grown with a ``TreeFinish``; else None): threshold float32 the splits' cuts
    (``numpy_kernels.cut_thresholds``; 0 on leaves), value float64 every node's leaf value
    (``numpy_kernels.leaf_weights``, the learning rate applied), cover float64 its hessian sum:
    ``numpy_kernels.finish_whole_tree``'s arrays.
    """

    totals: np.ndarray
    feature: np.ndarray
    bin_threshold: np.ndarray
    default_left: np.ndarray
    gain: np.ndarray
    left: np.ndarray
    depth: np.ndarray
    seg_start: np.ndarray
    seg_count: np.ndarray
    threshold: np.ndarray | None = None
    value: np.ndarray | None = None
    cover: np.ndarray | None = None


# a TreeFinish whose cuts lack a grown tree's feature ids (every grower's message)
FEATURE_IDS_NOT_CUT = "grow_whole_tree: the features' ids must be features of finish.cut_offsets"


@dataclasses.dataclass
class TreeFinish:
    """What a whole-tree grower needs to finish the tree it grows (``grow_whole_tree``'s
    ``finish``), and the margins it adds the tree to.

    cut_values (float32), cut_offsets (int64): the cuts' arrays (``Cuts.values``,
    ``Cuts.offsets``), for the splits' thresholds. leaf_constants: ``LeafRule.constants``'
    (inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, learning_rate, max_delta_step), for the
    node values. margin: None, or the training rows' (n, K) float64 C-contiguous host margins,
    to whose column ``group`` each row's leaf value is added, in place, as the grower finds
    the rows' leaves (``add_leaf_values``' and ``add_split_leaf_values``' additions: one per
    row, the same float64 sums as a ``LeafRows`` update).
    """

    cut_values: np.ndarray
    cut_offsets: np.ndarray
    leaf_constants: tuple
    margin: np.ndarray | None = None
    group: int = 0

    def check(self, n_rows: int, *feature_ids) -> None:
        """ValueError unless the cuts hold every feature id of ``feature_ids`` (arrays, or None)
        and the margin (where given) is one of ``n_rows`` rows as described."""
        self.check_margin(n_rows)
        for ids in feature_ids:
            if ids is not None and len(ids) and \
                    not 0 <= np.min(ids) <= np.max(ids) < len(self.cut_offsets) - 1:
                raise ValueError(FEATURE_IDS_NOT_CUT)

    def check_margin(self, n_rows: int) -> None:
        """``check``'s tests but the ids' (the compiled grower tests those itself): six leaf
        constants, an integer group, the margin."""
        if len(self.leaf_constants) != 6 or not isinstance(self.group, (int, np.integer)) or \
                self.group < 0:
            raise ValueError(f"grow_whole_tree: finish.leaf_constants must be LeafRule.constants' "
                             f"six numbers and finish.group an integer >= 0, got "
                             f"{len(self.leaf_constants)} and {self.group!r}")
        if self.margin is not None:
            check_margins(self.margin, n_rows, self.group + 1, "finish.margin")


def check_margins(margin, n_rows: int, n_columns: int, name: str) -> None:
    """ValueError unless ``margin`` is the writeable C-contiguous (n_rows, K) float64 host
    array, K >= n_columns, a grower adds its trees to in place."""
    if not isinstance(margin, np.ndarray) or margin.dtype != _dtypes.MARGIN or \
            margin.ndim != 2 or not margin.flags.c_contiguous or not margin.flags.writeable or \
            margin.shape[0] != n_rows or margin.shape[1] < n_columns:
        raise ValueError(f"{name} must be a writeable C-contiguous ({n_rows}, K >= {n_columns}) "
                         f"float64 host array, got {type(margin).__name__} "
                         f"{getattr(margin, 'shape', None)} {getattr(margin, 'dtype', '')}")


def check_round(bins, grad, hess, scales, gh, row_index, spare_index, feature_allowed,
                split_constants, features, leaf_constants, margin, sparse=None) -> int:
    """``grow_whole_round``'s argument checks, alike in the twin and the compiled round (whose
    loops read and write every tree's arrays unchecked); returns the round's number of trees
    K. features: the dense features' ids (an array; the callers make None's)."""
    n_rows, n_features = bins.shape
    grad, hess = np.asarray(grad), np.asarray(hess)
    if grad.ndim != 2 or grad.shape != hess.shape or grad.shape[0] != n_rows or \
            grad.dtype not in (np.float32, np.float64) or hess.dtype != grad.dtype:
        raise ValueError(f"grow_whole_round: grad and hess must be ({n_rows}, K) float32 or "
                         f"float64 arrays of one shape and dtype, got {grad.shape} {grad.dtype} "
                         f"and {hess.shape} {hess.dtype}")
    n_trees = grad.shape[1]
    gradient_out(np, gh, n_rows)
    for name, rows in (("row_index", row_index), ("spare_index", spare_index)):
        if not isinstance(rows, np.ndarray) or rows.shape != (n_rows,) or \
                rows.dtype != _dtypes.ROW_INDEX or not rows.flags.c_contiguous:
            raise ValueError(f"grow_whole_round: {name} must be a C-contiguous ({n_rows},) "
                             f"int32 array")
    if len(features) != n_features:
        raise ValueError(f"grow_whole_round: features must hold {n_features} ids, got "
                         f"{len(features)}")
    allowed = np.asarray(feature_allowed)
    if allowed.ndim != 3 or allowed.shape[0] != n_trees or allowed.shape[2] != n_features or \
            allowed.dtype != np.bool_:
        raise ValueError(f"grow_whole_round: feature_allowed must be ({n_trees}, max_depth, "
                         f"{n_features}) bool, got {allowed.shape} {allowed.dtype}")
    if sparse is not None:
        want = (n_trees, allowed.shape[1], len(sparse.n_value_bins))
        if np.shape(sparse.feature_allowed) != want or \
                np.asarray(sparse.feature_allowed).dtype != np.bool_:
            raise ValueError(f"grow_whole_round: the sparse side's feature_allowed must be "
                             f"{want} bool, got {np.shape(sparse.feature_allowed)}")
    shapes = {"scales": (np.shape(scales), (n_trees, 2)),
              "split_constants": (np.shape(split_constants), (n_trees, 5)),
              "leaf_constants": (np.shape(leaf_constants), (n_trees, 6))}
    for name, (got, want) in shapes.items():
        if got != want:
            raise ValueError(f"grow_whole_round: {name} must have shape {want}, got {got}")
    check_margins(margin, n_rows, n_trees, "grow_whole_round: margin")
    if margin.shape[1] != n_trees:
        raise ValueError(f"grow_whole_round: margin must have {n_trees} columns (one a tree), "
                         f"got {margin.shape[1]}")
    return n_trees


@dataclasses.dataclass
class SparseSide:
    """One shard's sparse store as ``grow_whole_tree`` takes it (host arrays; the store's own,
    not copied).

    indptr (n + 1,) int64, entry_feature (nnz,) int16/int32, entry_bin (nnz,) uint8/uint16: the
    shard's ``SparseBins``. bin_offsets (S + 1,) int64, n_value_bins (S,) int32, common_bin (S,)
    int: the store's compact histogram layout. feature_allowed: (max_depth, S) bool, row d the
    sparse features the nodes of depth d may split on. features: (S,) int64 their ids in the
    caller's numbering (ties between stores go to the lower id). column: (n,) scratch of the
    dense bins' dtype, where a level splitting on a sparse feature gathers its rows' split bins
    (overwritten). columns: None, or the entries indexed by feature (``stores.SparseColumns``:
    col_ptr, col_rows, col_bins, marks, slots), which the CPU's grower reads. padded_bins: the
    split search's ``padded_width`` of the offsets as the store keeps it, or None (computed).
    """

    indptr: np.ndarray
    entry_feature: np.ndarray
    entry_bin: np.ndarray
    bin_offsets: np.ndarray
    n_value_bins: np.ndarray
    common_bin: np.ndarray
    feature_allowed: np.ndarray
    features: np.ndarray
    column: np.ndarray
    columns: object = None
    padded_bins: int | None = None


def better_splits(best: tuple, other: tuple) -> tuple:
    """Per node the better of two split searches' results: tuples of (n,) host arrays, gain
    first, then the feature in one numbering across stores (-1: none), then any others (bin
    threshold, default direction, left sums, ...) taken along. ``other``'s where it found a
    feature of higher gain, or of equal gain and lower id: the choice one search over every
    feature in id order would make (``split.find_splits``, the whole-tree twin). Returns (the
    kept results, (n,) bool where they are ``other``'s)."""
    gain, feature = other[0], other[1]
    take = (feature >= 0) & ((gain > best[0]) | ((gain == best[0]) & (feature < best[1])))
    return tuple(np.where(take.reshape((-1,) + (1,) * (a.ndim - 1)), b, a)
                 for a, b in zip(best, other)), take


def entry_slots(entry_feature, entry_bin, bin_offsets) -> np.ndarray:
    """(nnz,) host: each sparse entry's histogram slot ``bin_offsets[feature] + bin``, uint16
    while the slots fit (2 bytes an entry), else int32 (the store's and the compiled
    grower's one rule)."""
    offsets = np.asarray(bin_offsets, dtype=np.int64)
    slots = offsets[entry_feature]
    slots += entry_bin
    fits = offsets[-1] <= np.iinfo(np.uint16).max + 1
    return slots.astype(np.uint16 if fits else np.int32)


def padded_width(bin_offsets) -> int:
    """The width the sparse split search pads compact histograms' features to: the widest
    feature's slot count, at least 2 (host (S + 1,) offsets; 2 for no feature)."""
    offsets = np.asarray(bin_offsets, dtype=np.int64)
    return max(int(np.max(np.diff(offsets))), 2) if len(offsets) > 1 else 2


def occupied_keys_with(xp, keys):
    """``occupied_keys`` in the array namespace ``xp`` (NumPy: the twin; CuPy: the GPU's, a
    sort and scans that record into a CUDA graph). keys: (n,) int64 in [0, 2**32)."""
    n = keys.shape[0]
    order = xp.argsort(keys)
    ordered = keys[order]
    new = xp.ones(n, dtype=xp.int64)
    new[1:] = ordered[1:] != ordered[:-1]
    rank = xp.cumsum(new) - 1
    position = xp.empty(n, dtype=xp.int64)
    position[order] = rank
    entries = xp.full(n, -1, dtype=xp.int64)
    entries[rank] = ordered  # equal keys write the same value
    return entries, position


def ordered_keys(xp, X):
    """uint32 keys whose unsigned order is the float order of X (float32, any shape; -0.0 taken
    as +0.0), a new array of X's shape. NaN entries get meaningless keys; callers mask them out.

    Integer operations on the bit patterns only: floating-point arithmetic (the -0.0 + 0.0 this
    used) flushes subnormal values to zero under a flush-to-zero mode (every CuPy kernel is
    compiled with -ftz=true; a CPU thread may run with FTZ/DAZ set by a library built with
    -ffast-math), so the keys would depend on where they are made."""
    bits = X.view(xp.uint32)  # X's own memory: read, never written
    # Negative floats: flip every bit; others: flip the sign bit. The arithmetic shift of the
    # sign gives all ones for negatives, zero otherwise. (One array made and changed in place,
    # and a mask: every temporary of a large array is an allocation whose pages fault in.)
    flip = bits.view(xp.int32) >> 31
    flip |= xp.int32(-(2**31))  # the sign bit
    flip ^= bits.view(xp.int32)
    keys = flip.view(xp.uint32)
    keys += keys == xp.uint32(0x7FFFFFFF)  # -0.0's key, one below +0.0's, becomes +0.0's
    return keys


def sigmoid_with(xp, x, out):
    """1 / (1 + exp(-x)) of float ``x`` into ``out`` (same shape; may be ``x``) in the array
    namespace ``xp``, in place, the operations in this order; returns ``out``. In place: each
    temporary of a large array is a fresh allocation whose pages fault in again (200,000 rows on
    two cores: 3.0 -> 1.2 ms)."""
    xp.negative(x, out=out)
    with np.errstate(over="ignore"):
        xp.exp(out, out=out)
    out += 1.0
    return xp.divide(1.0, out, out=out)


def prediction_keys_with(xp, values):
    """int64 ordered keys (in [0, 2**32)) of float ``values``' float32 values, a new array of
    their shape, in the array namespace ``xp`` (the keys auc ranks predictions by; values
    beyond float32's range rank as its infinities)."""
    with np.errstate(over="ignore"):
        rounded = xp.asarray(values, dtype=xp.float32)
    return ordered_keys(xp, rounded).astype(xp.int64)


def key_buckets_with(xp, keys, low, span, bits: int):
    """int64 bucket ids in [0, 2**bits) of int64 ``keys`` in [low, low + span): (keys - low) *
    2**bits // span, exact integers, a new array, in the array namespace ``xp``. low, span:
    ints or 0-d int64 arrays."""
    ids = keys - low
    ids <<= bits  # in place: a large set's temporaries each fault their pages in
    ids //= span
    return ids
