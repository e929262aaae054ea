// gbflow's CUDA kernels for sparse columns: entry binning, compact histograms, common-bin fill,
// compact split search, split-column gather, prediction on CSR input.
//
// Compiled at first use by cuda_kernels.py through cupy.RawKernel (NVRTC) with --fmad=false, like
// kernels.cu, one module per (bin width, feature id width): BIN_T = unsigned char or unsigned
// short, FEATURE_T = short or int (the sparse store's entry_feature, int16 while S <= 32767), both
// -D options. FEATURE_T types only the store's ids (build_sparse_histograms, split_column);
// bin_entries and predict_margins_csr read a CSR's column ids, always int.
// The NumPy twins in numpy_kernels.py ("Sparse columns") are the definitions.
//
// Memory layout (shared with the NumPy twins):
//   indptr           (n_rows + 1,) int64; row r's stored entries at indptr[r] .. indptr[r+1]-1
//   entry_feature    (nnz,) FEATURE_T sparse-local feature ids 0..S-1, ascending within a row
//   entry_bin        (nnz,) BIN_T bin ids (never the feature's common bin)
//   bin_offsets      (S + 1,) int64; feature s owns slots bin_offsets[s] .. bin_offsets[s+1]-1
//   common_bin       (S,) int32, the bin of every row that has no entry in feature s
//   hist             (n_nodes, n_slots, 2) int64 compact histograms, slot = bin_offsets[s] + bin
//   gh               (n_rows, 2) int64 fixed-point [gradient, hessian]
//   row_index        (n_rows,) int32, each node owning one contiguous segment
//   work             (n_blocks, 5) int64 work list, as in kernels.cu: one row per thread block,
//                    [node, begin, end, first_block_of_node, seg_start_of_node]
//
// Every histogram sum is an integer sum, so the order in which rows, blocks or atomics land does
// not change any result; float64 work (split gains, margins) is done by one thread in the twin's
// order. Every kernel here is deterministic.

#include "common.cuh"

#define WORK_WIDTH 5

#ifndef FEATURE_T
#define FEATURE_T int
#endif

// First position e in [lo, hi) with keys[e] >= key (keys ascending), else hi. K: int for a CSR's
// column ids, FEATURE_T for the sparse store's ids; keys[mid] is promoted to int to compare.
template <typename K>
__device__ __forceinline__ i64 lower_bound(const K* keys, i64 lo, i64 hi, int key) {
    while (lo < hi) {
        i64 mid = (lo + hi) >> 1;
        if (keys[mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// ---------------------------------------------------------------------------------------------
// bin_entries: one thread per entry (grid-stride). out[e] = 0 for NaN, else 1 + (number of
// feature entry_feature[e]'s cuts <= value), by binary search over the feature's cuts. Its
// entry_feature is a CSR's global column ids (int), not the store's FEATURE_T ids.
extern "C" __global__ void bin_entries(const float* values, i64 nnz, const int* entry_feature,
                                       const float* cut_values, const i64* cut_offsets,
                                       BIN_T* out) {
    for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < nnz;
         e += (i64)gridDim.x * blockDim.x) {
        float x = values[e];
        BIN_T id = 0;
        if (!isnan(x)) {
            int f = entry_feature[e];
            i64 first = cut_offsets[f], lo = first, hi = cut_offsets[f + 1];
            while (lo < hi) {  // first cut > x
                i64 mid = (lo + hi) >> 1;
                if (cut_values[mid] <= x) lo = mid + 1; else hi = mid;
            }
            id = (BIN_T)(1 + (lo - first));
        }
        out[e] = id;
    }
}

// ---------------------------------------------------------------------------------------------
// build_sparse_histograms: one block per work item (a chunk of one node's segment), one thread
// per row position; a thread adds its row's gradient pair to the slot of each of the row's stored
// entries. With use_shared, the block first accumulates the node's whole compact histogram in
// shared memory (slot s, component c at words 4s + 2c, 4s + 2c + 1: see shared_add64), then adds
// its non-zero counters into hist[node] with 64-bit global atomics; otherwise every entry goes
// straight to global memory (unsigned 64-bit atomicAdd of two's-complement values is exact
// integer addition). Either way hist is added to, never overwritten: the caller zeroes it, or
// passes one level array that several shards accumulate into. Common bins are not touched:
// fill_common_bins sets them. With split_left (not null), the work list covers split nodes'
// segments after their partition (left child first) and each block keeps the positions of its
// node's built child only: [start, start + split_left[node]) where built_left[node], else the
// rest; the left counts stay on the device (no wait for the partition).
extern "C" __global__ void build_sparse_histograms(
        const i64* indptr, const FEATURE_T* entry_feature, const BIN_T* entry_bin,
        const i64* bin_offsets, const i64* gh, const int* row_index, const i64* work,
        i64 n_slots, int use_shared, const i64* split_left, const unsigned char* built_left,
        i64* hist) {
    extern __shared__ unsigned int words[];
    const i64* w = work + WORK_WIDTH * blockIdx.x;
    i64 node = w[0], begin = w[1], end = w[2];
    if (split_left != nullptr) {
        i64 middle = w[4] + split_left[node];
        if (built_left[node]) end = min(end, middle); else begin = max(begin, middle);
    }
    u64* hist_node = reinterpret_cast<u64*>(hist + node * n_slots * 2);
    if (use_shared) {
        for (i64 i = threadIdx.x; i < 4 * n_slots; i += blockDim.x) words[i] = 0;
        __syncthreads();
    }
    for (i64 p = begin + threadIdx.x; p < end; p += blockDim.x) {
        i64 row = row_index[p];
        i64 g = gh[2 * row], h = gh[2 * row + 1];
        i64 e_end = indptr[row + 1];
        for (i64 e = indptr[row]; e < e_end; ++e) {
            // the id (short or int) only indexes bin_offsets: the slot arithmetic is i64
            i64 slot = bin_offsets[entry_feature[e]] + entry_bin[e];
            if (use_shared) {
                shared_add64(words + 4 * slot, g);
                shared_add64(words + 4 * slot + 2, h);
            } else {
                atomicAdd(hist_node + 2 * slot, static_cast<u64>(g));
                atomicAdd(hist_node + 2 * slot + 1, static_cast<u64>(h));
            }
        }
    }
    if (use_shared) {
        __syncthreads();
        for (i64 i = threadIdx.x; i < 2 * n_slots; i += blockDim.x) {
            u64 v = static_cast<u64>(words[2 * i]) | (static_cast<u64>(words[2 * i + 1]) << 32);
            if (v != 0) atomicAdd(hist_node + i, v);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// fill_common_bins: one thread per (node, feature), features fastest (grid-stride). The thread
// sums its feature's slots (the common one included, as the twin does; it holds 0 after
// build_sparse_histograms) and writes total - sum into the common slot. Features own disjoint
// slot ranges, so no two threads touch the same counter.
extern "C" __global__ void fill_common_bins(i64* hist, i64 n_nodes, i64 n_slots, int n_features,
                                            const i64* totals, const i64* bin_offsets,
                                            const int* common_bin) {
    i64 n = n_nodes * n_features;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n;
         i += (i64)gridDim.x * blockDim.x) {
        i64 node = i / n_features;
        int s = (int)(i - node * n_features);
        i64* h = hist + node * n_slots * 2;
        i64 lo = bin_offsets[s], hi = bin_offsets[s + 1];
        // u64: wrap-around like NumPy's int64 instead of signed-overflow undefined behaviour
        u64 sg = 0, sh = 0;
        for (i64 b = lo; b < hi; ++b) { sg += (u64)h[2 * b]; sh += (u64)h[2 * b + 1]; }
        i64 c = lo + common_bin[s];
        h[2 * c] = (i64)((u64)totals[2 * node] - sg);
        h[2 * c + 1] = (i64)((u64)totals[2 * node + 1] - sh);
    }
}

// ---------------------------------------------------------------------------------------------
// evaluate_sparse_splits: grid (n_nodes, feature blocks), one thread per (node, feature).
// The block first sums feature 0's slots into the node total (every row sits in one bin of every
// feature once the common bins are filled; the twin takes feature 0's too). Thread f then scans
// its own feature's bins in order, as evaluate_splits does on the twin's padded histogram of
// width padded_bins: thresholds t = 1 .. min(n_value_bins[f], padded_bins - 1), bins past the
// feature's own width counting as 0; both missing directions per threshold (only missing right
// at t = n_value_bins[f]: the present-versus-missing split, kept with the missing side as its
// left child), the same float64 operations as kernels.cu's evaluate_splits. A candidate's index is its place in the padded
// (feature, threshold, direction) order, so reduce_splits (kernels.cu, called with
// n_bins = padded_bins) decodes it and the smallest index wins ties, like NumPy's argmax. The
// block's best goes to partial[node, blockIdx.y].
extern "C" __global__ void evaluate_sparse_splits(
        const i64* hist, i64 n_slots, int n_features, const i64* bin_offsets,
        const int* n_value_bins, const bool* feature_allowed, i64 allowed_stride,
        int padded_bins,
        double inv_scale_g, double inv_scale_h, double lambda_, double alpha,
        double min_child_weight, int bounded, double max_delta_step, const double* node_bounds,
        const signed char* monotone, Best* partial) {
    __shared__ i64 total_parts[2][32];
    __shared__ Best warp_best[32];
    const i64* h_node = hist + (i64)blockIdx.x * n_slots * 2;
    i64 tg, th;  // the node total, from feature 0's bins (filled in)
    block_total(h_node, bin_offsets[0], bin_offsets[1], total_parts, tg, th);
    double GP = (double)tg * inv_scale_g, HP = (double)th * inv_scale_h;
    WeightBounds wb = weight_bounds_of(bounded, max_delta_step, node_bounds, blockIdx.x);
    double parent = parent_gain(GP, HP, lambda_, alpha, wb);
    const double NEG_INF = __longlong_as_double(0xfff0000000000000LL);
    Best best = {NEG_INF, 0x7fffffffffffffffLL, 0, 0};
    int f = blockIdx.y * blockDim.x + threadIdx.x;
    if (f < n_features && feature_allowed[blockIdx.x * allowed_stride + f]) {
        const i64* hf = h_node + 2 * bin_offsets[f];
        int width = (int)(bin_offsets[f + 1] - bin_offsets[f]);
        int nvb = n_value_bins[f];
        int sign = bounded == 2 ? monotone[f] : 0;  // 2: bounds and monotone constraints
        int t_last = min(nvb, padded_bins - 1);
        i64 miss_g = width > 0 ? hf[0] : 0, miss_h = width > 0 ? hf[1] : 0;
        i64 cg = 0, ch = 0;
        for (int t = 1; t <= t_last; ++t) {
            if (t < width) { cg += hf[2 * t]; ch += hf[2 * t + 1]; }
            // 0: missing goes left, 1: missing goes right (alone without missing values
            // here, as kernels.cu's evaluate_splits)
            for (int d = (t == nvb || (miss_g == 0 && miss_h == 0)) ? 1 : 0; d < 2; ++d) {
                i64 lg = d == 0 ? cg + miss_g : cg, lh = d == 0 ? ch + miss_h : ch;
                double gain = candidate_gain(lg, lh, tg, th, parent, inv_scale_g, inv_scale_h,
                                             lambda_, alpha, min_child_weight, wb,
                                             t == nvb ? 0 : sign);  // present vs missing: free
                if (gain == NEG_INF) continue;  // not a valid candidate
                i64 index = ((i64)f * (padded_bins - 1) + (t - 1)) * 2 + d;
                if (better(gain, index, best)) {
                    best.gain = gain; best.index = index;
                    best.left_g = t == nvb ? tg - lg : lg;
                    best.left_h = t == nvb ? th - lh : lh;
                }
            }
        }
    }
    block_best(best, warp_best, &partial[(i64)blockIdx.x * gridDim.y + blockIdx.y]);
}

// ---------------------------------------------------------------------------------------------
// split_column: one block per work item, one thread per row position of the listed segments.
// Node k's rows get their bin of the node's split feature: a dense feature's from
// bins_by_feature (element (d, row) at d * feature_stride + row * row_stride), a sparse
// feature's by binary search among the row's
// entries (features ascending), else the feature's common bin. Rows outside the listed segments
// are not written.
extern "C" __global__ void split_column(
        const BIN_T* bins_by_feature, i64 feature_stride, i64 row_stride, const i64* indptr,
        const FEATURE_T* entry_feature, const BIN_T* entry_bin, const int* common_bin,
        const int* row_index, const i64* work, const int* dense_feature,
        const int* sparse_feature, BIN_T* out) {
    const i64* w = work + WORK_WIDTH * blockIdx.x;
    i64 node = w[0], begin = w[1], end = w[2];
    int d = dense_feature[node];
    if (d >= 0) {
        const BIN_T* column = bins_by_feature + (i64)d * feature_stride;
        for (i64 p = begin + threadIdx.x; p < end; p += blockDim.x) {
            int row = row_index[p];
            out[row] = column[(i64)row * row_stride];
        }
    } else {
        int s = sparse_feature[node];
        BIN_T common = (BIN_T)common_bin[s];
        for (i64 p = begin + threadIdx.x; p < end; p += blockDim.x) {
            int row = row_index[p];
            i64 hi = indptr[row + 1];
            i64 e = lower_bound(entry_feature, indptr[row], hi, s);  // s < S: fits FEATURE_T
            out[row] = (e < hi && (int)entry_feature[e] == s) ? entry_bin[e] : common;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// predict_margins_csr: one thread per row (grid-stride) walks every tree in tree order and adds
// the leaf value to out[row, group] (out (n_rows, n_groups) float64, row-major): the same float64
// additions in the same order as the twin. A node's feature value is found by binary search
// among the row's column ids; an absent entry (or a stored NaN) is missing.
extern "C" __global__ void predict_margins_csr(
        const i64* indptr, i64 n_rows, const int* indices, const float* data, const int* feature,
        const float* threshold, const bool* default_left, const int* left, const int* right,
        const double* value, const i64* tree_root, const int* tree_group, int n_trees,
        double* out, int n_groups) {
    for (i64 row = blockIdx.x * (i64)blockDim.x + threadIdx.x; row < n_rows;
         row += (i64)gridDim.x * blockDim.x) {
        i64 lo = indptr[row], hi = indptr[row + 1];
        for (int t = 0; t < n_trees; ++t) {
            i64 node = tree_root[t];
            int f;
            while ((f = feature[node]) >= 0) {
                i64 e = lower_bound(indices, lo, hi, f);
                bool present = e < hi && indices[e] == f;
                float x = present ? data[e] : 0.0f;
                bool go_left = (!present || isnan(x)) ? default_left[node] : x < threshold[node];
                node = go_left ? left[node] : right[node];
            }
            out[row * n_groups + tree_group[t]] += value[node];
        }
    }
}
