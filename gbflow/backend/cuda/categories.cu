// The categorical split search (see numpy_kernels.categorical_splits): one block per (node,
// feature). A sorted-partition feature's eligible categories are sorted in the block by
// (key, category), a total order, so the result does not depend on how the block sorts them;
// one thread then scans the prefixes from both ends, with the twin's float operations.

#include "common.cuh"

// Bitonic sort of n (a power of two) (key, category) pairs, ascending; pairs past the real ones
// hold (+inf, INT_MAX). keys and cats are in shared memory, or in global scratch when too many.
__device__ void sort_pairs(double* keys, int* cats, int n) {
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < n / 2; i += blockDim.x) {
                int lo = 2 * i - (i & (stride - 1));
                int hi = lo + stride;
                bool ascending = (lo & size) == 0;
                bool greater = keys[lo] > keys[hi] || (keys[lo] == keys[hi] && cats[lo] > cats[hi]);
                if (greater == ascending) {
                    double k = keys[lo]; keys[lo] = keys[hi]; keys[hi] = k;
                    int c = cats[lo]; cats[lo] = cats[hi]; cats[hi] = c;
                }
            }
            __syncthreads();
        }
    }
}

struct CategoryBest {
    double gain;
    bool missing_right;
    i64 right_g, right_h;
    int size;
    int direction;  // 0: ascending keys, 1: descending
};

// Both sides of the missing values for a set whose categories sum to (rg, rh): recorded in b
// where better (strictly: the first candidate of a gain wins). A sorted set (not one hot) at a
// node without missing values of the feature: missing right alone (the twin's rule).
__device__ __forceinline__ bool try_set(CategoryBest& b, i64 rg, i64 rh, i64 mg, i64 mh, i64 tg,
                                        i64 th, double parent, double inv_g, double inv_h,
                                        double lam, double alpha, double mcw,
                                        const WeightBounds& wb, bool sorted_set) {
    bool taken = false;
    for (int side = (sorted_set && mg == 0 && mh == 0) ? 1 : 0; side < 2; ++side) {
        i64 g_right = rg + (side ? mg : 0), h_right = rh + (side ? mh : 0);
        double gain = candidate_gain(tg - g_right, th - h_right, tg, th, parent, inv_g, inv_h,
                                     lam, alpha, mcw, wb, 0);
        if (gain > b.gain) {
            b.gain = gain; b.missing_right = side == 1; b.right_g = g_right; b.right_h = h_right;
            taken = true;
        }
    }
    return taken;
}

// The position in the ascending (key, category) order of the i-th category of the descending
// walk: equal keys keep ascending categories (the stable sort of -key). *run_lo/*run_hi carry the
// current run of equal keys between calls; start with *run_lo = n.
__device__ __forceinline__ int descending_at(const double* keys, int n, int* run_lo, int* run_hi,
                                             int* next) {
    if (*next > *run_hi) {  // the run is used up: the next run of equal keys from the end
        int hi = *run_lo - 1;
        int lo = hi;
        while (lo > 0 && keys[lo - 1] == keys[hi]) --lo;
        *run_lo = lo; *run_hi = hi; *next = lo;
    }
    return (*next)++;
}

extern "C" __global__ void categorical_splits(
        const i64* hist, i64 n_features_store, i64 n_bins, const i64* total, const i64* columns,
        const i64* n_categories, int n_features, int onehot, int max_cat_threshold, double inv_g,
        double inv_h, double lam, double alpha, double mcw, double cat_smooth, int bounded,
        double max_delta_step, const double* node_bounds, int capacity,
        double* scratch_keys, int* scratch_cats, const int* scratch_slot, int n_over,
        int scratch_width, double* gain_out,
        bool* missing_right_out, i64* right_sum_out, int* size_out, int* order_out, int width,
        int* n_sorted_out) {
    extern __shared__ unsigned char shared_bytes[];
    __shared__ int n_eligible;
    int task = blockIdx.x, n = task / n_features, j = task % n_features;
    i64 f = columns[j];
    int K = (int)n_categories[j];
    const i64* h = hist + ((i64)n * n_features_store + f) * n_bins * 2;
    i64 tg = total[2 * n], th = total[2 * n + 1];
    i64 mg = h[0], mh = h[1];
    WeightBounds wb = weight_bounds_of(bounded, max_delta_step, node_bounds, n);
    double parent = parent_gain((double)tg * inv_g, (double)th * inv_h, lam, alpha, wb);
    CategoryBest best = {__longlong_as_double(0xfff0000000000000LL), false, 0, 0, 0, 0};
    int* order = order_out + (i64)task * width;
    if (onehot) {
        if (threadIdx.x == 0) {
            int chosen = -1;
            for (int k = 0; k < K; ++k) {
                i64 cg = h[2 * (k + 1)], ch = h[2 * (k + 1) + 1];
                if ((cg != 0 || ch != 0) &&
                    try_set(best, cg, ch, mg, mh, tg, th, parent, inv_g, inv_h, lam, alpha, mcw,
                            wb, false))
                    chosen = k;
            }
            best.size = chosen >= 0 ? 1 : 0;
            order[0] = chosen;
        }
    } else {
        if (threadIdx.x == 0) n_eligible = 0;
        __syncthreads();
        int n_sort = 1;
        while (n_sort < K) n_sort <<= 1;
        double* keys = reinterpret_cast<double*>(shared_bytes);
        int* cats = reinterpret_cast<int*>(shared_bytes + sizeof(double) * capacity);
        if (n_sort > capacity) {  // this feature's scratch row for this node
            i64 row = (i64)n * n_over + scratch_slot[j];
            keys = scratch_keys + row * scratch_width;
            cats = scratch_cats + row * scratch_width;
        }
        // the eligible categories, in any order (the sort's order is total), then padding
        for (int k = threadIdx.x; k < K; k += blockDim.x) {
            i64 cg = h[2 * (k + 1)], ch = h[2 * (k + 1) + 1];
            double H = (double)ch * inv_h;
            if (ch != 0 && H > 0 && H >= cat_smooth) {
                int at = atomicAdd(&n_eligible, 1);
                keys[at] = ((double)cg * inv_g) / (H + cat_smooth);
                cats[at] = k;
            }
        }
        __syncthreads();
        int m = n_eligible;
        if (threadIdx.x == 0) n_sorted_out[task] = m;
        n_sort = 1;
        while (n_sort < m) n_sort <<= 1;
        for (int i = m + threadIdx.x; i < n_sort; i += blockDim.x) {
            keys[i] = __longlong_as_double(0x7ff0000000000000LL);
            cats[i] = 0x7fffffff;
        }
        __syncthreads();
        sort_pairs(keys, cats, n_sort);
        if (threadIdx.x == 0) {
            int P = min(min(K, max_cat_threshold), m - 1);
            for (int direction = 0; direction < 2; ++direction) {
                i64 rg = 0, rh = 0;
                int run_lo = m, run_hi = m - 1, next = m;
                for (int i = 0; i < P; ++i) {
                    int at = direction == 0 ? i : descending_at(keys, m, &run_lo, &run_hi, &next);
                    int k = cats[at];
                    rg += h[2 * (k + 1)];
                    rh += h[2 * (k + 1) + 1];
                    if (try_set(best, rg, rh, mg, mh, tg, th, parent, inv_g, inv_h, lam, alpha,
                                mcw, wb, true)) {
                        best.size = i + 1;
                        best.direction = direction;
                    }
                }
            }
            int run_lo = m, run_hi = m - 1, next = m;
            for (int i = 0; i < width; ++i) {
                int at = -1;
                if (i < best.size)
                    at = best.direction == 0 ? i
                                             : descending_at(keys, m, &run_lo, &run_hi, &next);
                order[i] = at >= 0 ? cats[at] : -1;
            }
        }
    }
    if (threadIdx.x == 0) {
        gain_out[task] = best.gain;
        missing_right_out[task] = best.size > 0 && best.missing_right;
        right_sum_out[2 * task] = best.size > 0 ? best.right_g : 0;
        right_sum_out[2 * task + 1] = best.size > 0 ? best.right_h : 0;
        size_out[task] = best.size;
    }
}
