"""Exact weighted quantile cuts of every feature (``compute_cuts``), from mergeable summaries.

Why exact and not a lossy sketch: gbflow's promise is the same model from the same data however it
is split into partitions or workers, and a lossy summary depends on the merge order. Here every
summary is a table of integer weights that merges by adding the weights of equal ids, so the cuts
are the exact weighted quantiles of the float32 data, independent of row order and partitioning.

How, in three passes over the data (a radix select on the float32 bit patterns):

1. ``coarse_summary``: per feature, the total weight in each bucket given by the top 16 bits of
   the order-preserving uint32 key of each value. ``candidate_buckets`` then picks the buckets
   that hold a target quantile rank (or, for a feature with few occupied buckets, all of them, so
   low-cardinality features get one bin per distinct value).
2. ``middle_summary``: inside candidate buckets, the total weight per next 8 bits of the key.
   ``candidate_sub_buckets`` picks the sub-buckets that hold a target rank (or all of them).
   While it fits, ``MiddleTable`` gives the same summary through one dense table that every
   part adds into and processes sum in place (no gather and host merge).
3. ``fine_summary``: the exact distinct values, with their weights, inside candidate sub-buckets
   (at most 256 distinct floats each, so this summary stays small even on continuous data).
4. ``choose_cuts``: the exact value at each target rank becomes a cut.

Every summary is *sparse*: a ``Summary`` holds only the ids that carry weight, sorted, where an id
is ``feature << shift | top bits of the key`` (shift 16, 24 and 32 for the three passes, so a fine
id shifted right by 8 is its sub-bucket's id and by 16 its bucket's). Host memory is therefore
proportional to the occupied buckets, never to n_features * 65,536: 20,000-column sparse data
costs what its stored entries cost.

The selections do not test every entry of a summary (the middle one holds tens of millions of
sub-buckets on wide continuous data). They start from the target ranks, n_value_bins - 1 per
feature with more than n_value_bins entries, and find the entry holding each by a search in the
summary's running sum of weights (``_Targets``), then keep those entries and every entry of the
features with few: host work in proportion to the targets and one cumulative sum per summary,
vectorised over all features.

The passes read dense (n_rows, n_features) float32 matrices (NaN is missing) and ``csr.CSR``
matrices (absent entries and stored NaN are missing) in their own namespace ``xp`` (NumPy or
CuPy); only the summaries go to the host. A group of features with many values is tallied in a
dense per-group table (the backend's ``sketch_counts`` and ``sketch_selected`` kernels: one
pass over a block on the CPU's threads, atomic adds on the GPU; compressed with flatnonzero
before it leaves the device); a group with few values per bucket (wide sparse data, small
partitions) by sorting its ids. Both give the same integers.

Weights are fixed-point integers (``fixed_point.fixed_point_scale`` with a 2**52 limit) whose totals
per feature stay below 2**53, so float64 table sums (``backend.tables.table_counts``: NumPy's
bincount, atomic adds on the GPU) add them exactly in any order.
Sums over several features may pass 2**63; they are taken in uint64, whose wrap-around leaves
every difference of partial sums that lies inside one feature exact. Values of zero weight count
as absent (like rows repeated zero times). Missing values are not part of any summary; they get
their own bin.

Where things live: ``compute`` runs the passes and the reductions between them (``compute_cuts``);
``keys`` holds the ordered keys, the id layout and the fixed-point weights; ``summary`` the
``Summary`` tables, their tallies and merges and the rank searches; ``blocks`` the reading of dense
and CSR data in groups and blocks; ``passes`` the three passes and ``MiddleTable``; ``selection``
the targets, the candidate selections, ``Slots`` and ``choose_cuts``. The tunables are read in
their own modules, where tests patch them, and are not re-exported here (a patch of this package
would change nothing): ``summary.ONE_SEARCH_LIMIT``, ``blocks.CSR_BLOCK_ENTRIES``,
``passes.MIDDLE_TABLE_ENTRIES``, ``selection.VALUES_PER_SUB_BUCKET``.
"""
from __future__ import annotations

from .blocks import BLOCK_VALUES
from .compute import compute_cuts
from .keys import (
                   COARSE_SHIFT,
                   FINE_SHIFT,
                   MIDDLE_SHIFT,
                   N_BUCKETS,
                   N_SUB,
                   RADIX_BITS,
                   SUB_BITS,
                   fixed_weights,
                   keys_to_values,
                   ordered_keys,
)
from .passes import MiddleTable, coarse_summary, fine_summary, middle_summary
from .selection import Slots, bucket_slots, candidate_buckets, candidate_sub_buckets, choose_cuts
from .summary import Summary, merge

__all__ = [
    "BLOCK_VALUES", "COARSE_SHIFT", "FINE_SHIFT", "MIDDLE_SHIFT", "N_BUCKETS", "N_SUB",
    "RADIX_BITS", "SUB_BITS", "MiddleTable", "Slots", "Summary", "bucket_slots",
    "candidate_buckets", "candidate_sub_buckets", "choose_cuts", "coarse_summary", "compute_cuts",
    "fine_summary", "fixed_weights", "keys_to_values", "merge", "middle_summary", "ordered_keys",
]
