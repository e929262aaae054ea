"""Every dtype and sentinel gbflow uses, each with the reason it was chosen."""
from __future__ import annotations

import numpy as np

# Features are compared as float32 everywhere (XGBoost's convention): binning during training and
# the threshold test during prediction then see the same value bit for bit, on every device, and
# the raw matrix takes half the memory of float64.
FEATURE = np.float32
# Cut points are float32 values taken from the data, so `x < cut` in float32 is exact.
CUT = np.float32
# Objectives hand out float32 gradients and hessians (the design's choice; enough precision for
# the fixed-point step that follows).
GRADIENT = np.float32
# Fixed-point gradients and every histogram: integer sums do not depend on the order in which
# rows, threads, shards or workers are added up, which makes training bit-for-bit reproducible.
FIXED = np.int64
# Largest total a fixed-point sum may reach: 2**62 leaves a factor-of-two headroom below int64's
# limit for the parent-minus-child subtraction and the cumulative sums of split finding.
FIXED_SUM_LIMIT = 2.0**62
# Sketch weights are summed as float64 tables (``backend.tables.table_counts``); integer
# totals below 2**53 are exact in float64, so the sketch stays order independent.
SKETCH_SUM_LIMIT = 2.0**52
# Largest |label|, |weight| and |base_score| taken: 2**62. A gradient is a float32 product of a
# weight and a margin-minus-label difference (at most 2**62 * 2**63 = 2**125, below float32's
# 2**128), and fixed-point scales are made from the largest gradient times the row count.
TARGET_LIMIT = 2.0**62
# Margins and leaf values are float64: training adds leaf values to margins in the same order as
# prediction does, so the two agree exactly, and float64 keeps 1000s of rounds from drifting.
MARGIN = np.float64
# Row positions inside one shard; a shard holds fewer than 2**31 rows (checked with the other
# global inputs, prepare.check_global_inputs).
ROW_INDEX = np.int32
# Deepest tree gbflow grows or loads (max_depth's largest value, and its depth limit when
# max_depth is 0): 2**30 leaves is already past what a model file holds, and SHAP's per-row path
# buffers grow with the depth.
MAX_TREE_DEPTH = 30
# Node ids inside one tree, and feature ids.
NODE = np.int32
# Missing values (NaN, null) of every feature fall into bin 0; value bins are 1..n_value_bins.
MISSING_BIN = 0
# A node with no split: its feature id in the flat tree arrays.
LEAF = -1
# Threshold of a split of the present values from the missing ones (bin threshold 0, missing
# values left): ``x < threshold`` must be false for every value. The lowest float32 is the
# smallest finite threshold with that property (features are finite float32), and unlike -inf
# standard JSON can write it.
BELOW_EVERY_VALUE = float(np.finfo(np.float32).min)
# XGBoost's kRtEps: a split must improve the loss by more than this to be taken.
MIN_SPLIT_IMPROVEMENT = 1e-6
# Smallest hessian the objectives hand out, so a leaf never divides by (nearly) zero.
MIN_HESSIAN = 1e-16


# Bins are stored as uint8 or uint16: no bin id (missing bin included) exceeds this.
MAX_BIN_ID = 2**16 - 1


def bin_dtype(max_bin: int) -> np.dtype:
    """Storage dtype of the binned matrix: uint8 while every bin id (missing bin included) fits."""
    return np.dtype(np.uint8) if max_bin <= 256 else np.dtype(np.uint16)


# The sparse store's entry_feature (stores.SparseBins) holds one sparse-local feature id per
# stored entry; after the bins it is the store's largest array. int16 halves it while every id
# 0..S-1 fits (S <= 32767, far more sparse features than most data has); int32 above.
ENTRY_FEATURE_NARROW_MAX = np.iinfo(np.int16).max


def entry_feature_dtype(n_sparse: int) -> np.dtype:
    """Dtype of a sparse store's (nnz,) entry_feature for ``n_sparse`` sparse features: int16
    while the ids 0..n_sparse-1 fit, else int32. The one place this is decided."""
    return np.dtype(np.int16) if n_sparse <= ENTRY_FEATURE_NARROW_MAX else np.dtype(np.int32)
