"""What a tree's growth obeys, made once per fit from the parameters: split and leaf rules."""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _dtypes
from .backend import numpy_kernels
from .category_splits import CategoryRule
from .interactions import InteractionSets
from .weight_bounds import WeightBounds


@dataclasses.dataclass(frozen=True)
class Scales:
    """A tree's fixed-point scales: its gradient sums are integers of 1/g units, its hessian
    sums of 1/h units (``fixed_point.fixed_point_scale``)."""

    g: float
    h: float


@dataclasses.dataclass(frozen=True)
class SplitRule:
    """When a node splits (XGBoost's rule): a candidate is valid when both children keep a
    hessian of at least ``min_child_weight``; the best one is taken when its gain (L1 ``reg_alpha``
    and L2 ``reg_lambda`` regularised) exceeds ``min_gain``: ``gamma``, and at least XGBoost's
    epsilon."""

    reg_lambda: float
    reg_alpha: float
    min_child_weight: float
    min_gain: float

    def constants(self, scales: Scales) -> tuple:
        """The split searches' trailing arguments: (inv_scale_g, inv_scale_h, reg_lambda,
        reg_alpha, min_child_weight)."""
        return (1.0 / scales.g, 1.0 / scales.h, self.reg_lambda, self.reg_alpha,
                self.min_child_weight)


@dataclasses.dataclass(frozen=True)
class LeafRule:
    """A leaf's value: -T_alpha(G) / (H + lambda), capped at max_delta_step in size,
    * learning_rate, of its integer sums."""

    reg_lambda: float
    reg_alpha: float
    learning_rate: float
    max_delta_step: float = 0.0  # the cap on a weight's size before the learning rate (0: none)

    def constants(self, scales: Scales) -> tuple:
        """(inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, learning_rate, max_delta_step):
        the arguments of ``leaf_weights`` after the totals, which the GPU's margin kernels take
        too."""
        return (1.0 / scales.g, 1.0 / scales.h, self.reg_lambda, self.reg_alpha,
                self.learning_rate, self.max_delta_step)

    def values(self, totals: np.ndarray, scales: Scales, node_bounds=None) -> np.ndarray:
        """(n,) float64 leaf values of (n, 2) int64 host sums (``numpy_kernels.leaf_weights``, the
        formula the GPU's margin kernels follow to the bit); node_bounds: None, or the nodes'
        (n, 2) monotone bounds (``weight_bounds``) the weights are clipped to."""
        return numpy_kernels.leaf_weights(totals, *self.constants(scales),
                                          node_bounds=node_bounds)


@dataclasses.dataclass(frozen=True)
class TreeRules:
    """Everything tree growing takes from the parameters."""

    max_depth: int  # the depth limit (``Params.depth_limit``)
    split: SplitRule
    leaf: LeafRule
    category: CategoryRule = CategoryRule(max_cat_to_onehot=4, max_cat_threshold=64,
                                          cat_smooth=10.0, cat_l2=10.0,
                                          cat_noise_penalty=1.0)  # Params' defaults
    # max_delta_step and monotone constraints (None: neither; weights unbounded)
    bounds: WeightBounds | None = None
    # interaction constraints (None: every node may split on any feature)
    interactions: InteractionSets | None = None
    max_leaves: int = 0  # 0: no limit
    lossguide: bool = False  # grow_policy="lossguide": the leaf of the largest gain splits first

    def with_dispersion(self, dispersion: float) -> "TreeRules":
        """These rules for one tree whose gradients have this variance per unit of hessian
        (``category_splits.gradient_dispersions``: the categorical noise penalty's scale)."""
        return dataclasses.replace(self, category=dataclasses.replace(
            self.category, dispersion=float(dispersion)))

    @property
    def leaf_budget_binds(self) -> bool:
        """Whether ``max_leaves`` can stop a tree before its depth limit does (only then do the
        growth policies grow different trees; without it both grow the depthwise tree, node
        ids breadth first)."""
        return 0 < self.max_leaves < 2 ** self.max_depth

    @classmethod
    def of(cls, params, feature_names: list, categorical=()) -> "TreeRules":
        """The rules of validated ``Params`` for training features ``feature_names`` (the names
        in ``categorical`` are categorical features). Raises ValueError for monotone or
        interaction constraints that do not fit the features."""
        return cls(max_depth=params.depth_limit, max_leaves=params.max_leaves,
                   lossguide=params.grow_policy == "lossguide",
                   split=SplitRule(params.reg_lambda, params.reg_alpha, params.min_child_weight,
                                   max(params.gamma, _dtypes.MIN_SPLIT_IMPROVEMENT)),
                   leaf=LeafRule(params.reg_lambda, params.reg_alpha, params.learning_rate,
                                 params.delta_step_cap),
                   category=CategoryRule(params.max_cat_to_onehot, params.max_cat_threshold,
                                         params.cat_smooth, params.cat_l2,
                                         params.cat_noise_penalty),
                   bounds=WeightBounds.of(params, list(feature_names), set(categorical)),
                   interactions=InteractionSets.of(params.interaction_constraints,
                                                   list(feature_names)))
