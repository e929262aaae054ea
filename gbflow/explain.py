"""Explaining predictions: exact TreeSHAP values and interactions, Saabas contributions, leaves.

SHAP values are computed path by path (the formulation of GPUTreeShap, Mitchell et al. 2022): a
tree is the sum of its root-to-leaf paths, each path a function of the few features it tests.
For one path with leaf value v and distinct features k = 1..m, a row either satisfies every test
of feature k on the path (o_k = 1) or not (o_k = 0); z_k is the share of the training cover that
follows the path's edges of feature k (the product of child cover / parent cover). The path's
expected value given the features S is v * prod(o_k, k in S) * prod(z_k, k not in S), and its
Shapley values follow in closed form from the polynomial prod(z_k + t, k with o_k = 1): the
features the row fails all get the same value, the others one division of that polynomial each
(``numpy_kernels.shap_contributions``). The kernels walk every path for every row, in path
order, so the values are the same on every backend and do not depend on threads.
"""
from __future__ import annotations

import dataclasses
import functools
from fractions import Fraction

import numpy as np

from . import _dtypes
from .predictor import FlatForest


@dataclasses.dataclass
class ForestPaths:
    """Every root-to-leaf path of a forest, as flat host arrays.

    path_ptr int64 (n_paths + 1,): path p's elements at path_ptr[p]:path_ptr[p + 1]; path_value
    float64 and path_group int32 (n_paths,): its leaf value and output group. An element is one
    distinct feature of a path: elem_feature int32, elem_zero float64 (its cover fraction z) and
    elem_ptr int64 (n_elements + 1,): its edges at elem_ptr[k]:elem_ptr[k + 1]. An edge is a node
    of the ``FlatForest`` (edge_node int32, absolute) and the side the path leaves it by
    (edge_left bool). shapley_weights float64 (max_m + 1, max_m + 1): [m, s] = s! (m - 1 - s)! / m!,
    the weight of a coalition of s of the other m - 1 features (0 where s >= m).
    """

    path_ptr: np.ndarray
    path_value: np.ndarray
    path_group: np.ndarray
    elem_ptr: np.ndarray
    elem_feature: np.ndarray
    elem_zero: np.ndarray
    edge_node: np.ndarray
    edge_left: np.ndarray
    shapley_weights: np.ndarray

    @property
    def arrays(self) -> list[np.ndarray]:
        """The kernels' path arguments, in their order."""
        return [self.path_ptr, self.path_value, self.path_group, self.elem_ptr,
                self.elem_feature, self.elem_zero, self.edge_node, self.edge_left,
                self.shapley_weights]


def shapley_weights(max_m: int) -> np.ndarray:
    """(max_m + 1, max_m + 1) float64 table of s! (m - 1 - s)! / m!, each the float64 nearest to
    the exact fraction (the same table for every backend)."""
    table = np.zeros((max_m + 1, max_m + 1))
    factorial = [Fraction(1)]
    for k in range(1, max_m + 1):
        factorial.append(factorial[-1] * k)
    for m in range(1, max_m + 1):
        for s in range(m):
            table[m, s] = float(factorial[s] * factorial[m - 1 - s] / factorial[m])
    return table


def _parents(forest: FlatForest) -> np.ndarray:
    """(n_nodes,) int64 absolute parent of each node, -1 for the roots."""
    parent = np.full(len(forest.feature), -1, dtype=np.int64)
    inner = np.flatnonzero(forest.feature >= 0)
    parent[forest.left[inner]] = inner
    parent[forest.right[inner]] = inner
    return parent


def forest_paths(forest: FlatForest, cover: np.ndarray) -> ForestPaths:
    """The paths of ``forest``, whose nodes have the training ``cover`` (n_nodes,) float64
    (hessian sums). A path's elements are its features in ascending order, an element's edges
    from the root down; a child of a node with no cover gets the fraction 0."""
    parent = _parents(forest)
    leaves = np.flatnonzero(forest.feature < 0)
    # the ancestors of every leaf, one level up per step: (n_leaves, depth) edges, -1 padded
    steps, child = [], leaves.copy()
    while True:
        up = np.where(child >= 0, parent[np.maximum(child, 0)], -1)
        if not (up >= 0).any():
            break
        steps.append((up, child))
        child = up
    n_leaves = len(leaves)
    if steps:
        node = np.stack([u for u, _ in steps], axis=1)
        below = np.stack([c for _, c in steps], axis=1)
    else:
        node = below = np.empty((n_leaves, 0), dtype=np.int64)
    present = node >= 0
    leaf_of = np.broadcast_to(np.arange(n_leaves)[:, None], node.shape)[present]
    depth = -np.broadcast_to(np.arange(node.shape[1])[None, :], node.shape)[present]  # root first
    node, below = node[present], below[present]
    feature = forest.feature[node].astype(np.int64)
    order = np.lexsort((depth, feature, leaf_of))
    leaf_of, feature, node, below = leaf_of[order], feature[order], node[order], below[order]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(cover[node] > 0, cover[below] / cover[node], 0.0)
    new_elem = np.ones(len(node), dtype=bool)
    new_elem[1:] = (leaf_of[1:] != leaf_of[:-1]) | (feature[1:] != feature[:-1])
    elem_start = np.flatnonzero(new_elem)
    # the fraction of an element: its edges' ratios multiplied from the root down
    elem_zero = np.ones(len(elem_start))
    for k in range(int(np.diff(np.append(elem_start, len(node))).max(initial=0))):
        at = elem_start + k
        inside = at < np.append(elem_start[1:], len(node))
        elem_zero[inside] *= ratio[at[inside]]
    elems_per_leaf = np.bincount(leaf_of[elem_start], minlength=n_leaves)
    max_m = int(elems_per_leaf.max(initial=0))
    group_of_node = np.repeat(forest.tree_group, np.diff(np.append(forest.tree_root,
                                                                   len(forest.feature))))
    return ForestPaths(
        path_ptr=np.concatenate([[0], np.cumsum(elems_per_leaf)]).astype(np.int64),
        path_value=forest.value[leaves].astype(_dtypes.MARGIN),
        path_group=group_of_node[leaves].astype(np.int32),
        elem_ptr=np.append(elem_start, len(node)).astype(np.int64),
        elem_feature=feature[elem_start].astype(np.int32),
        elem_zero=elem_zero,
        edge_node=node.astype(np.int32),
        edge_left=(forest.left[node] == below),
        shapley_weights=shapley_weights(max_m),
    )


def node_means(forest: FlatForest, cover: np.ndarray) -> np.ndarray:
    """(n_nodes,) float64: each node's cover-weighted mean of the leaf values below it (its own
    value on a leaf; a node with no cover gets the plain mean of its children), computed a
    depth at a time from the deepest nodes up."""
    parent = _parents(forest)
    depth = np.zeros(len(parent), dtype=np.int64)
    up = parent.copy()
    while (up >= 0).any():
        depth += up >= 0
        up = np.where(up >= 0, parent[np.maximum(up, 0)], -1)
    mean = forest.value.astype(np.float64).copy()
    inner = np.flatnonzero(forest.feature >= 0)
    for d in range(int(depth.max(initial=0)), -1, -1):
        n = inner[depth[inner] == d]
        left, right = forest.left[n], forest.right[n]
        total = cover[left] + cover[right]
        with np.errstate(divide="ignore", invalid="ignore"):
            weighted = (mean[left] * cover[left] + mean[right] * cover[right]) / total
        mean[n] = np.where(total > 0, weighted, 0.5 * (mean[left] + mean[right]))
    return mean


def _forest_arrays(forest: FlatForest) -> tuple[list, tuple]:
    """The node arrays the raw-value walks read, and the categorical sets (empty without)."""
    sets = () if forest.cat_start is None else (forest.cat_start, forest.cat_bits)
    return [forest.feature, forest.threshold, forest.default_left], sets


def leaf_indices(backend, X, forest: FlatForest):
    """(n_rows, n_trees) int32 on X's device: the node id (within its tree, as in the model
    file) of the leaf each row reaches in each tree. X: (n_rows, F) float32."""
    nodes, sets = _forest_arrays(forest)
    out = backend.xp.zeros((X.shape[0], len(forest.tree_root)), dtype=np.int32)
    if X.shape[0] == 0 or out.shape[1] == 0:
        return out
    return backend.kernels.predict_leaves(X, *nodes, forest.left, forest.right,
                                          forest.tree_root, out, *sets)


class ExplainedForest:
    """A forest and what explaining it needs, each made once (a booster keeps one per tree
    range): the nodes' training cover (n_nodes,) float64 (hessian sums), the paths
    (``forest_paths``) and the node means (``node_means``)."""

    def __init__(self, forest: FlatForest, cover: np.ndarray):
        self.forest, self.cover = forest, cover

    @functools.cached_property
    def paths(self) -> ForestPaths:
        return forest_paths(self.forest, self.cover)

    @functools.cached_property
    def means(self) -> np.ndarray:
        return node_means(self.forest, self.cover)


def contributions(backend, X, explained: ExplainedForest, base_margin: np.ndarray,
                  approximate: bool = False):
    """(n_rows, n_groups, F + 1) float64 on X's device: each feature's contribution to each
    row's margin and, last, the bias (the base margin plus the trees' expected values); a row's
    values sum to its margin. Exact TreeSHAP, or Saabas's path attribution with
    ``approximate``. X: (n_rows, F) float32."""
    xp, forest = backend.xp, explained.forest
    n_groups = len(base_margin)
    out = xp.zeros((X.shape[0], n_groups, X.shape[1] + 1), dtype=np.float64)
    out[:, :, -1] = xp.asarray(base_margin)[None, :]
    if X.shape[0] == 0 or len(forest.tree_root) == 0:
        return out
    nodes, sets = _forest_arrays(forest)
    if approximate:
        return backend.kernels.saabas_contributions(
            X, *nodes, forest.left, forest.right, forest.tree_root, forest.tree_group,
            explained.means, out, *sets)
    return backend.kernels.shap_contributions(X, *nodes, *explained.paths.arrays, out, *sets)


def interactions(backend, X, explained: ExplainedForest, base_margin: np.ndarray):
    """(n_rows, n_groups, F + 1, F + 1) float64 on X's device: SHAP interaction values. Off the
    diagonal [i, j] the interaction of features i and j (symmetric), on the diagonal feature
    i's SHAP value less its interactions, [F, F] the bias: a row's values sum to its margin.
    Takes (F + 1)**2 times the memory of a prediction."""
    xp = backend.xp
    width = X.shape[1] + 1
    out = xp.zeros((X.shape[0], len(base_margin), width, width), dtype=np.float64)
    shap = contributions(backend, X, explained, base_margin)
    if X.shape[0] and len(explained.forest.tree_root):
        nodes, sets = _forest_arrays(explained.forest)
        backend.kernels.shap_interactions(X, *nodes, *explained.paths.arrays, out, *sets)
    diagonal = xp.arange(width)
    out[:, :, diagonal, diagonal] = shap - out.sum(axis=3)
    return out
