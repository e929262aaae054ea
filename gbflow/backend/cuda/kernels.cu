// gbflow's CUDA kernels: binning, histograms, split search, row partition, margins, prediction.
//
// Compiled at first use by cuda_kernels.py through cupy.RawKernel (NVRTC) with --fmad=false, so
// that every float64 expression rounds exactly as the NumPy twins in numpy_kernels.py do.
// BIN_T (uint8 or uint16 bin ids) is set by a -D option: one module per bin width.
//
// Memory layout (shared with the NumPy twins):
//   bins             (n_rows, bin_stride) BIN_T, row-major; the first n_features columns are used
//   bins_by_feature  the same bins read by feature: element (f, row) at f * feature_stride +
//                    row * row_stride (a column-major copy, or a transposed view of bins)
//   gh               (n_rows, 2) int64 fixed-point [gradient, hessian]
//   row_index        (n_rows,) int32 row positions, each node owning one contiguous segment
//   hist             (n_nodes, n_features, n_bins, 2) int64
//
// Segment kernels take a "work list": one row per thread block, int64
//   [node, begin, end, first_block_of_node, seg_start_of_node]
// built on the host from the (host) segment arrays, so that a large node gets many blocks and an
// empty node none; or on the device by level_segments (a level plan). The partition kernels also
// take the list's length in device memory (n_work): a planned level's grid is sized for the
// longest list the level can have, and blocks past n_work return at once. All sums are integers, so the result does not depend on how rows are dealt to
// blocks or in which order atomics land: every kernel here is deterministic.
//
// common.cuh (i64/u64, shared_add64, the split score and the Best candidate) is shared with
// sparse.cu; cuda_kernels.py pastes it in place of the #include before compiling.

#include "common.cuh"

#define WORK_WIDTH 5

// Shared-memory histograms (see shared_add64 in common.cuh). Features may have different bin
// counts (a categorical feature of 5,000 categories beside numeric ones of 257 bins): the
// (bin, component) counters of all features are numbered one feature after the other, feature
// f's 2 * width_f of them from counter_start[f] (int64, F + 1 entries, counter_start[F] the
// total). A block's feature group f0 .. f0 + group lays its features' counters out in shared
// memory in the same order, counter i of the group (i counted from counter_start[f0]) in words
// 2i (low) and 2i + 1 (high), each feature followed by one word of padding: the words of
// counter i of group feature fl start at 2i + fl. The padding puts the same bin of neighbouring
// features of equal widths in different banks: the lanes of a warp update neighbouring features
// of one row at once. group_width[g]: the bins of every feature of group g where they are all
// equal (numeric data: feature fl's words then start at fl * (4 * width + 1); the _equal kernels,
// used where every group is so, read no table in their inner loops), else 0.
// The histogram kernels run 1024 threads a block (_HIST_THREADS) and must fit two blocks on a
// multiprocessor: at most 32 registers a thread (at 40, one block fit: the trees of the 10M x 28
// numeric benchmark took 40% longer). HIST_BOUNDS holds the kernels that need more to 32, but
// the bounds cost themselves: scatter_and_histogram ran 13% longer with them at the same 32
// registers (ncu, the 10M x 28 numeric benchmark, twenty-sixth session). Its _equal version
// (equal widths, no side map) fits in 32 without them and carries none. A bin above its
// feature's width (n_value_bins) would add into another feature's counters or past the group:
// the callers' bins never are (the cuts bound them; the NumPy twins check).
#define HIST_BOUNDS __launch_bounds__(1024, 2)

__device__ __forceinline__ int group_words(const i64* counter_start, int f0, int group) {
    return (int)(2 * (counter_start[f0 + group] - counter_start[f0])) + group;
}

// ---------------------------------------------------------------------------------------------
// bin_features: one thread per (row, feature) value. Threads of a warp take consecutive rows of
// one feature when X is column-major (x_row_stride == 1), consecutive features of one row
// otherwise, so reads are coalesced either way.
// out[row, f] = 0 for NaN, else 1 + (number of cuts <= x) (binary search over feature f's cuts).
extern "C" __global__ void bin_features(const float* X, i64 n_rows, int n_features,
                                        i64 x_row_stride, i64 x_col_stride,
                                        const float* cut_values, const i64* cut_offsets,
                                        BIN_T* out, i64 out_stride) {
    i64 n = n_rows * n_features;
    bool column_major = x_row_stride == 1;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n;
         i += (i64)gridDim.x * blockDim.x) {
        i64 row; int f;
        if (column_major) { f = (int)(i / n_rows); row = i - (i64)f * n_rows; }
        else { row = i / n_features; f = (int)(i - row * n_features); }
        float x = X[row * x_row_stride + (i64)f * x_col_stride];
        BIN_T id = 0;
        if (!isnan(x)) {
            i64 lo = cut_offsets[f], hi = cut_offsets[f + 1];
            while (lo < hi) {  // first cut > x
                i64 mid = (lo + hi) >> 1;
                if (cut_values[mid] <= x) lo = mid + 1; else hi = mid;
            }
            id = (BIN_T)(1 + (lo - cut_offsets[f]));
        }
        out[row * out_stride + f] = id;
    }
}

// ---------------------------------------------------------------------------------------------
// Histograms in shared memory. Block (b, g) adds the rows of work item b for the features of
// group g (features group_first[g] .. group_first[g + 1], packed by their own bin counts: see
// group_words) into a shared histogram, then adds its non-zero entries into hist[node] in global
// memory with atomics: hist is accumulated into, never overwritten (zeroed by the caller, or
// holding other shards' sums).
// Thread mapping: the block's (row, feature) pairs are numbered row-major, so the lanes of a warp
// update different features of one or two rows (no two lanes of a step hit the same counter
// unless a feature repeats) and read consecutive bytes of a row.

__device__ __forceinline__ void zero_shared(unsigned int* words, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) words[i] = 0;
}

// Adds the group's counters into hist_node (the node's (F, n_bins, 2) histograms), skipping
// zeros. A thread finds its counter's feature by a division (EQUAL: every feature of the group
// is ``width`` bins wide) or a binary search of counter_start.
template <bool EQUAL>
__device__ __forceinline__ void flush_shared(const unsigned int* words, int f0, int group,
                                             int width, const i64* counter_start, int n_bins,
                                             i64* hist_node) {
    i64 first = counter_start[f0];
    int n_counters = (int)(counter_start[f0 + group] - first);
    for (int i = threadIdx.x; i < n_counters; i += blockDim.x) {
        int lo, rest;  // the counter's group feature, and its 2 * bin + component
        if (EQUAL) {
            lo = i / (2 * width);
            rest = i - lo * 2 * width;
        } else {
            lo = 0;  // the last group feature whose counters start at or before i
            int hi = group - 1;
            while (lo < hi) {
                int mid = (lo + hi + 1) >> 1;
                if (counter_start[f0 + mid] - first <= i) lo = mid; else hi = mid - 1;
            }
            rest = i - (int)(counter_start[f0 + lo] - first);
        }
        const unsigned int* w = words + 2 * i + lo;
        u64 v = static_cast<u64>(w[0]) | (static_cast<u64>(w[1]) << 32);
        if (v != 0)
            atomicAdd(reinterpret_cast<u64*>(hist_node + 2 * (i64)(f0 + lo) * n_bins + rest), v);
    }
}

// Adds rows[0..n_rows) (row ids) to the shared histogram of features f0..f0+group.
// One thread per (row, feature) pair, numbered row-major: the lanes of a warp update neighbouring
// features of one or two rows and read consecutive bytes of a row. EQUAL: every feature of the
// group is ``width`` bins wide (no table read in the loop).
template <bool EQUAL>
__device__ __forceinline__ void add_rows_shared(const BIN_T* bins, i64 bin_stride, const i64* gh,
                                                const int* rows, int n_rows, int f0, int group,
                                                int width, const i64* counter_start,
                                                unsigned int* words) {
    int n_pairs = n_rows * group;
    i64 first = counter_start[f0];
    int stride = 4 * width + 1;
    for (int i = threadIdx.x; i < n_pairs; i += blockDim.x) {
        int r = i / group;
        int fl = i - r * group;
        i64 row = rows[r];
        int b = bins[row * bin_stride + f0 + fl];
        int start = EQUAL ? fl * stride : 2 * (int)(__ldg(counter_start + f0 + fl) - first) + fl;
        unsigned int* cell = words + start + 4 * b;
        shared_add64(cell, gh[2 * row]);
        shared_add64(cell + 2, gh[2 * row + 1]);
    }
}

// One block's rows [begin, end) of row_index into node's histogram, for the feature group
// blockIdx.y (features group_first[g] .. group_first[g + 1]): zeroed shared counters, the rows
// added, the non-zero counters flushed.
template <bool EQUAL>
__device__ __forceinline__ void block_histogram_shared(
        const BIN_T* bins, i64 bin_stride, int n_features, int n_bins, const i64* gh,
        const int* row_index, i64 node, i64 begin, i64 end, const int* group_first,
        const int* group_width, const i64* counter_start, i64* hist, unsigned int* words) {
    int f0 = group_first[blockIdx.y];
    int group = group_first[blockIdx.y + 1] - f0;
    int width = group_width[blockIdx.y];
    zero_shared(words, group_words(counter_start, f0, group));
    __syncthreads();
    add_rows_shared<EQUAL>(bins, bin_stride, gh, row_index + begin, (int)(end - begin), f0,
                           group, width, counter_start, words);
    __syncthreads();
    flush_shared<EQUAL>(words, f0, group, width, counter_start, n_bins,
                 hist + node * (i64)n_features * n_bins * 2);
}

// Each shared-memory kernel is compiled twice: NAME for groups of mixed widths, NAME_equal
// where every group's features are equally wide (cuda_kernels picks by group_width).
#define BUILD_HISTOGRAMS_SHARED(NAME, EQUAL)                                                     \
    extern "C" __global__ void HIST_BOUNDS NAME(                                                  \
            const BIN_T* bins, i64 bin_stride, int n_features, int n_bins, const i64* gh,        \
            const int* row_index, const i64* work, const int* group_first,                       \
            const int* group_width, const i64* counter_start, i64* hist) {                       \
        extern __shared__ unsigned int words[];                                                  \
        const i64* w = work + WORK_WIDTH * blockIdx.x;                                           \
        block_histogram_shared<EQUAL>(bins, bin_stride, n_features, n_bins, gh, row_index, w[0], \
                                      w[1], w[2], group_first, group_width, counter_start, hist, \
                                      words);                                                    \
    }
BUILD_HISTOGRAMS_SHARED(build_histograms_shared, false)
BUILD_HISTOGRAMS_SHARED(build_histograms_shared_equal, true)

// The histograms of the built children after a partition-only scatter_and_histogram (wide data:
// there every feature group's blocks would redo the partition's ranking). Work items are the
// parents' (as for the partition); each block keeps the part of its rows that now holds the built
// child: [seg_start, seg_start + left) when small_is_left, else [seg_start + left, end of the
// parent), with left = node_left[node] from the partition (no trip to the host).
template <bool EQUAL>
__device__ __forceinline__ void child_histograms(
        const BIN_T* bins, i64 bin_stride, int n_features, int n_bins, const i64* gh,
        const int* row_index, const i64* work, const i64* n_work, const i64* node_left,
        const bool* small_is_left, const int* group_first, const int* group_width,
        const i64* counter_start, i64* hist, unsigned int* words) {
    if ((i64)blockIdx.x >= *n_work) return;  // the whole block
    const i64* w = work + WORK_WIDTH * blockIdx.x;
    i64 node = w[0], begin = w[1], end = w[2], seg_start = w[4];
    i64 split = seg_start + node_left[node];
    if (small_is_left[node]) end = min(end, split); else begin = max(begin, split);
    if (begin >= end) return;  // the whole block: no barrier is skipped by some threads only
    block_histogram_shared<EQUAL>(bins, bin_stride, n_features, n_bins, gh, row_index, node,
                                  begin, end, group_first, group_width, counter_start, hist,
                                  words);
}

#define BUILD_CHILD_HISTOGRAMS_SHARED(NAME, EQUAL)                                               \
    extern "C" __global__ void HIST_BOUNDS NAME(                                                  \
            const BIN_T* bins, i64 bin_stride, int n_features, int n_bins, const i64* gh,        \
            const int* row_index, const i64* work, const i64* n_work, const i64* node_left,      \
            const bool* small_is_left, const int* group_first, const int* group_width,           \
            const i64* counter_start, i64* hist) {                                               \
        extern __shared__ unsigned int words[];                                                  \
        child_histograms<EQUAL>(bins, bin_stride, n_features, n_bins, gh, row_index, work,       \
                                n_work, node_left, small_is_left, group_first, group_width,      \
                                counter_start, hist, words);                                     \
    }
BUILD_CHILD_HISTOGRAMS_SHARED(build_child_histograms_shared, false)
BUILD_CHILD_HISTOGRAMS_SHARED(build_child_histograms_shared_equal, true)

// Adds rows[0..n_rows) straight into the global histogram of one node (all features), for bin
// counts whose histogram of one feature does not fit in shared memory (atomics: accumulates into
// what hist_node holds, like flush_shared).
__device__ __forceinline__ void add_rows_global(const BIN_T* bins, i64 bin_stride, const i64* gh,
                                                const int* rows, i64 n_rows, int n_features,
                                                int n_bins, i64* hist_node) {
    i64 n_pairs = n_rows * n_features;
    for (i64 i = threadIdx.x; i < n_pairs; i += blockDim.x) {
        i64 r = i / n_features;
        int f = (int)(i - r * n_features);
        i64 row = rows[r];
        int b = bins[row * bin_stride + f];
        u64* cell = reinterpret_cast<u64*>(hist_node + 2 * ((i64)f * n_bins + b));
        atomicAdd(cell, static_cast<u64>(gh[2 * row]));
        atomicAdd(cell + 1, static_cast<u64>(gh[2 * row + 1]));
    }
}

extern "C" __global__ void build_histograms_global(
        const BIN_T* bins, i64 bin_stride, int n_features, int n_bins, const i64* gh,
        const int* row_index, const i64* work, const int* unused_group_first,
        const int* unused_group_width, const i64* unused_counter_start, i64* hist) {
    const i64* w = work + WORK_WIDTH * blockIdx.x;
    i64 node = w[0], begin = w[1], end = w[2];
    add_rows_global(bins, bin_stride, gh, row_index + begin, end - begin, n_features, n_bins,
                    hist + node * (i64)n_features * n_bins * 2);
}

// ---------------------------------------------------------------------------------------------
// Row partition of the nodes of a level, with the histogram of one child per node.
//
// Pass 1 (count_left): each block counts the rows of its work item that go left.
// Pass 2 (scatter_and_histogram): each block finds its place among its node's blocks from the
// pass-1 counts (blocks of a node are consecutive in the work list), ranks its rows with a block
// scan (stable: left rows keep their order, and so do right rows), writes them to `moved` at
// their new positions, and adds the rows that go to the child picked by small_is_left into a
// shared histogram (feature group blockIdx.y), flushed to hist[node] at the end (or, when one
// feature's histogram does not fit in shared memory, straight into hist[node]): atomic adds both
// ways, so hist accumulates over calls (one per shard into one level array). Only the blocks of
// feature group 0 write rows.
// Pass 3 (copy_back), only when row_index is partitioned in place: moved -> row_index over the
// same positions. A grower that ping-pongs between two row arrays passes the other one as
// `moved` and needs no pass 3.

// node_sides: null, or the node's row of a side map (map_sides): the bin read is replaced by its
// side (0 missing, 1 left, 2 right) before the comparison (a level with category-set splits).
__device__ __forceinline__ bool goes_left(const BIN_T* bins_by_feature, i64 feature_stride,
                                          i64 row_stride, int row, int feature, int threshold,
                                          bool default_left, const unsigned char* node_sides) {
    int b = bins_by_feature[(i64)feature * feature_stride + (i64)row * row_stride];
    if (node_sides != nullptr) b = node_sides[b];
    return b == 0 ? default_left : b <= threshold;
}

__device__ __forceinline__ const unsigned char* sides_of(const unsigned char* side_map,
                                                         int map_width, i64 node) {
    return map_width ? side_map + node * map_width : nullptr;
}

extern "C" __global__ void count_left(const BIN_T* bins_by_feature, i64 feature_stride,
                                      i64 row_stride,
                                      const int* row_index, const i64* work, const i64* n_work,
                                      const int* feature, const int* bin_threshold,
                                      const bool* default_left, const unsigned char* side_map,
                                      int map_width, i64* block_left) {
    __shared__ i64 warp_sums[32];
    if ((i64)blockIdx.x >= *n_work) return;
    const i64* w = work + WORK_WIDTH * blockIdx.x;
    i64 node = w[0], begin = w[1], end = w[2];
    int f = feature[node], t = bin_threshold[node];
    bool dl = default_left[node];
    const unsigned char* sides = sides_of(side_map, map_width, node);
    i64 count = 0;
    for (i64 p = begin + threadIdx.x; p < end; p += blockDim.x)
        count += goes_left(bins_by_feature, feature_stride, row_stride, row_index[p], f, t, dl,
                           sides);
    for (int o = 16; o > 0; o >>= 1) count += __shfl_down_sync(0xffffffffu, count, o);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = count;
    __syncthreads();
    if (threadIdx.x == 0) {
        i64 total = 0;
        for (int i = 0; i < (int)(blockDim.x >> 5); ++i) total += warp_sums[i];
        block_left[blockIdx.x] = total;
    }
}

// Dynamic shared memory: [histogram words of the group] [tile rows of the small side (int)].
#define SCATTER_ARGS                                                                             \
        const BIN_T* bins, i64 bin_stride, const BIN_T* bins_by_feature, i64 feature_stride,     \
        i64 row_stride, int n_features, int n_bins, const i64* gh, const int* row_index,         \
        int* moved, const i64* work, const i64* n_work, const i64* block_left,                   \
        const int* feature, const int* bin_threshold, const bool* default_left,                  \
        const unsigned char* side_map, int map_width, const bool* small_is_left,                 \
        const int* group_first, const int* group_width, const i64* counter_start,               \
        int use_shared, i64* hist, i64* node_left
// EQUAL: every group's features equally wide (or no shared histogram, use_shared 0) and no side
// map (side_map is not read).
template <bool EQUAL>
__device__ __forceinline__ void scatter_rows(SCATTER_ARGS, unsigned int* words) {
    __shared__ int warp_left[32];
    __shared__ int warp_small[32];
    __shared__ i64 base[2];  // left rows and right rows of this node written before this block
    i64 n_blocks = *n_work;
    if ((i64)blockIdx.x >= n_blocks) return;  // the whole block, before any barrier
    const i64* w = work + WORK_WIDTH * blockIdx.x;
    i64 node = w[0], begin = w[1], end = w[2], first_block = w[3], seg_start = w[4];
    int f0 = 0, group = 0, width = 0, n_words = 0;  // the feature group of the shared histogram
    if (use_shared) {
        f0 = group_first[blockIdx.y];
        group = group_first[blockIdx.y + 1] - f0;
        width = group_width[blockIdx.y];
        n_words = group_words(counter_start, f0, group);
    }
    int* small_rows = reinterpret_cast<int*>(words + n_words);
    int f = feature[node], t = bin_threshold[node];
    bool dl = default_left[node], small_left = small_is_left[node];
    // without a side map goes_left's check folds away (and with it the registers that keep the
    // _equal version within 32 without launch bounds)
    const unsigned char* sides = EQUAL ? nullptr : sides_of(side_map, map_width, node);
    zero_shared(words, n_words);
    if (threadIdx.x == 0) {
        i64 left_before = 0, node_total_left = 0;
        for (i64 b = first_block; b < n_blocks; ++b) {
            const i64* wb = work + WORK_WIDTH * b;
            if (wb[0] != node) break;
            if (b < (i64)blockIdx.x) left_before += block_left[b];
            node_total_left += block_left[b];
        }
        base[0] = seg_start + left_before;
        base[1] = seg_start + node_total_left + ((begin - seg_start) - left_before);
        if (blockIdx.x == first_block && blockIdx.y == 0) node_left[node] = node_total_left;
    }
    __syncthreads();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    i64* hist_node = hist + node * (i64)n_features * n_bins * 2;
    for (i64 tile = begin; tile < end; tile += blockDim.x) {
        i64 p = tile + threadIdx.x;
        bool active = p < end;
        int row = active ? row_index[p] : 0;
        bool left = active &&
                    goes_left(bins_by_feature, feature_stride, row_stride, row, f, t, dl, sides);
        bool right = active && !left;
        bool small = small_left ? left : right;
        unsigned left_mask = __ballot_sync(0xffffffffu, left);
        unsigned small_mask = __ballot_sync(0xffffffffu, small);
        if (lane == 0) { warp_left[warp] = __popc(left_mask); warp_small[warp] = __popc(small_mask); }
        __syncthreads();
        int left_rank = 0, small_rank = 0, tile_left = 0, tile_small = 0;
        for (int i = 0; i < n_warps; ++i) {
            if (i < warp) { left_rank += warp_left[i]; small_rank += warp_small[i]; }
            tile_left += warp_left[i];
            tile_small += warp_small[i];
        }
        unsigned below = (1u << lane) - 1u;
        left_rank += __popc(left_mask & below);
        small_rank += __popc(small_mask & below);
        int right_rank = (int)(threadIdx.x - left_rank);  // active threads come first in a tile
        if (blockIdx.y == 0 && active) {
            i64 dest = left ? base[0] + left_rank : base[1] + right_rank;
            moved[dest] = row;
        }
        if (small) small_rows[small_rank] = row;
        __syncthreads();
        if (use_shared) {
            add_rows_shared<EQUAL>(bins, bin_stride, gh, small_rows, tile_small, f0, group, width,
                                   counter_start, words);
        } else {
            add_rows_global(bins, bin_stride, gh, small_rows, tile_small, n_features, n_bins,
                            hist_node);
        }
        if (threadIdx.x == 0) { base[0] += tile_left; base[1] += (i64)(min((i64)blockDim.x, end - tile) - tile_left); }
        __syncthreads();
    }
    if (use_shared) flush_shared<EQUAL>(words, f0, group, width, counter_start, n_bins, hist_node);
}

#define SCATTER_AND_HISTOGRAM(NAME, EQUAL, BOUNDS)                                               \
    extern "C" __global__ void BOUNDS NAME(SCATTER_ARGS) {                                       \
        extern __shared__ unsigned int words[];                                                  \
        scatter_rows<EQUAL>(bins, bin_stride, bins_by_feature, feature_stride, row_stride,       \
                            n_features, n_bins, gh, row_index, moved, work, n_work, block_left,  \
                            feature, bin_threshold, default_left, side_map, map_width,           \
                            small_is_left, group_first, group_width, counter_start, use_shared,  \
                            hist, node_left, words);                                             \
    }
SCATTER_AND_HISTOGRAM(scatter_and_histogram, false, HIST_BOUNDS)
SCATTER_AND_HISTOGRAM(scatter_and_histogram_equal, true, /* none: see HIST_BOUNDS */)

extern "C" __global__ void copy_back(const int* moved, int* row_index, const i64* work,
                                     const i64* n_work) {
    if ((i64)blockIdx.x >= *n_work) return;
    const i64* w = work + WORK_WIDTH * blockIdx.x;
    for (i64 p = w[1] + threadIdx.x; p < w[2]; p += blockDim.x) row_index[p] = moved[p];
}

// ---------------------------------------------------------------------------------------------
// quantise_gradients: gh[i] = [rint(grad[i * grad_stride] * scale_g), rint(hess[...] * scale_h)]
// as int64, one thread per row (grid-stride); float32 inputs are widened to double first (exact),
// the product of a double and a power of two is exact and rint rounds half to even, as NumPy's.
template <typename T>
__device__ __forceinline__ void quantise_rows(const T* grad, i64 grad_stride, const T* hess,
                                              i64 hess_stride, i64 n_rows, double scale_g,
                                              double scale_h, i64* gh) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n_rows;
         i += (i64)gridDim.x * blockDim.x) {
        gh[2 * i] = (i64)rint((double)grad[i * grad_stride] * scale_g);
        gh[2 * i + 1] = (i64)rint((double)hess[i * hess_stride] * scale_h);
    }
}

extern "C" __global__ void quantise_gradients(const double* grad, i64 grad_stride,
                                              const double* hess, i64 hess_stride, i64 n_rows,
                                              double scale_g, double scale_h, i64* gh) {
    quantise_rows(grad, grad_stride, hess, hess_stride, n_rows, scale_g, scale_h, gh);
}

extern "C" __global__ void quantise_gradients_f32(const float* grad, i64 grad_stride,
                                                  const float* hess, i64 hess_stride, i64 n_rows,
                                                  double scale_g, double scale_h, i64* gh) {
    quantise_rows(grad, grad_stride, hess, hess_stride, n_rows, scale_g, scale_h, gh);
}

// ---------------------------------------------------------------------------------------------
// sibling_histograms: the siblings' half of the next level's histograms, in place. children
// holds 2 * n_split nodes: siblings of splits 0..n_split-1 first (written here), then the built
// children of the same splits (from scatter_and_histogram, read here); the sibling of split k is
// its parent's histogram minus the built child's. Histograms of any layout, as words_per_node
// int64 words per node. Grid-stride, one thread per word of the siblings' half: consecutive
// threads read and write consecutive words, and no word is both read and written by two threads.
// Only the first *n_valid siblings are written (a level plan's split count; its arrays are sized
// for every node that could split).
extern "C" __global__ void sibling_histograms(const i64* parent, const i64* split_node,
                                              i64 n_split, const i64* n_valid,
                                              i64 words_per_node, i64* children) {
    i64 total = n_split * words_per_node;
    i64 valid = min(n_split, *n_valid) * words_per_node;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < valid;
         i += (i64)gridDim.x * blockDim.x) {
        i64 k = i / words_per_node, w = i - k * words_per_node;
        children[i] = parent[split_node[k] * words_per_node + w] - children[total + i];
    }
}

// ---------------------------------------------------------------------------------------------
// Margin updates from leaf positions (one work item = a chunk of one leaf's or split's segment).
// margin is a column view: element of row r at margin[r * margin_stride].

extern "C" __global__ void add_leaf_values(double* margin, i64 margin_stride, const int* row_index,
                                           const i64* work, const double* values) {
    const i64* w = work + WORK_WIDTH * blockIdx.x;
    double v = values[w[0]];
    for (i64 p = w[1] + threadIdx.x; p < w[2]; p += blockDim.x)
        margin[(i64)row_index[p] * margin_stride] += v;
}

// map_sides: one block per work item; each listed row's bin of its node's split feature
// (row ids[node] of bins_by_feature) mapped through the node's row of side_map (n_bins wide).
extern "C" __global__ void map_sides(const BIN_T* bins_by_feature, i64 feature_stride,
                                     i64 row_stride, const int* row_index, const i64* work,
                                     const int* ids, const unsigned char* side_map, int n_bins,
                                     BIN_T* out) {
    const i64* w = work + WORK_WIDTH * blockIdx.x;
    i64 node = w[0];
    const BIN_T* column = bins_by_feature + (i64)ids[node] * feature_stride;
    const unsigned char* sides = side_map + node * n_bins;
    for (i64 p = w[1] + threadIdx.x; p < w[2]; p += blockDim.x) {
        int row = row_index[p];
        out[row] = sides[column[(i64)row * row_stride]];
    }
}

extern "C" __global__ void add_split_leaf_values(
        double* margin, i64 margin_stride, const BIN_T* bins_by_feature, i64 feature_stride,
        i64 row_stride,
        const int* row_index, const i64* work, const int* feature, const int* bin_threshold,
        const bool* default_left, const double* left_value, const double* right_value) {
    const i64* w = work + WORK_WIDTH * blockIdx.x;
    i64 k = w[0];
    int f = feature[k], t = bin_threshold[k];
    bool dl = default_left[k];
    double lv = left_value[k], rv = right_value[k];
    for (i64 p = w[1] + threadIdx.x; p < w[2]; p += blockDim.x) {
        int row = row_index[p];
        margin[(i64)row * margin_stride] +=
            goes_left(bins_by_feature, feature_stride, row_stride, row, f, t, dl, nullptr) ? lv
                                                                                         : rv;
    }
}

// ---------------------------------------------------------------------------------------------
// Split search: one block per node, one warp per feature at a time. A warp walks the bins in
// chunks of 32 with an inclusive integer scan (exact), scores both missing-value directions of
// every threshold, and keeps its best candidate; ties go to the smaller candidate index
// (feature, threshold, direction), as NumPy's argmax keeps the first maximum. score(), Best,
// better() and shuffle_best() are in common.cuh.

// Grid (n_nodes, feature blocks): block (n, k) scores features k*features_per_block .. +that of
// node n and writes its best candidate to partial[n, k]; reduce_splits picks each node's best.
extern "C" __global__ void evaluate_splits(
        const i64* hist, int n_features, int n_bins, const int* n_value_bins,
        const bool* feature_allowed, i64 allowed_stride, double inv_scale_g,
        double inv_scale_h, double lambda_,
        double alpha, double min_child_weight, int bounded, double max_delta_step,
        const double* node_bounds, const signed char* monotone, int features_per_block,
        Best* partial) {
    __shared__ i64 total_parts[2][32];
    __shared__ Best warp_best[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    const i64* h_node = hist + (i64)blockIdx.x * n_features * n_bins * 2;
    i64 tg, th;
    block_total(h_node, 0, n_bins, total_parts, tg, th);
    double GP = (double)tg * inv_scale_g, HP = (double)th * inv_scale_h;
    WeightBounds wb = weight_bounds_of(bounded, max_delta_step, node_bounds, blockIdx.x);
    double parent = parent_gain(GP, HP, lambda_, alpha, wb);
    const double NEG_INF = __longlong_as_double(0xfff0000000000000LL);
    Best best = {NEG_INF, 0x7fffffffffffffffLL, 0, 0};
    int f_end = min(n_features, (int)(blockIdx.y + 1) * features_per_block);
    for (int f = blockIdx.y * features_per_block + warp; f < f_end; f += n_warps) {
        const i64* hf = h_node + (i64)f * n_bins * 2;
        i64 miss_g = hf[0], miss_h = hf[1];
        bool allowed = feature_allowed[blockIdx.x * allowed_stride + f];  // 0: every node's
        int nvb = n_value_bins[f];
        int sign = bounded == 2 ? monotone[f] : 0;  // 2: bounds and monotone constraints
        i64 carry_g = 0, carry_h = 0;
        // thresholds past nvb are no candidates: a feature narrower than the histograms (a
        // wide categorical feature widens every feature's) stops at its own bins
        int t_end = min(n_bins, nvb + 1);
        for (int chunk = 1; chunk < t_end; chunk += 32) {
            int t = chunk + lane;  // threshold: bins 1..t go left
            i64 vg = 0, vh = 0;
            if (t < n_bins) { vg = hf[2 * t]; vh = hf[2 * t + 1]; }
            for (int o = 1; o < 32; o <<= 1) {
                i64 ug = __shfl_up_sync(0xffffffffu, vg, o);
                i64 uh = __shfl_up_sync(0xffffffffu, vh, o);
                if (lane >= o) { vg += ug; vh += uh; }
            }
            i64 cg = carry_g + vg, ch = carry_h + vh;
            carry_g += __shfl_sync(0xffffffffu, vg, 31);
            carry_h += __shfl_sync(0xffffffffu, vh, 31);
            // t == nvb: every value bin left, missing values right (d == 1 only): the
            // present-versus-missing split, kept with the missing side as its left child.
            // Without missing values here both directions are one split: kept with missing
            // values right (d == 1), XGBoost's default direction where training saw none
            if (t < n_bins && allowed && t <= nvb) {
                for (int d = (t == nvb || (miss_g == 0 && miss_h == 0)) ? 1 : 0; d < 2; ++d) {
                    i64 lg = d == 0 ? cg + miss_g : cg, lh = d == 0 ? ch + miss_h : ch;
                    double gain = candidate_gain(lg, lh, tg, th, parent, inv_scale_g, inv_scale_h,
                                                 lambda_, alpha, min_child_weight, wb,
                                                 t == nvb ? 0 : sign);  // present vs missing: free
                    if (gain == NEG_INF) continue;  // not a valid candidate
                    i64 index = ((i64)f * (n_bins - 1) + (t - 1)) * 2 + d;
                    if (better(gain, index, best)) {
                        best.gain = gain; best.index = index;
                        best.left_g = t == nvb ? tg - lg : lg;
                        best.left_h = t == nvb ? th - lh : lh;
                    }
                }
            }
        }
    }
    block_best(best, warp_best, &partial[(i64)blockIdx.x * gridDim.y + blockIdx.y]);
}

// One warp per node: the best of its feature blocks' candidates, decoded into the outputs. A
// threshold equal to the feature's value bin count (n_value_bins) is the present-versus-missing
// split: written as threshold 0 with missing values left (its Best holds the missing side's sums).
extern "C" __global__ void reduce_splits(const Best* partial, int n_nodes, int n_blocks,
                                         int n_bins, const int* n_value_bins, double* out_gain,
                                         int* out_feature, int* out_threshold,
                                         bool* out_default_left, i64* out_left_sum) {
    int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (n >= n_nodes) return;
    const double NEG_INF = __longlong_as_double(0xfff0000000000000LL);
    Best best = {NEG_INF, 0x7fffffffffffffffLL, 0, 0};
    for (int k = lane; k < n_blocks; k += 32) {
        Best b = partial[(i64)n * n_blocks + k];
        if (better(b.gain, b.index, best)) best = b;
    }
    for (int o = 16; o > 0; o >>= 1) shuffle_best(best, o);
    if (lane == 0) {
        bool found = best.gain > NEG_INF;
        int f = found ? (int)(best.index / (2 * (i64)(n_bins - 1))) : -1;
        int t = found ? (int)((best.index / 2) % (n_bins - 1)) + 1 : 0;
        bool flipped = found && t == n_value_bins[f];
        out_gain[n] = best.gain;
        out_feature[n] = f;
        out_threshold[n] = flipped ? 0 : t;
        out_default_left[n] = found && ((best.index % 2) == 0 || flipped);
        out_left_sum[2 * n] = found ? best.left_g : 0;
        out_left_sum[2 * n + 1] = found ? best.left_h : 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Prediction: one thread per row walks every tree in tree order and adds the leaf value to
// out[row, group] (the same float64 additions, in the same order, as NumPy). One walk for raw
// float32 values and for rows binned with the model's cuts; only the node test differs.

// raw values: NaN is missing, x < threshold goes left
__device__ __forceinline__ bool walk_left(float x, const float* threshold,
                                          const bool* default_left, i64 node) {
    return isnan(x) ? default_left[node] : x < threshold[node];
}

// bins (numpy_kernels.predict_margins_binned): bin 0 is missing, bins 1..bin_threshold go left,
// the partition's rule (goes_left above)
__device__ __forceinline__ bool walk_left(BIN_T b, const int* bin_threshold,
                                          const bool* default_left, i64 node) {
    return b == 0 ? default_left[node] : (int)b <= bin_threshold[node];
}

// categorical splits: a raw value is a category position (NaN, or no position: missing); bin b
// is position b - 1 (bin 0: missing)
__device__ __forceinline__ i64 category_position(float x) {
    return (x >= 0.0f && x < 2147483648.0f) ? (i64)x : -1;
}
__device__ __forceinline__ i64 category_position(BIN_T b) { return (i64)b - 1; }

// numpy_kernels.in_category_set: a set is its word count, then its bit words; the categories of
// the set go right, missing values by default_left
__device__ __forceinline__ bool category_left(i64 position, const unsigned* cat_bits, int start,
                                              const bool* default_left, i64 node) {
    if (position < 0) return default_left[node];
    i64 word = position >> 5;
    if (word >= (i64)cat_bits[start]) return true;
    return ((cat_bits[start + 1 + word] >> (position & 31)) & 1u) == 0;
}

// whether a row (its values, one every col_stride) goes left at ``node``: raw values or bins
template <typename Row, typename Threshold>
__device__ __forceinline__ bool node_left(const Row* values, i64 col_stride, i64 node,
                                          const int* feature, const Threshold* threshold,
                                          const bool* default_left, const int* cat_start,
                                          const unsigned* cat_bits, int has_categories) {
    Row v = values[(i64)feature[node] * col_stride];
    return (has_categories && cat_start[node] >= 0)
        ? category_left(category_position(v), cat_bits, cat_start[node], default_left, node)
        : walk_left(v, threshold, default_left, node);
}

template <typename Row, typename Threshold>
__device__ void walk_trees(const Row* rows, i64 n_rows, i64 row_stride, i64 col_stride,
                           const int* feature, const Threshold* threshold,
                           const bool* default_left, const int* left, const int* right,
                           const double* value, const i64* tree_root, const int* tree_group,
                           int n_trees, double* out, int n_groups, const int* cat_start,
                           const unsigned* cat_bits, int has_categories) {
    for (i64 row = blockIdx.x * (i64)blockDim.x + threadIdx.x; row < n_rows;
         row += (i64)gridDim.x * blockDim.x) {
        const Row* values = rows + row * row_stride;
        for (int t = 0; t < n_trees; ++t) {
            i64 node = tree_root[t];
            while (feature[node] >= 0) {
                node = node_left(values, col_stride, node, feature, threshold, default_left,
                                 cat_start, cat_bits, has_categories) ? left[node] : right[node];
            }
            out[row * n_groups + tree_group[t]] += value[node];
        }
    }
}

extern "C" __global__ void predict_margins(
        const float* X, i64 n_rows, i64 x_row_stride, i64 x_col_stride, const int* feature,
        const float* threshold, const bool* default_left, const int* left, const int* right,
        const double* value, const i64* tree_root, const int* tree_group, int n_trees,
        double* out, int n_groups, const int* cat_start, const unsigned* cat_bits,
        int has_categories) {
    walk_trees(X, n_rows, x_row_stride, x_col_stride, feature, threshold, default_left, left,
               right, value, tree_root, tree_group, n_trees, out, n_groups, cat_start, cat_bits,
               has_categories);
}

extern "C" __global__ void predict_margins_binned(
        const BIN_T* bins, i64 n_rows, i64 row_stride, i64 col_stride, const int* feature,
        const int* bin_threshold, const bool* default_left, const int* left, const int* right,
        const double* value, const i64* tree_root, const int* tree_group, int n_trees,
        double* out, int n_groups, const int* cat_start, const unsigned* cat_bits,
        int has_categories) {
    walk_trees(bins, n_rows, row_stride, col_stride, feature, bin_threshold, default_left, left,
               right, value, tree_root, tree_group, n_trees, out, n_groups, cat_start, cat_bits,
               has_categories);
}

// Paged training's walk of a finished tree over every host page in one launch (``Backend
// .predict_pages_binned``): the pages are page-locked host memory mapped into the device's
// address space, read where they lie. A block first copies its rows, whole, into shared memory
// in coalesced words (each row crosses the bus once; the walk's scattered byte reads would fetch
// it again at every level), then each thread walks its row there. Page p holds rows
// page_start[p] .. page_start[p + 1] of the launch; its rows are row_words Words apart, and
// its margins start at out_address[p], out_stride doubles apart.
__device__ __forceinline__ int page_of(const i64* page_start, int page, i64 row) {
    while (page_start[page + 1] <= row) ++page;  // (empty pages are skipped)
    return page;
}

template <typename Word>
__device__ void walk_pages(const u64* page_address, const i64* page_start, int n_pages,
                           i64 row_words, const int* feature, const int* bin_threshold,
                           const bool* default_left, const int* left, const int* right,
                           const double* value, const i64* tree_root, const int* tree_group,
                           int n_trees, const u64* out_address, i64 out_stride,
                           i64 group_stride, const int* cat_start, const unsigned* cat_bits,
                           int has_categories) {
    extern __shared__ u64 staged_words[];
    Word* staged = reinterpret_cast<Word*>(staged_words);
    __shared__ int first_page;
    const i64 n_rows = page_start[n_pages];
    const i64 first = (i64)blockIdx.x * blockDim.x;
    if (threadIdx.x == 0) {  // the last page starting at or before the block's first row
        int lo = 0, hi = n_pages - 1;
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (page_start[mid] <= first) lo = mid; else hi = mid - 1;
        }
        first_page = lo;
    }
    __syncthreads();
    const i64 block_rows = min((i64)blockDim.x, n_rows - first);
    for (i64 w = threadIdx.x; w < block_rows * row_words; w += blockDim.x) {
        i64 row = first + w / row_words;
        int page = page_of(page_start, first_page, row);
        const Word* words = reinterpret_cast<const Word*>(page_address[page]);
        staged[w] = words[(row - page_start[page]) * row_words + w % row_words];
    }
    __syncthreads();
    if (threadIdx.x >= block_rows) return;
    const i64 row = first + threadIdx.x;
    const int page = page_of(page_start, first_page, row);
    const BIN_T* values = reinterpret_cast<const BIN_T*>(staged + threadIdx.x * row_words);
    double* out = reinterpret_cast<double*>(out_address[page]) +
                  (row - page_start[page]) * out_stride;
    for (int t = 0; t < n_trees; ++t) {
        i64 node = tree_root[t];
        while (feature[node] >= 0) {
            node = node_left(values, (i64)1, node, feature, bin_threshold, default_left,
                             cat_start, cat_bits, has_categories) ? left[node] : right[node];
        }
        out[tree_group[t] * group_stride] += value[node];
    }
}

#define GBFLOW_WALK_PAGES(NAME, WORD)                                                          \
extern "C" __global__ void NAME(                                                               \
        const u64* page_address, const i64* page_start, int n_pages, i64 row_words,          \
        const int* feature, const int* bin_threshold, const bool* default_left,              \
        const int* left, const int* right, const double* value, const i64* tree_root,        \
        const int* tree_group, int n_trees, const u64* out_address, i64 out_stride,          \
        i64 group_stride, const int* cat_start, const unsigned* cat_bits,                    \
        int has_categories) {                                                                 \
    walk_pages<WORD>(page_address, page_start, n_pages, row_words, feature, bin_threshold,   \
                     default_left, left, right, value, tree_root, tree_group, n_trees,        \
                     out_address, out_stride, group_stride, cat_start, cat_bits,              \
                     has_categories);                                                         \
}
GBFLOW_WALK_PAGES(predict_pages_binned_1, unsigned char)
GBFLOW_WALK_PAGES(predict_pages_binned_4, unsigned int)
GBFLOW_WALK_PAGES(predict_pages_binned_8, u64)

// ---------------------------------------------------------------------------------------------
// Level plans (see the "Level plans" section of numpy_kernels.py): one block each over a level's
// slots, so that a tree's levels follow each other on the device without the host reading the
// split results in between. Block size: a multiple of 32.

// Exclusive prefix sum over the block of one value per thread (every thread calls it), plus
// *carry; then *carry grows by the block's total. warp_sums: shared, 32 entries.
__device__ i64 block_exclusive_scan(i64 value, i64* warp_sums, i64* carry) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    i64 x = value;
    for (int o = 1; o < 32; o <<= 1) {
        i64 y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    i64 before = *carry, total = 0;
    for (int i = 0; i < n_warps; ++i) {
        if (i < warp) before += warp_sums[i];
        total += warp_sums[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) *carry += total;
    __syncthreads();
    return before + x - value;
}

extern "C" __global__ void plan_level(
        const i64* n_parent_split, i64 half, i64 cap, const double* gain, const int* feature,
        const int* bin_threshold, const bool* default_left, const i64* left_sum,
        const i64* totals, double min_gain, i64* n_split, i64* split_node, int* split_feature,
        int* split_threshold, bool* split_default_left, bool* built_left, double* split_gain,
        i64* child_totals, bool* is_leaf) {
    __shared__ i64 warp_sums[32];
    __shared__ i64 carry;
    if (threadIdx.x == 0) carry = 0;
    __syncthreads();
    i64 n_parent = *n_parent_split;
    for (i64 base = 0; base < cap; base += blockDim.x) {
        i64 k = base + threadIdx.x;
        bool holds = k < cap && (k % half) < n_parent;
        bool split = holds && feature[k] >= 0 && gain[k] > min_gain;
        i64 j = block_exclusive_scan(split ? 1 : 0, warp_sums, &carry);
        if (k < cap) is_leaf[k] = holds && !split;
        if (split) {
            i64 lg = left_sum[2 * k], lh = left_sum[2 * k + 1];
            i64 rg = totals[2 * k] - lg, rh = totals[2 * k + 1] - lh;
            bool is_left = lh <= rh;
            split_node[j] = k;
            split_feature[j] = feature[k];
            split_threshold[j] = bin_threshold[k];
            split_default_left[j] = default_left[k];
            split_gain[j] = gain[k];
            built_left[j] = is_left;
            child_totals[2 * j] = is_left ? rg : lg;
            child_totals[2 * j + 1] = is_left ? rh : lh;
            child_totals[2 * (cap + j)] = is_left ? lg : rg;
            child_totals[2 * (cap + j) + 1] = is_left ? lh : rh;
        }
    }
    i64 n = carry;  // final after the scan's last barrier
    for (i64 j = n + threadIdx.x; j < cap; j += blockDim.x) {
        split_node[j] = 0;
        split_feature[j] = 0;
        split_threshold[j] = 0;
        split_default_left[j] = false;
        split_gain[j] = 0.0;
        built_left[j] = false;
        child_totals[2 * j] = 0;
        child_totals[2 * j + 1] = 0;
        child_totals[2 * (cap + j)] = 0;
        child_totals[2 * (cap + j) + 1] = 0;
    }
    if (threadIdx.x == 0) *n_split = n;
}

extern "C" __global__ void level_segments(
        i64 n_rows, i64 half, i64 cap, const i64* n_parent_split, const i64* parent_split_start,
        const i64* parent_split_count, const i64* left_count, const bool* parent_built_left,
        const i64* n_split, const i64* split_node, i64 rows_per_block, i64 max_blocks,
        i64* seg_start, i64* seg_count, i64* split_start, i64* split_count, i64* work,
        i64* n_work) {
    __shared__ i64 warp_sums[32];
    __shared__ i64 carry;
    if (threadIdx.x == 0) carry = 0;
    i64 n_parent = half == 0 ? 1 : *n_parent_split;
    for (i64 k = threadIdx.x; k < cap; k += blockDim.x) {
        i64 start = 0, count = 0;
        if (half == 0) {
            count = k == 0 ? n_rows : 0;
        } else if (k % half < n_parent) {
            i64 j = k % half;
            i64 left = left_count[j];
            bool child_is_left = parent_built_left[j] == (k >= half);
            start = child_is_left ? parent_split_start[j] : parent_split_start[j] + left;
            count = child_is_left ? left : parent_split_count[j] - left;
        }
        seg_start[k] = start;
        seg_count[k] = count;
    }
    __syncthreads();  // the segments above are read below by other threads (global memory)
    i64 n = *n_split;
    for (i64 base = 0; base < cap; base += blockDim.x) {
        i64 i = base + threadIdx.x;
        i64 start = 0, count = 0;
        if (i < n) {
            start = seg_start[split_node[i]];
            count = seg_count[split_node[i]];
        }
        i64 blocks = (count + rows_per_block - 1) / rows_per_block;
        i64 first = block_exclusive_scan(blocks, warp_sums, &carry);
        if (i < cap) {
            split_start[i] = start;
            split_count[i] = count;
        }
        for (i64 b = 0; b < blocks; ++b) {
            i64* w = work + WORK_WIDTH * (first + b);
            i64 begin = start + b * rows_per_block;
            w[0] = i;
            w[1] = begin;
            w[2] = min(begin + rows_per_block, start + count);
            w[3] = first;
            w[4] = start;
        }
    }
    i64 total = carry;
    for (i64 r = total + threadIdx.x; r < max_blocks; r += blockDim.x)
        for (int c = 0; c < WORK_WIDTH; ++c) work[WORK_WIDTH * r + c] = 0;
    if (threadIdx.x == 0) *n_work = total;
}

// ---------------------------------------------------------------------------------------------
// A planned tree's margins, queued after its levels (nothing read back): numpy_kernels'
// leaf_weights, add_planned_leaf_values and add_planned_split_values. Grid (slots, blocks per
// slot): block (k, b) walks slot k's segment with a stride of gridDim.y blocks.

__device__ __forceinline__ double leaf_weight(const i64* sums, double inv_scale_g,
                                              double inv_scale_h, double lambda_, double alpha,
                                              double learning_rate, double max_delta_step) {
    double G = (double)sums[0] * inv_scale_g, H = (double)sums[1] * inv_scale_h;
    double t = l1_threshold(G, alpha);
    double denominator = H + lambda_;
    double w = denominator > 0 ? -t / denominator : 0.0;
    if (max_delta_step != 0.0 && fabs(w) > max_delta_step) w = copysign(max_delta_step, w);
    return w * learning_rate;
}

extern "C" __global__ void add_planned_leaf_values(
        double* margin, i64 margin_stride, const int* row_index, const i64* seg_start,
        const i64* seg_count, const bool* is_leaf, const i64* totals, double inv_scale_g,
        double inv_scale_h, double lambda_, double alpha, double learning_rate,
        double max_delta_step) {
    i64 k = blockIdx.x;
    if (!is_leaf[k]) return;
    double v = leaf_weight(totals + 2 * k, inv_scale_g, inv_scale_h, lambda_, alpha,
                           learning_rate, max_delta_step);
    i64 end = seg_start[k] + seg_count[k];
    for (i64 p = seg_start[k] + (i64)blockIdx.y * blockDim.x + threadIdx.x; p < end;
         p += (i64)gridDim.y * blockDim.x)
        margin[(i64)row_index[p] * margin_stride] += v;
}

extern "C" __global__ void add_planned_split_values(
        double* margin, i64 margin_stride, const BIN_T* bins_by_feature, i64 feature_stride,
        i64 row_stride,
        const int* row_index, const i64* split_start, const i64* split_count,
        const i64* n_split, const int* split_feature, const int* split_threshold,
        const bool* split_default_left, const bool* built_left, const i64* child_totals,
        i64 child_half, double inv_scale_g, double inv_scale_h, double lambda_, double alpha,
        double learning_rate, double max_delta_step) {
    i64 j = blockIdx.x;
    if (j >= *n_split) return;
    double built = leaf_weight(child_totals + 2 * (child_half + j), inv_scale_g, inv_scale_h,
                               lambda_, alpha, learning_rate, max_delta_step);
    double sibling = leaf_weight(child_totals + 2 * j, inv_scale_g, inv_scale_h, lambda_,
                                 alpha, learning_rate, max_delta_step);
    double left = built_left[j] ? built : sibling, right = built_left[j] ? sibling : built;
    int f = split_feature[j], t = split_threshold[j];
    bool dl = split_default_left[j];
    i64 end = split_start[j] + split_count[j];
    for (i64 p = split_start[j] + (i64)blockIdx.y * blockDim.x + threadIdx.x; p < end;
         p += (i64)gridDim.y * blockDim.x) {
        int row = row_index[p];
        margin[(i64)row * margin_stride] +=
            goes_left(bins_by_feature, feature_stride, row_stride, row, f, t, dl, nullptr) ? left
                                                                                       : right;
    }
}

// ---------------------------------------------------------------------------------------------
// Explaining predictions (numpy_kernels' section of that name): one thread per row walks every
// tree or path in order and owns its row of out, so the float64 operations and their order are
// the twin's (no atomics). MAX_PATH (the most features on one path) sizes the per-thread
// polynomial arrays; it is a compile-time constant of the module (cuda_kernels._explain_kernel).

extern "C" __global__ void predict_leaves(
        const float* X, i64 n_rows, i64 row_stride, i64 col_stride, const int* feature,
        const float* threshold, const bool* default_left, const int* left, const i64* tree_root,
        int n_trees, int* out, const int* cat_start, const unsigned* cat_bits,
        int has_categories) {
    for (i64 row = blockIdx.x * (i64)blockDim.x + threadIdx.x; row < n_rows;
         row += (i64)gridDim.x * blockDim.x) {
        const float* values = X + row * row_stride;
        for (int t = 0; t < n_trees; ++t) {
            i64 node = tree_root[t];
            while (feature[node] >= 0) {
                node = node_left(values, col_stride, node, feature, threshold, default_left,
                                 cat_start, cat_bits, has_categories) ? left[node]
                                                                      : left[node] + 1;
            }
            out[row * n_trees + t] = (int)(node - tree_root[t]);
        }
    }
}

extern "C" __global__ void saabas_contributions(
        const float* X, i64 n_rows, i64 row_stride, i64 col_stride, const int* feature,
        const float* threshold, const bool* default_left, const int* left, const i64* tree_root,
        const int* tree_group, int n_trees, const double* node_mean, double* out, int n_groups,
        int width, const int* cat_start, const unsigned* cat_bits, int has_categories) {
    for (i64 row = blockIdx.x * (i64)blockDim.x + threadIdx.x; row < n_rows;
         row += (i64)gridDim.x * blockDim.x) {
        const float* values = X + row * row_stride;
        for (int t = 0; t < n_trees; ++t) {
            double* o = out + (row * n_groups + tree_group[t]) * width;
            i64 node = tree_root[t];
            o[width - 1] += node_mean[node];
            while (feature[node] >= 0) {
                i64 child = node_left(values, col_stride, node, feature, threshold,
                                      default_left, cat_start, cat_bits, has_categories)
                    ? left[node] : left[node] + 1;
                o[feature[node]] += node_mean[child] - node_mean[node];
                node = child;
            }
        }
    }
}

#ifndef MAX_PATH
#define MAX_PATH 8
#endif

// The polynomial loops run over every slot up to MAX_PATH with the row's degree as a predicate
// (fully unrolled: the arrays stay in registers instead of local memory); the operations done
// and their order are the twin's. TREE_WORDS > 0: a row's direction at each node of a tree is
// found once per tree (1M rows x 500 depth-8 trees on an H100: 17.3 s, 20.7 s without).

#ifndef TREE_WORDS
#define TREE_WORDS 0
#endif

// A row's direction at every inner node of the tree rooted at ``root`` (``size`` nodes): bit
// (node - root) of ``dirs`` set where it goes left. Each node is tested once per tree, not
// once per path through it (a depth-8 tree's 256 paths hold 2,048 edges over 255 nodes).
__device__ __forceinline__ void tree_directions(const float* values, i64 col_stride, i64 root,
                                                i64 size, const int* feature,
                                                const float* threshold,
                                                const bool* default_left, const int* cat_start,
                                                const unsigned* cat_bits, int has_categories,
                                                unsigned* dirs) {
#pragma unroll
    for (int w = 0; w < (TREE_WORDS > 0 ? TREE_WORDS : 1); ++w) dirs[w] = 0u;
    for (i64 node = 0; node < size; ++node) {
        if (feature[root + node] >= 0 &&
            node_left(values, col_stride, root + node, feature, threshold, default_left,
                      cat_start, cat_bits, has_categories)) {
            dirs[node >> 5] |= 1u << (node & 31);
        }
    }
}

// bit j of the result: whether the row satisfies every edge of element j of path p (from the
// tree's directions when TREE_WORDS > 0, else testing each edge's node)
__device__ __forceinline__ unsigned path_ones(const float* values, i64 col_stride, i64 p,
                                              const int* feature, const float* threshold,
                                              const bool* default_left, const i64* path_ptr,
                                              const i64* elem_ptr, const int* edge_node,
                                              const bool* edge_left, const int* cat_start,
                                              const unsigned* cat_bits, int has_categories,
                                              const unsigned* dirs, i64 root) {
    unsigned one = 0;
    for (i64 k = path_ptr[p]; k < path_ptr[p + 1]; ++k) {
        bool satisfied = true;
        for (i64 e = elem_ptr[k]; e < elem_ptr[k + 1]; ++e) {
            i64 node = edge_node[e];
            bool went_left;
            if (TREE_WORDS > 0) {  // (a compile-time choice)
                went_left = (dirs[(node - root) >> 5] >> ((node - root) & 31)) & 1u;
            } else {
                went_left = node_left(values, col_stride, node, feature, threshold,
                                      default_left, cat_start, cat_bits, has_categories);
            }
            satisfied = satisfied && went_left == edge_left[e];
        }
        one |= (unsigned)satisfied << (k - path_ptr[p]);
    }
    return one;
}

// the directions of the tree of path p, when it is not the tree of the previous path
#define NEXT_TREE(p)                                                                            \
    if (TREE_WORDS > 0 && path_root[p] != root) {                                               \
        root = path_root[p];                                                                    \
        tree_directions(values, col_stride, root, path_tree_size[p], feature, threshold,       \
                        default_left, cat_start, cat_bits, has_categories, dirs);              \
    }

__device__ __forceinline__ void extend_one(double* e, int degree, double z) {
#pragma unroll
    for (int s = MAX_PATH; s > 0; --s) {
        if (s == degree + 1) e[s] = e[s - 1];
        else if (s <= degree) e[s] = e[s] * z + e[s - 1];
    }
    e[0] = e[0] * z;
}

// e = the polynomial of the m elements (from ``zero``) whose bits are set in ``one``; returns
// its degree, and ``rest`` the product of the other elements' fractions (numpy_kernels._extend)
__device__ __forceinline__ int satisfied_polynomial(unsigned one, int m, const double* zero,
                                                    double* e, double* rest) {
    e[0] = 1.0;
    int degree = 0;
    double product = 1.0;
#pragma unroll
    for (int j = 0; j < MAX_PATH; ++j) {
        if (j < m) {
            if ((one >> j) & 1u) {
                extend_one(e, degree, zero[j]);
                degree += 1;
            } else {
                product = product * zero[j];
            }
        }
    }
    *rest = product;
    return degree;
}

__device__ __forceinline__ void unwind(const double* e, int degree, double z, double* q) {
#pragma unroll
    for (int s = MAX_PATH; s > 0; --s) {
        if (s == degree) q[s - 1] = e[s];
        else if (s < degree) q[s - 1] = e[s] - z * q[s];
    }
}

__device__ __forceinline__ double weighted(const double* a, int count, const double* weights) {
    double total = 0.0;
#pragma unroll
    for (int s = 0; s <= MAX_PATH; ++s) {
        if (s < count) total = total + weights[s] * a[s];
    }
    return total;
}

// With ``acc_shared``, a row's (n_groups, width) values are added up in shared memory (each
// thread's own slots, value k at acc[k * blockDim.x + threadIdx.x]) and written to out once: the
// adds of every path would otherwise read and write out in device memory (a million rows' out
// exceeds the L2 cache). Same additions, same order: the same values.
extern "C" __global__ void shap_contributions(
        const float* X, i64 n_rows, i64 row_stride, i64 col_stride, const int* feature,
        const float* threshold, const bool* default_left, const i64* path_ptr,
        const double* path_value, const int* path_group, i64 n_paths, const i64* elem_ptr,
        const int* elem_feature, const double* elem_zero, const int* edge_node,
        const bool* edge_left, const double* shapley_weights, int weights_width, double* out,
        int n_groups, int width, const int* cat_start, const unsigned* cat_bits,
        int has_categories, const i64* path_root, const i64* path_tree_size, int acc_shared) {
    extern __shared__ double acc[];
    unsigned dirs[TREE_WORDS > 0 ? TREE_WORDS : 1];
    double e[MAX_PATH + 1], q[MAX_PATH + 1];
    i64 row_width = (i64)n_groups * width;
    i64 stride = acc_shared ? blockDim.x : 1;
    for (i64 row = blockIdx.x * (i64)blockDim.x + threadIdx.x; row < n_rows;
         row += (i64)gridDim.x * blockDim.x) {
        const float* values = X + row * row_stride;
        double* out_row = out + row * row_width;
        double* sums = acc_shared ? acc + threadIdx.x : out_row;
        if (acc_shared) {
            for (i64 k = 0; k < row_width; ++k) sums[k * stride] = out_row[k];
        }
        i64 root = -1;
        for (i64 p = 0; p < n_paths; ++p) {
            i64 first = path_ptr[p];
            int m = (int)(path_ptr[p + 1] - first);
            double* o = sums + (i64)path_group[p] * width * stride;
            NEXT_TREE(p)
            unsigned one = path_ones(values, col_stride, p, feature, threshold, default_left,
                                     path_ptr, elem_ptr, edge_node, edge_left, cat_start,
                                     cat_bits, has_categories, dirs, root);
            double rest;
            int degree = satisfied_polynomial(one, m, elem_zero + first, e, &rest);
            double c = path_value[p] * rest;
            o[(width - 1) * stride] += c * e[0];
            if (m == 0) continue;
            const double* w = shapley_weights + (i64)m * weights_width;
            double failed = -(c * weighted(e, degree + 1, w));
#pragma unroll
            for (int j = 0; j < MAX_PATH; ++j) {
                if (j < m) {
                    double z = elem_zero[first + j];
                    i64 at = (i64)elem_feature[first + j] * stride;
                    if ((one >> j) & 1u) {
                        unwind(e, degree, z, q);
                        o[at] += (c * (1.0 - z)) * weighted(q, degree, w);
                    } else {
                        o[at] += failed;
                    }
                }
            }
        }
        if (acc_shared) {
            for (i64 k = 0; k < row_width; ++k) out_row[k] = sums[k * stride];
        }
    }
}

extern "C" __global__ void shap_interactions(
        const float* X, i64 n_rows, i64 row_stride, i64 col_stride, const int* feature,
        const float* threshold, const bool* default_left, const i64* path_ptr,
        const double* path_value, const int* path_group, i64 n_paths, const i64* elem_ptr,
        const int* elem_feature, const double* elem_zero, const int* edge_node,
        const bool* edge_left, const double* shapley_weights, int weights_width, double* out,
        int n_groups, int width, const int* cat_start, const unsigned* cat_bits,
        int has_categories, const i64* path_root, const i64* path_tree_size) {
    unsigned dirs[TREE_WORDS > 0 ? TREE_WORDS : 1];
    double e[MAX_PATH + 1], e_i[MAX_PATH + 1], q[MAX_PATH + 1];
    for (i64 row = blockIdx.x * (i64)blockDim.x + threadIdx.x; row < n_rows;
         row += (i64)gridDim.x * blockDim.x) {
        const float* values = X + row * row_stride;
        i64 root = -1;
        for (i64 p = 0; p < n_paths; ++p) {
            i64 first = path_ptr[p];
            int m = (int)(path_ptr[p + 1] - first);
            if (m < 2) continue;
            double* o = out + (row * n_groups + path_group[p]) * (i64)width * width;
            NEXT_TREE(p)
            unsigned one = path_ones(values, col_stride, p, feature, threshold, default_left,
                                     path_ptr, elem_ptr, edge_node, edge_left, cat_start,
                                     cat_bits, has_categories, dirs, root);
            double unused;
            int degree = satisfied_polynomial(one, m, elem_zero + first, e, &unused);
            const double* w = shapley_weights + (i64)(m - 1) * weights_width;
#pragma unroll
            for (int i = 0; i < MAX_PATH; ++i) {
                if (i >= m) continue;
                double z_i = elem_zero[first + i];
                bool one_i = (one >> i) & 1u;
                int degree_i;
                if (one_i) {
                    unwind(e, degree, z_i, e_i);
                    degree_i = degree - 1;
                } else {
#pragma unroll
                    for (int s = 0; s <= MAX_PATH; ++s) {
                        if (s <= degree) e_i[s] = e[s];
                    }
                    degree_i = degree;
                }
                double rest = 1.0;
#pragma unroll
                for (int j = 0; j < MAX_PATH; ++j) {
                    if (j < m && j != i && !((one >> j) & 1u)) rest = rest * elem_zero[first + j];
                }
                double c = path_value[p] * rest;
                double scale = ((one_i ? 1.0 : 0.0) - z_i) * 0.5;
                double failed = -(c * weighted(e_i, degree_i + 1, w));
#pragma unroll
                for (int j = 0; j < MAX_PATH; ++j) {
                    if (j >= m || j == i) continue;
                    double z = elem_zero[first + j];
                    double value;
                    if ((one >> j) & 1u) {
                        unwind(e_i, degree_i, z, q);
                        value = (c * (1.0 - z)) * weighted(q, degree_i, w);
                    } else {
                        value = failed;
                    }
                    o[(i64)elem_feature[first + i] * width + elem_feature[first + j]] +=
                        scale * value;
                }
            }
        }
    }
}
