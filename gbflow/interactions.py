"""XGBoost's interaction constraints: the features each node may split on, from its path."""
from __future__ import annotations

import dataclasses
import json
import numbers

import numpy as np


def parse_interactions(value):
    """An ``interaction_constraints`` parameter normalised: None, or a tuple of sets, each a
    tuple of feature positions (ints) or names (strs): XGBoost's list of lists, or its JSON
    string "[[0, 1], [2, 3, 4]]". Raises ValueError/TypeError naming the parameter."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"parameter interaction_constraints as a string must be a JSON "
                             f"list of lists such as '[[0, 1], [2, 3]]', got {value!r}") from None
    if not isinstance(value, (list, tuple)) or \
            not all(isinstance(group, (list, tuple, set, frozenset)) for group in value):
        raise TypeError(f"parameter interaction_constraints must be a list of lists of feature "
                        f"positions or names, got {value!r}")
    groups = []
    for i, group in enumerate(value):
        members = list(group)
        for member in members:
            if isinstance(member, (bool, np.bool_)) or not isinstance(
                    member, (numbers.Integral, str)):
                raise TypeError(f"parameter interaction_constraints: set {i} holds {member!r}, "
                                f"neither a feature position nor a name")
        groups.append(tuple(m if isinstance(m, str) else int(m) for m in members))
    return tuple(groups) or None


@dataclasses.dataclass(frozen=True)
class InteractionSets:
    """A fit's interaction constraints, XGBoost's rule: the root may split on every feature; a
    node below may split on the features of its path (the splits above it) and on every
    feature of each set that holds all of its path's features. A feature in no set thus
    interacts with nothing: split once, its subtree splits only on it.

    sets: (k, F) bool, row i the features of set i. Paths are (n, F) bool host arrays, one row
    per node of a level: the features split on above it.
    """

    sets: np.ndarray

    @classmethod
    def of(cls, constraints, feature_names: list) -> InteractionSets | None:
        """The sets of a normalised ``interaction_constraints`` (``parse_interactions``) over
        the training features (None without); a position out of range or an unknown name is
        a ValueError naming it."""
        if constraints is None:
            return None
        n = len(feature_names)
        position = {name: i for i, name in enumerate(feature_names)}
        sets = np.zeros((len(constraints), n), dtype=bool)
        for i, group in enumerate(constraints):
            for member in group:
                if isinstance(member, str):
                    if member not in position:
                        raise ValueError(f"parameter interaction_constraints: set {i} names "
                                         f"feature {member!r}, which the training data does "
                                         f"not have")
                    sets[i, position[member]] = True
                elif not 0 <= member < n:
                    raise ValueError(f"parameter interaction_constraints: set {i} holds feature "
                                     f"position {member}, out of range for {n} features")
                else:
                    sets[i, member] = True
        return cls(sets)

    def root_paths(self) -> np.ndarray:
        return np.zeros((1, self.sets.shape[1]), dtype=bool)

    def allowed(self, paths: np.ndarray) -> np.ndarray:
        """(n, F) bool: the features each node of ``paths`` may split on."""
        holds_path = ~(paths[:, None, :] & ~self.sets[None, :, :]).any(axis=2)  # (n, k)
        from_sets = (holds_path[:, :, None] & self.sets[None, :, :]).any(axis=1)
        root = ~paths.any(axis=1, keepdims=True)
        return paths | from_sets | root

    @staticmethod
    def child_paths(paths: np.ndarray, feature: np.ndarray) -> np.ndarray:
        """(n, F) the children's path of n split nodes (paths (n, F), split on feature (n,))."""
        children = paths.copy()
        children[np.arange(len(feature)), feature] = True
        return children
