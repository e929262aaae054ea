"""Training margins after a tree, from where its rows ended up (no second walk of the tree)."""
from __future__ import annotations

import dataclasses

import numpy as np


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
    swaps them: a line search's leaf values, or node ids to find each row's leaf). Host
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


# Leaf-rule constants under which a slot's leaf weight is its code: totals (-code, 1) with
# inverse scales 1, lambda and alpha 0, learning rate 1 give -(-code) / 1 * 1 = code, exactly
# (codes are integers far below 2**53).
_CODE_CONSTANTS = (1.0, 1.0, 0.0, 0.0, 1.0)


@dataclasses.dataclass
class PlannedMargins:
    """A shard's margin update for a planned tree, queued on the device from the levels' arrays
    (nothing read back): each level's leaves (``kernels.add_planned_leaf_values``), then the
    last level's through its parents' splits (``add_planned_split_values``). ``add_to`` as
    ``LeafRows.add_to``; it must run before the next tree reuses the level arrays.

    ``with_values`` (once the tree is finished: ``slot_nodes`` then holds, per level, each
    slot's tree node id) gives ``CodedRows``: the same rows adding other values by node id (a
    line search's leaf values, or leaf numbers to find each row's leaf)."""

    levels: list
    rows: tuple  # the shard's two row arrays: level d's rows are in rows[d % 2]
    constants: tuple  # LeafRule.constants
    shard: int
    by_feature: object  # () -> the shard's dense (D, n) columns
    backend: object = None
    n_rows: int = 0
    slot_nodes: list | None = None  # per level, (cap,) int64 node id per slot (-1: none)
    _codes: object = None  # (n,) int64 each row's leaf code, once made

    def add_to(self, kernels, margin) -> None:
        self._add(kernels, margin, lambda depth, level: level.totals, self.constants)

    def _add(self, kernels, margin, totals, constants) -> None:
        """Every row's leaf weight of ``totals(depth, level)`` (a level's (cap, 2) int64) under
        the leaf-rule ``constants``, added into margin."""
        s = self.shard
        for depth, level in enumerate(self.levels[:-1]):
            kernels.add_planned_leaf_values(margin, self.rows[depth % 2], level.seg_start[s],
                                            level.seg_count[s], level.plan["is_leaf"],
                                            totals(depth, level), *constants)
        if len(self.levels) > 1:
            last, child = self.levels[-2], self.levels[-1]
            plan = last.plan
            kernels.add_planned_split_values(
                margin, self.by_feature(), self.rows[(len(self.levels) - 2) % 2],
                last.split_start[s][: child.half], last.split_count[s][: child.half],
                plan["n_split"], plan["split_feature"][: child.half],
                plan["split_threshold"][: child.half], plan["split_default_left"][: child.half],
                plan["built_left"][: child.half], totals(len(self.levels) - 1, child),
                child.half, *constants)

    def _offsets(self) -> np.ndarray:
        return np.cumsum([0] + [level.cap for level in self.levels])

    def codes(self):
        """(n_rows,) int64 device: each row's leaf as a code, its level's offset plus its slot
        (the margin update with totals whose leaf weights are the codes); made once."""
        if self._codes is None:
            xp, offsets = self.backend.xp, self._offsets()

            def coded(depth, level):
                code = xp.arange(offsets[depth], offsets[depth] + len(level.totals))
                return xp.stack([-code, xp.ones_like(code)], axis=1).astype(xp.int64)
            codes = xp.zeros(self.n_rows, dtype=xp.float64)
            self._add(self.backend.kernels, codes, coded, _CODE_CONSTANTS)
            self._codes = codes.astype(xp.int64)
        return self._codes

    def with_values(self, node_value: np.ndarray) -> "CodedRows":
        """The same rows adding ``node_value`` ((n_nodes,) float64 host, by node id); the tree
        must be finished (``slot_nodes`` filled)."""
        codes = self.codes()
        node_of_code = np.full(self._offsets()[-1], -1, dtype=np.int64)
        for offset, nodes in zip(self._offsets(), self.slot_nodes):
            node_of_code[offset: offset + len(nodes)] = nodes
        return CodedRows(self.backend.xp, codes, node_of_code,
                         np.asarray(node_value, dtype=np.float64))


@dataclasses.dataclass
class CodedRows:
    """A planned tree's rows by leaf code (``PlannedMargins.codes``) adding ``node_value`` by
    node id: ``add_to`` and ``with_values`` as ``LeafRows``'."""

    xp: object
    codes: object  # (n,) int64 device
    node_of_code: np.ndarray  # (n_codes,) int64 host, -1 for codes of no node
    node_value: np.ndarray  # (n_nodes,) float64 host

    def add_to(self, kernels, margin) -> None:
        value = np.where(self.node_of_code >= 0, self.node_value[self.node_of_code], 0.0)
        margin += self.xp.asarray(value)[self.codes]

    def with_values(self, node_value: np.ndarray) -> "CodedRows":
        return dataclasses.replace(self, node_value=np.asarray(node_value, dtype=np.float64))
