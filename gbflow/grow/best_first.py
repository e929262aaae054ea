"""Growing one tree best first to a leaf budget (``grow_policy="lossguide"``, ``max_leaves``)."""
from __future__ import annotations

import heapq

import numpy as np

from .. import split
from ..histogram import Histograms
from ..sampling import child_keys
from ..split import LevelSplits
from ..tree import Tree, level_arrays
from .levels import _leaf_rows, _next_level_order
from .margins import LeafRows


class _OpenHistograms:
    """The open nodes' histograms (searched, worth splitting, not split yet), per store one
    device array of slots kept in the shard set's level buffers. A batch's children take the
    next 2n slots in a row, so the partition and the sibling subtraction write them in place;
    a split node's slot is left behind, and when the slots run out the open ones are moved to
    the front (the buffers doubled when they would still be over three quarters full)."""

    _KEY = "open"  # the LevelBuffers key (the levels' keys are their parities)

    def __init__(self, buffers, root: Histograms, capacity: int):
        self.buffers = buffers
        capacity = max([capacity] + [buffers.rows_held(i, self._KEY, a.shape[1:], a.dtype)
                                     for i, a in enumerate(root.arrays)])
        self.arrays = [buffers.take(i, self._KEY, (capacity,) + a.shape[1:], a.dtype)
                       for i, a in enumerate(root.arrays)]
        for mine, theirs in zip(self.arrays, root.arrays):
            mine[:1] = theirs
        self.top = 1  # slots from here on are free

    @property
    def histograms(self) -> Histograms:
        return Histograms(tuple(self.arrays))

    def take_children(self, xp, n: int, nodes: "_Nodes") -> tuple[Histograms, int]:
        """2n slots in a row for a batch of n splits, the second half zeroed (the layout of
        ``Histograms.next_level``), and the first slot's number. May move the open nodes
        (``nodes.slot``)."""
        if self.top + 2 * n > len(self.arrays[0]):
            self._make_room(xp, 2 * n, nodes)
        first, self.top = self.top, self.top + 2 * n
        children = Histograms(tuple(a[first:self.top] for a in self.arrays))
        for array in children.arrays:
            array[n:] = 0
        return children, first

    def _make_room(self, xp, need: int, nodes: "_Nodes") -> None:
        live = np.flatnonzero(nodes.slot >= 0)
        capacity = len(self.arrays[0])
        if 4 * (len(live) + need) > 3 * capacity:
            capacity = max(2 * capacity, 2 * (len(live) + need))
        at = xp.asarray(nodes.slot[live])
        for i, array in enumerate(self.arrays):
            kept = array[at]  # a copy: the buffer may be taken anew, its contents unset
            self.arrays[i] = self.buffers.take(i, self._KEY, (capacity,) + array.shape[1:],
                                               array.dtype)
            self.arrays[i][:len(live)] = kept
        nodes.slot[live] = np.arange(len(live))
        self.top = len(live)


class _Nodes:
    """Every node whose split has been searched, by search position (index): host arrays grown
    batch by batch. A node's children are searched together (left at an even offset, right
    next), whether or not the tree keeps the split: see ``grow_tree_best_first``."""

    def __init__(self, n_shards: int):
        self.depth = np.zeros(0, dtype=np.int64)
        self.key = np.zeros(0, dtype=np.uint64)  # ``sampling.child_keys``: by path
        self.totals = np.zeros((0, 2), dtype=np.int64)  # global fixed-point [g, h]
        self.seg_start = [np.zeros(0, dtype=np.int64) for _ in range(n_shards)]
        self.seg_count = [np.zeros(0, dtype=np.int64) for _ in range(n_shards)]
        self.splits: LevelSplits | None = None  # each node's best split (do_split: worth taking)
        self.bounds = None  # None, or (n, 2) weight bounds (monotone constraints)
        self.paths = None  # None, or (n, F) bool features on the path (interaction constraints)
        self.parent = np.zeros(0, dtype=np.int64)  # the parent's index; -1: the root
        self.children = np.zeros(0, dtype=np.int64)  # the left child's index; -1: not searched
        self.slot = np.zeros(0, dtype=np.int64)  # place in the open histograms; -1: none

    def add(self, parent, depth, key, totals, seg_start, seg_count, splits, bounds,
            paths) -> None:
        n = len(depth)
        self.parent = np.concatenate([self.parent, parent])
        self.depth = np.concatenate([self.depth, depth])
        self.key = np.concatenate([self.key, key])
        self.totals = np.concatenate([self.totals, totals])
        for s in range(len(self.seg_start)):
            self.seg_start[s] = np.concatenate([self.seg_start[s], seg_start[s]])
            self.seg_count[s] = np.concatenate([self.seg_count[s], seg_count[s]])
        self.splits = splits if self.splits is None else \
            LevelSplits.concatenate([self.splits, splits])
        if bounds is not None:
            self.bounds = bounds if self.bounds is None else np.concatenate([self.bounds, bounds])
        if paths is not None:
            self.paths = paths if self.paths is None else np.concatenate([self.paths, paths])
        self.children = np.concatenate([self.children, np.full(n, -1, dtype=np.int64)])
        self.slot = np.concatenate([self.slot, np.full(n, -1, dtype=np.int64)])


def grow_tree_best_first(shardset, gh: list, scales, cuts, rules, feature_allowed,
                         group: int) -> tuple[Tree, list[LeafRows]]:
    """``gbflow.grow.grow_tree`` for lossguide and ``rules.max_leaves`` below the depth limit's
    leaf count: the tree XGBoost's driver grows, one split at a time, taking the leaf with the
    largest gain, ties to the smaller node id, until ``max_leaves`` leaves or no leaf worth
    splitting.

    One split at a time would be one wait for the device per split. Instead a node's best
    split depends only on its rows, so splits are searched ahead in batches and the driver's
    sequence is replayed on the host: replay pops leaves while the top one's children have been
    searched, assigning node ids in pop order (XGBoost's numbering). When it stops, the next
    batch splits the open nodes (searched, worth splitting, not split yet: the tree's leaves
    and the children of splits made ahead) that the remaining budget is most likely to reach
    (``_ahead``: half the splits left, a measured balance between batches and splits made in
    vain); the top leaf is always among them, so every batch lets the replay go on. A
    batch is a level loop's step over nodes of any depths: one partition, the built children's
    histograms, their siblings by subtraction, one split search (one wait). A leaf the replay
    never pops keeps its rows (a split made ahead only reorders them within its segment), so
    splitting ahead changes nothing but the work done: a tree takes a few more batches than
    it has levels.

    Every shard's rows stay in one row array (``ShardSet.partition(whole=True)``): a leaf left
    unsplit by one batch may split in a later one. The open nodes' histograms stay in
    ``_OpenHistograms``' slots until they split or cannot be reached any more.
    """
    backend, timers = shardset.backend, shardset.timers
    n_bins, n_shards = cuts.n_bins, len(shardset.shards)
    constants = rules.split.constants(scales)
    bounds, interactions = rules.bounds, rules.interactions

    def search(hist, depth, keys, node_bounds, paths, fetch):
        """The best splits of new nodes (in ``hist``'s order) and host copies of ``fetch``."""
        searchable = depth < rules.max_depth
        if not searchable.any():
            return None, backend.to_host_all(fetch)
        allowed = np.zeros((len(depth), cuts.n_features), dtype=bool)
        allowed[searchable] = feature_allowed.at(depth[searchable], keys[searchable])
        with timers("splits"):
            return split.search_nodes(shardset, rules, constants, hist, allowed, paths,
                                      node_bounds, fetch)

    shardset.reset_row_index()
    nodes = _Nodes(n_shards)
    with timers("histograms"):
        seg_start = [np.zeros(1, dtype=np.int64) for _ in range(n_shards)]
        seg_count = [np.array([s.n_rows], dtype=np.int64) for s in shardset.shards]
        root_hist = shardset.build_histograms(gh, seg_start, seg_count, n_bins)
        totals = shardset.root_totals(root_hist, gh)
        shardset.fill_common_bins(root_hist, totals)
    root_bounds = None if bounds is None else bounds.root()
    root_paths = None if interactions is None else interactions.root_paths()
    depth, keys = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.uint64)
    found, fetched = search(root_hist, depth, keys, root_bounds, root_paths, [totals])
    totals = fetched[0]
    nodes.add(np.full(1, -1), depth, keys, totals, seg_start, seg_count, found, root_bounds,
              root_paths)
    nodes.slot[0] = 0
    # doubled as the tree needs (a large max_leaves on wide data would hold gigabytes at once)
    open_hist = _OpenHistograms(shardset.level_buffers, root_hist, 64)
    del root_hist

    tree_id = np.zeros(1, dtype=np.int64)  # per searched node: its id once popped into the tree
    popped: list[int] = []  # the nodes that split, in pop order
    heap: list = []  # (priority, node id, node index) of the leaves worth splitting

    def push(i):
        if nodes.splits.do_split[i]:
            heapq.heappush(heap, (-nodes.splits.gain[i], int(tree_id[i]), int(i)))

    push(0)
    next_id = 1
    while True:  # replay the driver while it pops searched leaves, then search a batch ahead
        while heap and next_id < 2 * rules.max_leaves - 1 and nodes.children[heap[0][2]] >= 0:
            i = heapq.heappop(heap)[2]
            popped.append(i)
            left = nodes.children[i]
            tree_id[left], tree_id[left + 1] = next_id, next_id + 1
            next_id += 2  # a tree of L leaves has 2L - 1 nodes
            push(left), push(left + 1)
        if not heap or next_id >= 2 * rules.max_leaves - 1:
            break
        budget = (2 * rules.max_leaves - 1 - next_id) // 2  # the splits left
        reach, hops = _reach(nodes, tree_id)
        _close_out_of_reach(nodes, reach, hops, heap, budget)
        ahead = _ahead(nodes, tree_id, reach, budget)
        if nodes.children[heap[0][2]] < 0 and heap[0][2] not in ahead:
            raise RuntimeError("gbflow.grow.best_first: the top leaf is not split ahead (a bug)")
        _expand(shardset, gh, nodes, ahead, open_hist, search, n_bins, scales, rules,
                search_children=budget > 1)
        tree_id = np.concatenate([tree_id, np.full(len(nodes.depth) - len(tree_id), -1)])

    tree = _tree(nodes, tree_id, np.array(popped, dtype=np.int64), cuts, scales, rules, group)
    leaves = np.flatnonzero(tree_id >= 0)
    leaves = leaves[~np.isin(leaves, popped)]
    by_shard = [[(shardset.row_index[s], nodes.seg_start[s][leaves],
                  nodes.seg_count[s][leaves], tree_id[leaves])] for s in range(n_shards)]
    return tree, _leaf_rows(shardset, by_shard, None, 0, tree.value)


def _reach(nodes: _Nodes, tree_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per searched node: (the smallest gain on its way into the tree, the splits on that way
    not yet in the tree). A node outside the tree can split only after its ancestors outside
    the tree; its reach is never above the gain of the tree leaf it hangs from."""
    in_tree = tree_id >= 0
    hops = np.zeros(len(tree_id), dtype=np.int64)
    reach = np.where(in_tree, nodes.splits.gain, np.inf)
    for depth in range(1, int(nodes.depth.max()) + 1):  # parents before their children
        at = np.flatnonzero((nodes.depth == depth) & ~in_tree)
        up = nodes.parent[at]
        hops[at] = hops[up] + (tree_id[up] < 0)
        reach[at] = np.minimum(reach[up], nodes.splits.gain[at])
    return reach, hops


def _close_out_of_reach(nodes: _Nodes, reach: np.ndarray, hops: np.ndarray, heap: list,
                        budget: int) -> None:
    """Close (leave the histograms of) the open nodes the remaining ``budget`` of splits cannot
    reach: before one splits, every tree leaf in the ``heap`` of a gain above its reach splits
    (it outranks the node on its way of that gain), and so do the splits on its way into the
    tree; when those leave no split for it, it is closed. Leaves of an equal gain are not
    counted: which of them goes first depends on ids (a mirrored table's tied gains closed a
    node the replay needed when they were)."""
    open_nodes = np.flatnonzero(nodes.slot >= 0)
    leaf_gains = np.sort(nodes.splits.gain[[i for _, _, i in heap]])
    above = len(leaf_gains) - np.searchsorted(leaf_gains, reach[open_nodes], side="right")
    nodes.slot[open_nodes[above + hops[open_nodes] >= budget]] = -1


def _ahead(nodes: _Nodes, tree_id: np.ndarray, reach: np.ndarray, budget: int) -> np.ndarray:
    """(k,) int64 ascending: the open nodes to split in the next batch, the first half of the
    ``budget`` (splits left, at least one) by reach, then the tree's leaves first, then node
    id. So the replay's top leaf is always the first."""
    open_nodes = np.flatnonzero(nodes.slot >= 0)
    in_tree = tree_id[open_nodes] >= 0
    tie = np.where(in_tree, tree_id[open_nodes], len(tree_id) + open_nodes)
    first = np.lexsort((tie, ~in_tree, -reach[open_nodes]))[: max(1, budget // 2)]
    return np.sort(open_nodes[first])


def _expand(shardset, gh, nodes: _Nodes, expand: np.ndarray, open_hist: _OpenHistograms,
            search, n_bins: int, scales, rules, search_children: bool = True) -> None:
    """Split the ``expand`` nodes (indices, with a split worth taking and a histogram in
    ``open_hist``) in every shard, search their children (unless ``search_children`` is False:
    the batch takes the tree's last split) and add them to ``nodes``; the children worth
    splitting keep their histograms in ``open_hist`` (``nodes.slot``)."""
    backend, timers = shardset.backend, shardset.timers
    xp, n, n_shards = backend.xp, len(expand), len(shardset.shards)
    found = nodes.splits.take(expand)
    left_sum = found.left_sum
    right_sum = nodes.totals[expand] - left_sum
    side_map, side_threshold = found.partition_sides(np.arange(n), n_bins)
    built_left = left_sum[:, 1] <= right_sum[:, 1]  # build the lighter child, as levels do
    starts = [nodes.seg_start[s][expand] for s in range(n_shards)]
    counts = [nodes.seg_count[s][expand] for s in range(n_shards)]
    with timers("partition+histograms"):
        children, first_slot = open_hist.take_children(xp, n, nodes)
        built = children.nodes(n, 2 * n)
        left_counts = shardset.partition(gh, starts, counts, found.feature, side_threshold,
                                         found.default_left, built_left, n_bins, built,
                                         side_map=side_map, whole=True)
        shardset.fill_common_bins(built, _next_level_order(left_sum, right_sum, built_left)[n:])
        children.fill_siblings(backend.kernels, open_hist.histograms, nodes.slot[expand])
    # The children by node (left, right of each split) and where each is in ``children``.
    k = np.arange(n)
    at = np.stack([np.where(built_left, n + k, k), np.where(built_left, k, n + k)], 1).ravel()
    by_place = np.argsort(at)  # the node in each histogram place
    depth = np.repeat(nodes.depth[expand] + 1, 2)
    keys = np.stack(child_keys(nodes.key[expand]), 1).ravel()
    child_bounds = child_paths = None
    if rules.bounds is not None:  # a value-order split on a monotone feature bounds its subtrees
        child_bounds = np.stack(rules.bounds.children(
            nodes.bounds[expand], found.feature, found.orders_values(np.arange(n)), left_sum,
            right_sum, rules.leaf, scales), 1).reshape(2 * n, 2)
    if rules.interactions is not None:
        child_paths = np.repeat(rules.interactions.child_paths(nodes.paths[expand],
                                                               found.feature), 2, axis=0)
    result, fetched = search(children, np.where(search_children, depth, rules.max_depth)[by_place],
                             keys[by_place],
                             None if child_bounds is None else child_bounds[by_place],
                             None if child_paths is None else child_paths[by_place],
                             list(left_counts))
    child_splits = _no_splits(2 * n, nodes.splits) if result is None else result.take(at)
    seg_start, seg_count = [], []
    for s in range(n_shards):
        left = fetched[s].astype(np.int64)
        seg_start.append(np.stack([starts[s], starts[s] + left], 1).ravel())
        seg_count.append(np.stack([left, counts[s] - left], 1).ravel())
    first = len(nodes.depth)
    nodes.add(np.repeat(expand, 2), depth, keys,
              np.stack([left_sum, right_sum], 1).reshape(2 * n, 2), seg_start,
              seg_count, child_splits, child_bounds, child_paths)
    nodes.children[expand] = first + 2 * k
    nodes.slot[expand] = -1
    new = np.flatnonzero(child_splits.do_split)
    nodes.slot[first + new] = first_slot + at[new]


def _tree(nodes: _Nodes, tree_id: np.ndarray, popped: np.ndarray, cuts, scales, rules,
          group: int) -> Tree:
    """The tree of the nodes the replay reached (ids ``tree_id`` >= 0), ``popped`` split."""
    in_tree = np.flatnonzero(tree_id >= 0)
    sp = np.flatnonzero(np.isin(in_tree, popped))
    totals = nodes.totals[in_tree]
    value = rules.leaf.values(totals, scales,
                              None if nodes.bounds is None else nodes.bounds[in_tree])
    found = nodes.splits.take(in_tree[sp])
    level = level_arrays(
        cuts, value, totals[:, 1] * (1.0 / scales.h), tree_id[in_tree], sp,
        *((found.feature, found.bin_threshold, found.default_left, found.gain,
           tree_id[nodes.children[in_tree[sp]]]) if len(sp) else (None,) * 5),
        right_bins=found.category_sets(np.arange(len(sp))) if len(sp) else None)
    return Tree.concatenate_levels([level], group)


def _no_splits(n: int, like: LevelSplits) -> LevelSplits:
    """n nodes without a split (as ``like``'s: with category sets when it has them)."""
    with_sets = like.right_bins is not None
    return LevelSplits(np.full(n, -np.inf), np.full(n, -1, dtype=np.int32),
                       np.zeros(n, dtype=np.int32), np.zeros(n, dtype=bool),
                       np.zeros((n, 2), dtype=np.int64), np.zeros(n, dtype=bool),
                       np.zeros((n, like.right_bins.shape[1]), dtype=bool) if with_sets
                       else None, np.zeros(n, dtype=bool) if with_sets else None)
