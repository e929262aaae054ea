"""Training margins after a tree: from where its rows ended up in the level loops, or by walking
the finished tree on the rows' bins where that is not known on the host."""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import predictor
from .pending import finished_tree


@dataclasses.dataclass
class LeafRows:
    """Where one shard's rows ended up in a level-by-level tree: all the margin update needs.

    Leaves above the last level own segments of a row array: ``leaves`` holds, per array that
    holds any, (row_index, leaf_start, leaf_count, leaf_node), leaf_node their tree node ids.
    (The grower partitions from one row array into the other and back, level by level, and a
    leaf's rows stay where its level left them.) Nodes split at the last level were not
    partitioned: their segments of ``row_index`` (split_start, split_count) and splits
    (feature, bin_threshold, default_left) send each row to the child left_node or
    left_node + 1, the row's split bin read from the matrix ``by_feature()`` gives when the
    update runs (the dense store's (D, n) columns, or a (1, n) gathered split column with
    ``feature`` 0). node_value: (n_nodes,) float64 the tree's values by node id (``with_values``
    swaps them: a line search's leaf values, or leaf numbers to find each row's leaf). Host
    arrays, except the row arrays (device).
    """

    leaves: list
    row_index: object
    split_start: np.ndarray
    split_count: np.ndarray
    feature: np.ndarray
    bin_threshold: np.ndarray
    default_left: np.ndarray
    left_node: np.ndarray
    node_value: np.ndarray
    by_feature: object  # () -> (k, n) device matrix

    def add_to(self, kernels, margin) -> None:
        """margin[row] += the value of the row's leaf, for every row (margin: (n,) float64,
        device, may be a strided column view)."""
        for row_index, start, count, node in self.leaves:
            kernels.add_leaf_values(margin, row_index, start, count, self.node_value[node])
        if len(self.split_start):
            kernels.add_split_leaf_values(margin, self.by_feature(), self.row_index,
                                          self.split_start, self.split_count, self.feature,
                                          self.bin_threshold, self.default_left,
                                          self.node_value[self.left_node],
                                          self.node_value[self.left_node + 1])

    def with_values(self, node_value: np.ndarray) -> "LeafRows":
        """The same rows, adding ``node_value`` ((n_nodes,) float64 host, by node id)."""
        return dataclasses.replace(self, node_value=np.asarray(node_value, dtype=np.float64))


@dataclasses.dataclass
class PlannedMargins:
    """A shard's margin update for a planned tree, queued on the device from the levels' arrays
    (nothing read back): each level's leaves (``kernels.add_planned_leaf_values``), then the
    last level's through its parents' splits (``add_planned_split_values``). ``add_to`` as
    ``LeafRows.add_to``; it must run before the next tree reuses the level arrays. The queued
    update adds the values the leaf rule gives; ``with_values`` (a line search's) walks the
    finished tree instead, the rows' leaves being known only on the device, level by level."""

    levels: list
    rows: tuple  # the shard's two row arrays: level d's rows are in rows[d % 2]
    constants: tuple  # LeafRule.constants
    shard: int
    by_feature: object  # () -> the shard's dense (D, n) columns
    # where the levels are a layout's fixed ones (``planned._PlannedLayout``, given here): the
    # shard set's ``margin_recorder`` records the update per margin column and replays it
    layout: object = None
    recorder: object = None
    shardset: object = None
    tree: object = None  # the ``PendingTree`` these rows grew

    def with_values(self, node_value: np.ndarray) -> WalkedMargins:
        """The same rows, adding ``node_value`` ((n_nodes,) float64 host, by node id): the
        finished tree (waited for) walked on the shard's bins."""
        return WalkedMargins(self.shardset, self.shard,
                             finished_tree(self.tree)).with_values(node_value)

    def add_to(self, kernels, margin) -> None:
        key = None
        if self.layout is not None and self.recorder.records:
            address = self.recorder.address
            key = (self.layout, self.shard, tuple(address(r) for r in self.rows),
                   address(margin), address(self.by_feature()),
                   tuple(float(c) for c in self.constants))
        if key is None:
            self._queue(kernels, margin)
        else:
            self.recorder.run(key, lambda: self._queue(kernels, margin))

    def _queue(self, kernels, margin) -> None:
        s = self.shard
        for depth, level in enumerate(self.levels[:-1]):
            kernels.add_planned_leaf_values(margin, self.rows[depth % 2], level.seg_start[s],
                                            level.seg_count[s], level.plan["is_leaf"],
                                            level.totals, *self.constants)
        if len(self.levels) > 1:
            last, child = self.levels[-2], self.levels[-1]
            plan = last.plan
            kernels.add_planned_split_values(
                margin, self.by_feature(), self.rows[(len(self.levels) - 2) % 2],
                last.split_start[s][: child.half], last.split_count[s][: child.half],
                plan["n_split"], plan["split_feature"][: child.half],
                plan["split_threshold"][: child.half], plan["split_default_left"][: child.half],
                plan["built_left"][: child.half], child.totals, child.half, *self.constants)


def device_forest(backend, forest):
    """``forest`` (a ``predictor.FlatForest``) with its node arrays on the backend's device in
    the kernels' dtypes: uploaded once for the walks of every page, not once a page."""
    dtypes = {"feature": np.int32, "bin_threshold": np.int32, "default_left": np.bool_,
              "left": np.int32, "right": np.int32, "value": np.float64, "tree_root": np.int64,
              "tree_group": np.int32, "cat_start": np.int32, "cat_bits": np.uint32}
    xp = backend.xp
    return dataclasses.replace(forest, **{
        name: xp.asarray(np.ascontiguousarray(getattr(forest, name), dtype=dtype))
        for name, dtype in dtypes.items() if getattr(forest, name) is not None})


@dataclasses.dataclass
class WalkedMargins:
    """A shard's margin update for a finished tree: the tree walked on the shard's bins (read
    when ``add_to`` runs: pages are read in order). For a tree grown on a gathered sample, and
    for a planned tree whose leaf values a line search sets (``PlannedMargins.with_values``).
    The walk sends every row to the leaf the partition did (the same bins, thresholds and
    default directions) and adds the same float64 value. ``add_to`` and ``with_values`` as
    ``LeafRows``'."""

    shardset: object
    shard: int
    tree: object  # the host ``Tree``
    # its one-tree ``FlatForest`` (output 0): uploaded once for every page where given (the
    # gathered samples'); else made on the host at each walk, the kernels copying it in one go
    forest: object = None

    def add_to(self, kernels, margin) -> None:
        """margin ((n,) float64, device, may be a strided column view) += each row's leaf
        value. Side effect: where the margin is a strided column, a transient (n, 1) float64
        device array (the walk's kernels write a C-contiguous margin matrix)."""
        backend = self.shardset.backend
        forest = self._flat_forest()
        rows = predictor.BinnedRows(self.shardset.dense.rows(self.shard))
        column = margin[:, None]
        if column.flags.c_contiguous:  # the walk adds into the margin itself: two launches
            predictor.add_trees(backend, rows, forest, column)  # fewer a page
            return
        # -0.0 + v is v bit for bit (0.0 + -0.0 is +0.0), so the margin gets exactly what
        # the direct addition gives it, a leaf of -0.0 included
        values = backend.xp.full((margin.shape[0], 1), -0.0, dtype=np.float64)
        predictor.add_trees(backend, rows, forest, values)
        margin += values[:, 0]

    @staticmethod
    def add_together(walks: list, margins: list) -> bool:
        """Each walk's margin update added to ``margins`` ((n_s,) float64 device columns, by
        shard) in one backend call, where ``walks`` are one tree's over every page of a paged
        store, in shard order (``Backend.predict_pages_binned``: one launch on the GPU, which
        reads each page where it lies); False, nothing added, otherwise."""
        first = walks[0] if walks else None
        if not isinstance(first, WalkedMargins) or not first.shardset.dense.paged or any(
                not isinstance(w, WalkedMargins) or w.shardset is not first.shardset or
                not _same_tree(w.tree, first.tree) or w.forest is not first.forest or
                w.shard != s for s, w in enumerate(walks)) or \
                len(walks) != len(first.shardset.shards):
            return False
        dense = first.shardset.dense
        predictor.add_trees_on_pages(first.shardset.backend,
                                     [dense.host_page(s) for s in range(len(walks))],
                                     dense.n_features, first._flat_forest(),
                                     [m[:, None] for m in margins])
        return True

    def _flat_forest(self):
        """The tree's one-tree ``FlatForest`` (output 0): the one uploaded once, else made
        from the host tree."""
        return self.forest if self.forest is not None else \
            predictor.FlatForest.from_trees([dataclasses.replace(self.tree, group=0)])

    def with_values(self, node_value: np.ndarray) -> "WalkedMargins":
        """The same rows, adding ``node_value`` ((n_nodes,) float64 host, by node id)."""
        return WalkedMargins(self.shardset, self.shard, dataclasses.replace(
            self.tree, value=np.asarray(node_value, dtype=np.float64)))


def _same_tree(a, b) -> bool:
    """Whether two host trees are one, or copies holding the same node arrays (``with_values``
    makes a tree a shard, all holding one value array)."""
    def same(x, y) -> bool:
        return x is y or (not isinstance(x, np.ndarray) and type(x) is type(y) and x == y)
    return a is b or all(same(getattr(a, f.name), getattr(b, f.name))
                         for f in dataclasses.fields(a))


def add_margins(kernels, leaf_rows: list, margins: list) -> None:
    """Each shard's tree update added to its margin: ``leaf_rows`` per shard (``LeafRows``,
    ``PlannedMargins`` or ``WalkedMargins``), ``margins`` per shard (n_s,) float64 device
    columns (may be strided), updated in place. One tree's walks over a paged store's pages go
    in one backend call (``WalkedMargins.add_together``), others shard by shard."""
    if not WalkedMargins.add_together(leaf_rows, margins):
        for rows, margin in zip(leaf_rows, margins, strict=True):
            rows.add_to(kernels, margin)
