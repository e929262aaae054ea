"""A paged training's sampled tree, grown on its sampled rows gathered onto the device.

With row sampling (``subsample`` < 1, uniform or gradient-based) a tree's histograms only sum
the sampled rows: the others' fixed-point gradients are 0. When the dense bins are paged, the
level loop would still stream every page once per level; here each page is read once to gather
the rows with a nonzero gradient pair into one resident shard (a shard set of its own), the tree
is grown there with any of the loops, and each page is read once more to add the tree to every
row's margin (a walk of the tree on the pages' bins, ``predictor.add_trees_on_pages``). The
gathering reads only the kept rows (``Backend.scatter_page_rows``: on the GPU straight from
the host pages), the walk every row: about 1.2 passes over the pages a tree instead of
``max_depth + 1``.

The model is the one the paged (and the resident) loop grows: rows whose pair is (0, 0) add
nothing to any histogram, node total or cover, the sums are exact integers whatever the shards,
and the walk sends every row to the leaf the partition would (the same bins, thresholds and
default directions), adding the same float64 leaf value.
"""
from __future__ import annotations

import numpy as np

from .. import binning
from ..shards import Shard, ShardSet
from ..stores import DenseStore


def can_gather(shardset) -> bool:
    """Whether ``shardset`` may grow its trees on gathered samples: a row budget for them was
    set (``ShardSet.sample_rows``: sampled training whose dense bins are paged) and every
    feature is in the one dense store."""
    return shardset.sample_rows is not None and len(shardset.stores) == 1 and \
        shardset.dense.paged


def gather_sample(shardset, gh: list, part_gh: list | None = None):
    """(a resident ``ShardSet`` of one shard of ``shardset.sample_rows`` rows (the room the
    pages were sized around) holding first every row of ``shardset`` whose pair in ``gh`` is
    not (0, 0), in shard order, then rows of pair (0, 0) and bins 0; that shard's (m, 2) int64
    pairs; the ``PendingCopies`` of the count of rows kept). Reads each page once (the GPU
    only its kept rows, ``Backend.scatter_page_rows``) and never waits for the device: the
    rows' places are running counts on the device, and a row past the room goes to a spare
    last row, so when the count (read once the tree is grown) exceeds the room the sample lost
    rows and its tree must not be used.

    The filler rows change no sum (their pairs are 0), so the tree is the one of the kept rows
    alone. part_gh: the same pairs per part (``ShardSet.part_shards``; gh's are views of
    them), when the caller has them: the places are then found per part, a few kernel calls a
    part instead of a page; every page's rows are scattered to their places in one call."""
    backend, xp = shardset.backend, shardset.backend.xp
    if part_gh is not None:
        groups, spans = part_gh, shardset.part_rows
    else:  # every shard its own group
        groups, spans = gh, [(s, 0, int(g.shape[0])) for s, g in enumerate(gh)]
    room = shardset.sample_rows
    dense = shardset.dense
    width = binning.padded_width(dense.n_features, np.dtype(dense.dtype).itemsize)
    storage = xp.zeros((room + 1, width), dtype=dense.dtype)
    pairs = xp.zeros((room + 1, 2), dtype=gh[0].dtype if gh else np.int64)
    count = xp.zeros(1, dtype=np.int64)  # rows kept so far (on the device)
    places = []
    for g in groups:
        keep = (g != 0).any(axis=1)
        running = xp.cumsum(keep)
        place = xp.where(keep, xp.minimum(running - 1 + count, room), room) if len(g) else None
        if place is not None:
            pairs[place] = g
            count = count + running[-1:]
        places.append(place)
    # only the kept rows are read from the host pages (the GPU reads them where they lie)
    read = [(s, group, r0, r1) for s, (group, r0, r1) in enumerate(spans)
            if places[group] is not None and r1 > r0]
    backend.scatter_page_rows([dense.host_page(s) for s, _, _, _ in read],
                              [places[group][r0:r1] for _, group, r0, r1 in read], room, storage)
    sample = ShardSet(backend, shardset.collective)
    sample.timers = shardset.timers
    sample.level_plans, sample.whole_trees = shardset.level_plans, shardset.whole_trees
    sample.categorical = shardset.categorical
    # (the label is read for the row count only: growing takes the pairs)
    sample.shards = [Shard(label=xp.empty(room, dtype=np.float64), weight=None, row_offset=0)]
    sample.part_rows = [(0, 0, room)]
    store = DenseStore(backend, dense.features, dense.n_value_bins_host,
                       column_copy=shardset.sample_column_copy, paged=False)
    store.add_shard(storage[:room, :dense.n_features])
    sample.set_stores([store])
    return sample, pairs[:room], backend.to_host_later([count])
