"""``obj=``: a user's gradient function in place of an objective's, XGBoost's signature."""
from __future__ import annotations

import numpy as np

from . import _dtypes
from .collective import LOCAL
from .objectives import Objective


class TrainMatrix:
    """What ``obj=`` gets besides the margins, as XGBoost's ``DMatrix`` offers it: one shard's
    labels and weights, on the device where the shard is (NumPy or CuPy; on Dask a worker's
    own rows only, as xgboost.dask's)."""

    def __init__(self, xp, label, weight):
        self._xp, self._label, self._weight = xp, label, weight

    def get_label(self):
        """(n,) float32 labels."""
        return self._label.astype(self._xp.float32)

    def get_weight(self):
        """(n,) float32 weights, or an empty array without weights (as XGBoost)."""
        xp = self._xp
        return xp.empty(0, xp.float32) if self._weight is None else \
            self._weight.astype(xp.float32)

    def num_row(self) -> int:
        return int(self._label.shape[0])


class Custom(Objective):
    """A user's ``obj(margins, data) -> (grad, hess)`` (XGBoost's signature) in place of the
    configured objective's gradients; the link, label checks and default metric stay the
    configured objective's. As XGBoost: the weights are the callable's to apply
    (``data.get_weight()``), and without ``base_score`` the start is base_score 0.5 (an
    intercept cannot be estimated for an unknown loss), through the configured link.

    margins: (n,) for one output group, (n, n_groups) otherwise, float64 in the shard's
    namespace. The results may be host or device arrays of that shape (or (n, 1)); a
    non-finite value stops training with an error naming the round's shard (checked on the
    host: a wait for the device every round)."""

    row_wise = False

    def __init__(self, base: Objective, function):
        self.base, self.function = base, function
        self.name, self.default_metric = base.name, base.default_metric
        self.n_groups = base.n_groups

    @property
    def n_outputs(self) -> int:
        return self.base.n_outputs

    def check_label(self, label, where):
        self.base.check_label(label, where)

    def base_score_margin(self, base_score):
        return self.base.base_score_margin(base_score)

    def estimate_margin(self, xp, labels, weights, collective=LOCAL):
        return np.full(self.n_groups, self.base_score_margin(0.5))

    def gradients(self, xp, margin, label, weight):
        given = margin[:, 0] if self.n_groups == 1 else margin
        result = self.function(given, TrainMatrix(xp, label, weight))
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(f"obj must return (grad, hess), got {type(result).__name__}")
        out = []
        for name, values in zip(("grad", "hess"), result):
            values = xp.asarray(values, dtype=xp.float64)
            if values.size != margin.size:
                raise ValueError(f"obj returned {name} of shape {values.shape} for margins of "
                                 f"shape {tuple(given.shape)}")
            values = values.reshape(margin.shape)
            if not bool(xp.isfinite(values).all()):
                raise ValueError(f"obj returned non-finite {name} values")
            narrow = values.astype(_dtypes.GRADIENT)
            if not bool(xp.isfinite(narrow).all()):
                raise ValueError(f"obj returned {name} values beyond float32's range (e.g. "
                                 f"{float(values[~xp.isfinite(narrow)][0]):g}): gradients are "
                                 f"float32, as XGBoost's")
            out.append(narrow)
        return tuple(out)

    def transform(self, xp, margin):
        return self.base.transform(xp, margin)

    def eval_transform(self, xp, margin):
        return self.base.eval_transform(xp, margin)

    @property
    def link_kernel(self):
        return self.base.link_kernel
