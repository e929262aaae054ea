"""From checked training parts to binned shards: global checks, cuts, binning, stores."""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from . import _dtypes, binning, categories, routing, sketch
from .backend import backend_for, on_gpu
from .csr import CSR
from .metrics.by_query import per_query
from .ranking import whole_numbers
from .shards import Shard
from .stores import DenseStore, SparseStore


@dataclasses.dataclass(frozen=True)
class GlobalSizes:
    """Row counts and largest weights over every process (1.0 without weights), for the training
    data and per evaluation set."""

    n_rows: int
    max_weight: float
    eval_rows: list
    eval_max_weights: list
    # per evaluation set: its auc and aucpr are per query (``metrics.by_query``: a set with
    # query ids, in a training that ranks by query)
    eval_query_auc: list = dataclasses.field(default_factory=list)


def check_global_inputs(collective, parts, eval_sets, metric_list,
                        multiclass: bool = False, by_query: bool = False) -> GlobalSizes:
    """Checks that need every process's data; every process raises the same error.

    eval_sets: (this process's parts, name, weighted) per evaluation set. metric_list: the
    ``metrics.Metric``s evaluated: their label ranges are checked on every set (unless
    ``multiclass``: the objective checked the class labels), and auc's two classes. by_query:
    the training ranks by query (a ranking objective or metric): a set with query ids then
    takes auc and aucpr per query, as XGBoost does (``GlobalSizes.eval_query_auc``)."""
    # the rows, and the parts too long for int32 row positions (_dtypes.ROW_INDEX), in one sum
    n_rows, too_long = collective.allreduce_sum(np.array(
        [sum(p.n_rows for p in parts), sum(p.n_rows >= 2**31 for p in parts)], dtype=np.int64))
    if int(n_rows) == 0:
        raise ValueError("training data has no rows")
    if too_long:
        raise ValueError(f"{int(too_long)} training part(s) hold 2**31 rows or more; a part "
                         f"trained in one process (a worker's partitions joined) must hold fewer: "
                         f"use more partitions or workers")
    largest = 1.0
    if parts[0].weight is not None:
        largest = collective.allreduce_max(max((float(p.weight.max()) for p in parts
                                                if p.n_rows), default=0.0))
        if not largest > 0:
            raise ValueError("weight: all training weights are zero")
    if not eval_sets:
        return GlobalSizes(int(n_rows), float(largest), [], [])
    # Per evaluation set: row count, then the label range, the largest weight and whether a
    # label is not a whole number (read only where a metric needs whole ones) in one max.
    counts = collective.allreduce_sum(np.array([sum(p.n_rows for p in e) for e, _, _ in eval_sets],
                                               dtype=np.int64))
    whole_needed = any(m.whole_labels for m in metric_list)
    ranges = collective.allreduce_max(np.array(
        [[max((float(p.label.max()) for p in e if p.n_rows), default=-np.inf),
          max((-float(p.label.min()) for p in e if p.n_rows), default=-np.inf),
          max((float(p.weight.max()) for p in e if p.n_rows and weighted), default=0.0),
          max((float(not whole_numbers(backend_for(p.label).xp, p.label)) for p in e
               if p.n_rows and whole_needed), default=0.0),
          max((float(by_query and p.qid is not None) for p in e), default=0.0)]
         for e, _, weighted in eval_sets], dtype=np.float64).reshape(-1, 5))
    max_weights = []
    for (_, name, weighted), count, (high, minus_low, heaviest, fractional, with_ids) in \
            zip(eval_sets, counts, ranges):
        if count == 0:
            raise ValueError(f"evaluation set {name!r} has no rows")
        for m in metric_list:
            if with_ids and m.kind in ("auc", "aucpr"):
                m = per_query(m)
            problem = None if multiclass else \
                m.label_problem(-minus_low, high, all_whole=not fractional)
            if problem:
                raise ValueError(f"{problem}; evaluation set {name!r} has labels from "
                                 f"{-minus_low:g} to {high:g}"
                                 f"{', not all whole numbers' if fractional else ''}")
            if m.kind in ("auc", "aucpr") and high == -minus_low:
                raise ValueError(f"evaluation set {name!r} holds only one class: {m.name} is "
                                 f"undefined there (early stopping could never see it improve)")
        if weighted and not heaviest > 0:
            raise ValueError(f"evaluation set {name!r}: all weights are zero")
        max_weights.append(float(heaviest) if weighted else 1.0)
    return GlobalSizes(int(n_rows), float(largest), [int(c) for c in counts], max_weights,
                       [bool(r[4]) for r in ranges])


def _row_offset(offset, r0: int, r1: int):
    """The global row numbering of rows r0..r1-1 of a part numbered by ``offset`` (its first
    row's number, or an array of every row's)."""
    if isinstance(offset, (int, np.integer)):
        return int(offset) + r0
    return np.asarray(offset, np.uint64)[r0:r1]


def _rows(X, r0: int, r1: int):
    """Rows r0..r1-1 of a dense matrix or ``CSR`` (X itself when that is all of it)."""
    if (r0, r1) == (0, X.shape[0]):
        return X
    return X.rows(r0, r1) if isinstance(X, CSR) else X[r0:r1]


# Device bytes a training row takes besides its bins: label, margin (one output), fixed-point
# gradients (int64 pairs), float32 gradients, two row-position arrays. The default page limit
# leaves room for them.
_ROW_STATE_BYTES = 8 + 8 + 16 + 8 + 8


def device_budget(backend, params, n_rows: int) -> int | None:
    """Bytes of device memory this process's training data may take: ``device_memory_limit``,
    or by default the device's free memory less what ``n_rows`` rows' training state takes (at
    least a quarter of it: a device too full for the state still gets large pages, and training
    may then run out of memory, saying so); None for the CPU without a limit."""
    limit = params.device_memory_limit
    if limit is not None:
        return int(limit)
    free = backend.device_free_bytes()
    if free is None:
        return None
    return max(free - n_rows * _ROW_STATE_BYTES * max(1, params.n_groups), free // 4)


def _binned_size(parts: list, n_features: int, bin_dtype) -> tuple[int, int]:
    """(estimated bytes of the parts' bins, bytes of a padded dense binned row): every feature
    dense, rows padded (``binning.padded_width``), or a CSR's stored entries."""
    itemsize = np.dtype(bin_dtype).itemsize
    row_bytes = binning.padded_width(n_features, itemsize) * itemsize
    return sum(p.X.nnz * (itemsize + 4) + 8 * p.n_rows if isinstance(p.X, CSR)
               else p.n_rows * row_bytes for p in parts), row_bytes


def page_rows(backend, params, parts: list, n_features: int, bin_dtype) -> int | None:
    """Rows per page of this process's binned training data, or None when it stays on the
    device whole (it fits ``device_budget``): ``page_plan``'s first answer."""
    return page_plan(backend, params, parts, n_features, bin_dtype)[0]


# The gathered sample's room beyond the rows a sampled tree is expected to keep: a share of
# them, plus a few standard deviations of a sum of independent draws, plus a few rows.
_SAMPLE_SLACK, _SAMPLE_SPREAD, _SAMPLE_ROWS = 0.01, 4.0, 64
# The most of the budget the gathered sample may take (the pages share the rest).
_SAMPLE_SHARE = 0.9


def page_plan(backend, params, parts: list, n_features: int, bin_dtype) -> tuple:
    """(rows per page or None, sample rows or None, whether a gathered sample keeps a
    column-major copy of its bins) of this process's binned training data.

    Resident (None, None) when the bins fit ``device_budget``. Paged, the device holds two
    pages at a time (one read, the next arriving): without row sampling each takes half the
    budget. With ``subsample`` < 1 the budget first keeps room for a tree's sampled rows
    gathered onto the device (``grow.gathered``: the expected sample plus some slack, as
    padded binned rows), when that room is at most ``_SAMPLE_SHARE`` of it, and the pages
    share the rest (a sample row takes its padded bins, and their column-major copy where room
    is left for it); the second answer is then how many rows a gathered sample may hold
    (a tree whose sample holds more is grown on the pages). The CPU's default pages nothing."""
    n_rows = sum(p.n_rows for p in parts)
    limit = device_budget(backend, params, n_rows)
    if limit is None:
        return None, None, False
    binned, row_bytes = _binned_size(parts, n_features, bin_dtype)
    if binned <= limit:
        return None, None, False
    limit = max(limit, 0)
    sample_rows, sample_copy = None, False
    if params.subsample < 1.0:
        expected = params.subsample * n_rows
        rows = int(np.ceil(expected * (1 + _SAMPLE_SLACK) + _SAMPLE_SPREAD * np.sqrt(n_rows)
                           + _SAMPLE_ROWS))
        # a sample row's bins: padded, and with a column-major copy where that fits too (the
        # partition reads a feature's column faster there); its fixed-point pair and row
        # positions are rows' training state, which the limit leaves out for every row
        itemsize = np.dtype(bin_dtype).itemsize
        for copy in ([True, False] if column_copy() else [False]):
            sample_row_bytes = row_bytes + (n_features * itemsize if copy else 0)
            if rows * sample_row_bytes <= _SAMPLE_SHARE * limit:
                sample_rows, sample_copy = rows, copy
                limit -= rows * sample_row_bytes
                break
    return max(1, int(limit // 2 // row_bytes)), sample_rows, sample_copy


def raw_fits(backend, params, n_rows: int, raw_bytes: int, binned_bytes: int) -> bool:
    """Whether ``raw_bytes`` of raw values in host memory may be copied to the device whole for
    the sketch and binning: they fit ``device_budget`` beside the ``binned_bytes`` of bins. If
    not, they stay on the host and the device gets a block of rows at a time (raw data larger
    than the device)."""
    limit = device_budget(backend, params, n_rows)
    return limit is None or raw_bytes + binned_bytes <= limit


def raw_block_rows(backend, params, parts: list, n_features: int, bin_dtype=np.uint8
                   ) -> int | None:
    """None when the parts' raw values may be copied to the device whole (``raw_fits``, those
    already there not counted), else the rows of them to copy at a time (the sketch's block)."""
    fits = raw_fits(backend, params, sum(p.n_rows for p in parts),
                    sum(p.X.nbytes for p in parts if not on_gpu(p.X)),
                    _binned_size(parts, n_features, bin_dtype)[0])
    return None if fits else _block_rows(backend, n_features)


def _block_rows(backend, n_features: int) -> int:
    """Rows of raw values copied to the device at a time: the sketch's block."""
    return max(1, backend.sketch_block_values // max(n_features, 1))


def dense_binned_bytes(n_rows: int, n_features: int, bin_dtype=np.uint8) -> int:
    """Estimated bytes of ``n_rows`` dense binned rows (padded, ``binning.padded_width``)."""
    return _binned_size([], n_features, bin_dtype)[1] * n_rows


def bin_into(shardset, parts: list, params, n_rows: int, max_weight: float, row_offsets: list,
             drop_features: bool, cuts=None):
    """``_bin_into`` with the parts' host feature matrices registered with the device for it
    (``Backend.host_registered``): the sketch's passes, the counting and the binning each copy
    them to the device (a block at a time when they do not fit beside the bins)."""
    with shardset.backend.host_registered([p.X for p in parts]):
        return _bin_into(shardset, parts, params, n_rows, max_weight, row_offsets,
                         drop_features, cuts)


def _bin_into(shardset, parts: list, params, n_rows: int, max_weight: float, row_offsets: list,
              drop_features: bool, cuts=None):
    """Fill ``shardset`` (empty) with shards binned with cut points computed over every
    process's parts, the features routed into the dense and sparse stores. Returns the ``Cuts``.

    parts: this process's checked ``DataSet``s. Each part is one shard, or, when the binned data
    exceeds the device memory limit (``page_rows``), one shard per page of rows whose dense bins
    live in host memory (``stores.DenseStore``, paged). The raw values of host parts are copied
    to the device whole when they fit beside the bins (``raw_fits``); otherwise (and when
    paged) they stay where they are and reach the device a block of rows at a time, for the
    sketch and for binning. Shards change speed and
    memory, never the model. n_rows, max_weight: from ``check_global_inputs``. row_offsets: per
    part the global number of its first row, or an (n_i,) array of its rows' global numbers.
    Reductions through ``shardset.collective``, in the same order on every process. Side
    effects: with ``drop_features`` each part's X is set to None once binned (the raw matrix
    can be freed); the backend's cached device memory is given back after the sketch and after
    routing. cuts: the ``Cuts`` to bin with (a model's, when training continues from it) instead
    of sketching new ones.
    """
    backend, collective = shardset.backend, shardset.collective
    weights = None if parts[0].weight is None else [backend.asarray(p.weight) for p in parts]
    # the bins' width before any cut is known: categorical features have a bin per category
    bin_dtype = cuts.bin_dtype if cuts is not None else _dtypes.bin_dtype(
        max([params.max_bin] + [len(v) + 1 for v in parts[0].categories.values()]))
    n_features = len(parts[0].feature_names)
    rows_per_page, sample_rows, sample_copy = page_plan(backend, params, parts, n_features,
                                                        bin_dtype)
    paged = rows_per_page is not None
    # rows of raw values copied to the device at a time when they are not copied there whole
    block_rows = raw_block_rows(backend, params, parts, n_features, bin_dtype) \
        if not paged else _block_rows(backend, n_features)
    raw = [p.X if block_rows else backend.asarray(p.X) for p in parts]
    if cuts is None:
        cuts = sketch.compute_cuts(backend.xp, raw, weights, params.max_bin,
                                   collective=collective,
                                   block_values=backend.sketch_block_values, n_rows=n_rows,
                                   max_weight=max_weight, kernels=backend.kernels)
        backend.free_cached_memory()  # the sketch's temporaries
        names = parts[0].feature_names
        cuts = cuts.with_features({names.index(name): categories.category_cuts(len(values))
                                   for name, values in parts[0].categories.items()})
    categorical = np.isin(parts[0].feature_names, list(parts[0].categories))
    shardset.categorical = categorical
    pages = [(i, r0, min(p.n_rows, r0 + rows_per_page) if paged else p.n_rows)
             for i, p in enumerate(parts)
             for r0 in (range(0, max(p.n_rows, 1), rows_per_page) if paged else [0])]

    def binned_page(page):
        i, r0, r1 = page
        return binning.bin_part(backend, _rows(raw[i], r0, r1), cuts, block_rows=block_rows)

    # resident: each part binned once and kept for its stores; paged: binned once to count,
    # again to build its stores, so no more than a page's bins are on the device at a time
    binned = [binned_page(page) for page in pages] if not paged else [None] * len(pages)
    route = routing.Routing.all_dense(cuts.n_features)
    if params.sparse_threshold is None or params.sparse_threshold < 1.0:
        counts = collective.allreduce_sum(  # rows per (feature, bin), over every process
            np.sum([binning.bin_counts(backend, b if b is not None else binned_page(page), cuts)
                    for b, page in zip(binned, pages)], axis=0))
        route = routing.decide(counts, cuts, params.sparse_threshold, keep_dense=categorical)
    dense = DenseStore(backend, route.dense, cuts.n_value_bins[route.dense],
                       column_copy=column_copy(), paged=paged)
    stores = [dense]
    if route.has_sparse:
        stores.append(SparseStore(backend, route.sparse, route.n_value_bins, route.common_bin,
                                  route.bin_offsets))
    # each part's labels (and weights) on the device once, its shards' (pages') views of them
    labels = [backend.asarray(p.label) for p in parts]
    shardset.part_shards = [Shard(label=labels[i], weight=None if weights is None else weights[i],
                                  row_offset=_row_offset(row_offsets[i], 0, p.n_rows))
                            for i, p in enumerate(parts)]
    for k, (i, r0, r1) in enumerate(pages):
        part = binned[k] if binned[k] is not None else binned_page((i, r0, r1))
        binned[k] = None
        bins, entries = binning.build_stores(backend, part, cuts, route)
        del part
        dense.add_shard(bins)
        if entries is not None:
            stores[1].add_shard(entries)
        shardset.part_rows.append((i, r0, r1))
        shardset.shards.append(Shard(label=labels[i][r0:r1],
                                     weight=None if weights is None else weights[i][r0:r1],
                                     row_offset=_row_offset(row_offsets[i], r0, r1)))
    shardset.set_stores(stores)
    shardset.sample_rows, shardset.sample_column_copy = sample_rows, sample_copy
    backend.free_cached_memory()  # the full binned matrix and routing's temporaries
    if drop_features:
        for p in parts:
            p.X = None
    return cuts


def column_copy() -> bool:
    """Whether resident dense stores keep a column-major copy of the bins beside the rows
    (GBFLOW_COLUMN_COPY=0/1; default 1)."""
    return os.environ.get("GBFLOW_COLUMN_COPY", "1") != "0"
