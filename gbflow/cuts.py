"""Cut points per feature: how raw values fall into bins, and the thresholds of splits."""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _dtypes
from .backend import numpy_kernels


@dataclasses.dataclass
class Cuts:
    """Per-feature cut points.

    values: float32, all features' ascending cuts concatenated; feature f's are
    ``values[offsets[f]:offsets[f + 1]]``. offsets: (n_features + 1,) int64. A value x of feature f
    falls in bin 1 + (number of cuts <= x); NaN falls in bin 0. max_bin: the user's limit
    (bins per feature, missing bin included). Host arrays.
    """

    values: np.ndarray
    offsets: np.ndarray
    max_bin: int

    @property
    def n_features(self) -> int:
        return len(self.offsets) - 1

    @property
    def n_value_bins(self) -> np.ndarray:
        """(n_features,) int32: value bins of each feature (cuts + 1)."""
        return (np.diff(self.offsets) + 1).astype(np.int32)

    @property
    def n_bins(self) -> int:
        """Histogram width: the largest bin id + 1 over all features (the most cuts + 2; read
        for every tree)."""
        return int((self.offsets[1:] - self.offsets[:-1]).max()) + 2 if self.n_features else 1

    @property
    def bin_dtype(self) -> np.dtype:
        """uint8 or uint16: wide enough for max_bin and for every feature's bins (a categorical
        feature has a bin per category, however many)."""
        return _dtypes.bin_dtype(max(self.max_bin, self.n_bins))

    def with_features(self, replaced: dict) -> "Cuts":
        """These cuts with some features' cut points replaced ({feature: ascending float32
        cuts}): categorical features get one bin per category."""
        per_feature = [np.asarray(replaced[f], dtype=_dtypes.CUT) if f in replaced
                       else self.feature_cuts(f) for f in range(self.n_features)]
        offsets = np.concatenate([[0], np.cumsum([len(c) for c in per_feature])]).astype(np.int64)
        values = np.concatenate(per_feature) if per_feature else self.values[:0]
        return Cuts(values=values.astype(_dtypes.CUT), offsets=offsets, max_bin=self.max_bin)

    def split_thresholds(self, feature, bin_threshold) -> np.ndarray:
        """float32 thresholds (``x < threshold`` goes left) of splits given by their features
        and bin thresholds (arrays of one shape): the t-th cut of the feature for t >= 1, so
        that the value test and the bin test (bins 1..t left) agree; for t = 0 (no value bin
        goes left: the present values split from the missing ones) ``_dtypes.BELOW_EVERY_VALUE``
        (``numpy_kernels.cut_thresholds``)."""
        return numpy_kernels.cut_thresholds(self.values, self.offsets, feature, bin_threshold)

    def feature_cuts(self, f: int) -> np.ndarray:
        return self.values[self.offsets[f] : self.offsets[f + 1]]

    def to_dict(self) -> dict:
        return {"max_bin": int(self.max_bin), "offsets": [int(o) for o in self.offsets],
                "values": [float(v) for v in self.values]}

    @classmethod
    def from_dict(cls, d: dict) -> "Cuts":
        return cls(values=np.asarray(d["values"], dtype=_dtypes.CUT),
                   offsets=np.asarray(d["offsets"], dtype=np.int64), max_bin=int(d["max_bin"]))
