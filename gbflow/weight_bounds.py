"""XGBoost's bounded leaf weights, node by node: ``max_delta_step`` and monotone constraints."""
from __future__ import annotations

import dataclasses
import numbers

import numpy as np


def parse_monotone(value):
    """A ``monotone_constraints`` parameter normalised: None (no constraint), a tuple of ints in
    {-1, 0, 1} by feature position (XGBoost's list, tuple or "(1,0,-1)" string), or a dict
    {feature name: int}. Raises ValueError/TypeError naming the parameter."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if not (text.startswith("(") and text.endswith(")")):
            raise ValueError(f"parameter monotone_constraints as a string must look like "
                             f"'(1,0,-1)' (one sign per feature), got {value!r}")
        inner = text[1:-1].strip()
        try:
            value = tuple(int(v) for v in inner.split(",")) if inner else ()
        except ValueError:
            raise ValueError(f"parameter monotone_constraints: {value!r} holds a value that is "
                             f"not -1, 0 or 1") from None
    if isinstance(value, dict):
        for name, sign in value.items():
            if not isinstance(name, str):
                raise TypeError(f"parameter monotone_constraints: keys are feature names, got "
                                f"{name!r}")
            _check_sign(sign, f"feature {name!r}")
        return {name: int(sign) for name, sign in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        for i, sign in enumerate(np.asarray(value, dtype=object).ravel()):
            _check_sign(sign, f"position {i}")
        return tuple(int(s) for s in np.asarray(value, dtype=object).ravel())
    raise TypeError(f"parameter monotone_constraints must be a list of -1/0/1 (one per feature), "
                    f"a string such as '(1,0,-1)' or a dict of feature names to -1/0/1, got "
                    f"{type(value).__name__}")


def _check_sign(sign, where: str) -> None:
    if isinstance(sign, (bool, np.bool_)) or not isinstance(sign, numbers.Real) or \
            sign not in (-1, 0, 1):
        raise ValueError(f"parameter monotone_constraints: {where} must be -1 (decreasing), 0 "
                         f"(none) or 1 (increasing), got {sign!r}")


def monotone_signs(constraints, feature_names: list, categorical: set) -> np.ndarray | None:
    """(F,) int8 signs of the training features from a normalised ``monotone_constraints``
    (``parse_monotone``), or None when no feature is constrained. A list shorter than the
    features leaves the rest unconstrained (as XGBoost); a longer one, an unknown name or a
    constrained categorical feature is a ValueError naming it."""
    if constraints is None:
        return None
    n = len(feature_names)
    signs = np.zeros(n, dtype=np.int8)
    if isinstance(constraints, dict):
        position = {name: i for i, name in enumerate(feature_names)}
        unknown = [name for name in constraints if name not in position]
        if unknown:
            raise ValueError(f"parameter monotone_constraints names feature(s) {unknown} that "
                             f"the training data does not have")
        for name, sign in constraints.items():
            signs[position[name]] = sign
    else:
        if len(constraints) > n:
            raise ValueError(f"parameter monotone_constraints has {len(constraints)} entries "
                             f"for {n} features")
        signs[:len(constraints)] = constraints
    named = [feature_names[i] for i in np.flatnonzero(signs) if feature_names[i] in categorical]
    if named:
        raise ValueError(f"parameter monotone_constraints constrains categorical feature(s) "
                         f"{named}: categories have no order to keep (set their sign to 0)")
    return signs if signs.any() else None


@dataclasses.dataclass(frozen=True)
class WeightBounds:
    """A fit's weight bounds (XGBoost's rules): every weight -T(G) / (H + lambda) is capped at
    ``max_delta_step`` in size (0: no cap) and clipped to its node's [lower, upper]; a split on
    a feature of monotone sign +1 (-1) must give its left child a weight <= (>=) its right
    child's, and then bounds the left child's subtree from above (below) and the right one's
    from below (above) by the midpoint of the two weights. Node bounds are host (n, 2) float64
    [lower, upper] arrays, one row per node of a level; the root's are infinite.

    monotone: (F,) int8 by global feature id, or None.
    """

    max_delta_step: float
    monotone: np.ndarray | None

    @classmethod
    def of(cls, params, feature_names: list, categorical: set) -> WeightBounds | None:
        """The bounds ``params`` ask for (None: neither a cap nor a constraint)."""
        monotone = monotone_signs(params.monotone_constraints, feature_names, categorical)
        if monotone is not None and params.loss.leaf_alphas is not None:
            raise ValueError(f"parameter monotone_constraints cannot be used with objective "
                             f"{params.objective}: its leaf values come from a line search, "
                             f"which the constraints do not bound")
        cap = params.delta_step_cap
        if cap == 0 and monotone is None:
            return None
        return cls(cap, monotone)

    @staticmethod
    def root() -> np.ndarray:
        return np.array([[-np.inf, np.inf]])

    def search_bounds(self, xp, node_bounds: np.ndarray) -> tuple:
        """A level's (max_delta_step, node bounds on the device, global monotone signs) for
        ``split.find_splits`` (each store takes its own features' signs)."""
        return self.max_delta_step, xp.asarray(node_bounds), self.monotone

    def children(self, node_bounds: np.ndarray, feature: np.ndarray, orders_values: np.ndarray,
                 left_sum: np.ndarray, right_sum: np.ndarray, leaf, scales) -> tuple:
        """The (left, right) children's (n, 2) bounds of n split nodes with ``node_bounds``:
        feature (n,) global ids; orders_values (n,) bool, False for splits that order no
        values (category sets, present versus missing: their children keep the parent's
        bounds); left_sum, right_sum (n, 2) int64 the children's sums; leaf, scales: the
        tree's ``rules.LeafRule`` and ``Scales``, which give the children's weights."""
        left, right = node_bounds.copy(), node_bounds.copy()
        if self.monotone is None:  # a cap alone: every node's bounds stay infinite
            return left, right
        unit = dataclasses.replace(leaf, learning_rate=1.0)  # weights before the learning rate
        w_left = unit.values(left_sum, scales, node_bounds)
        w_right = unit.values(right_sum, scales, node_bounds)
        sign = np.where(orders_values, self.monotone[feature], 0)
        mid = (w_left + w_right) / 2.0
        left[sign > 0, 1] = mid[sign > 0]
        right[sign > 0, 0] = mid[sign > 0]
        left[sign < 0, 0] = mid[sign < 0]
        right[sign < 0, 1] = mid[sign < 0]
        return left, right
