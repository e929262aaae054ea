// Device code shared by kernels.cu (dense columns) and sparse.cu (sparse columns).
//
// cuda_kernels.py pastes this file in place of `#include "common.cuh"` before handing a source to
// NVRTC (so CuPy's compile cache, keyed on the source text, sees every change to it); nvcc run on
// a .cu file in this directory finds it through the ordinary #include.

#ifndef GBFLOW_COMMON_CUH
#define GBFLOW_COMMON_CUH

typedef long long i64;
typedef unsigned long long u64;

// Shared-memory histograms hold each int64 counter as two 32-bit words (low, high), added with two
// 32-bit atomics: a carry out of the low word goes into the high word, which is integer addition
// mod 2**64, exact and order independent. (A 64-bit shared atomic measured slower on the H200.)
__device__ __forceinline__ void shared_add64(unsigned int* words, i64 value) {
    unsigned int low = static_cast<unsigned int>(value);
    unsigned int high = static_cast<unsigned int>(static_cast<u64>(value) >> 32);
    unsigned int old_low = atomicAdd(words, low);
    high += (old_low + low < old_low) ? 1u : 0u;
    if (high) atomicAdd(words + 1, high);
}

// ---------------------------------------------------------------------------------------------
// Split score (the same float64 operations, in the same order, as numpy_kernels._score) and the
// best candidate of a split search. A candidate's index numbers (feature, threshold, direction)
// in NumPy's flattened order, so "equal gain, smaller index" keeps the first maximum as argmax
// does.

__device__ __forceinline__ double l1_threshold(double G, double alpha) {
    return G > alpha ? G - alpha : (G < -alpha ? G + alpha : 0.0);
}

__device__ __forceinline__ double score(double G, double H, double lambda_, double alpha) {
    double t = l1_threshold(G, alpha);
    return t * t / (H + lambda_);
}

struct Best {
    double gain;
    i64 index;
    i64 left_g, left_h;
};

// XGBoost's bounded weights (max_delta_step, monotone constraints): a node's bounds as the
// split searches read them; bounded 0: the plain gain (score()). The same float64 operations
// as numpy_kernels._bounded_weight and _weight_gain.
struct WeightBounds {
    int bounded;
    double max_delta_step, lower, upper;
};

// Node n's bounds: node_bounds is (n_nodes, 2) [lower, upper], read only when bounded.
__device__ __forceinline__ WeightBounds weight_bounds_of(int bounded, double max_delta_step,
                                                         const double* node_bounds, i64 n) {
    WeightBounds b = {bounded, max_delta_step, 0.0, 0.0};
    if (bounded) { b.lower = node_bounds[2 * n]; b.upper = node_bounds[2 * n + 1]; }
    return b;
}

__device__ __forceinline__ double bounded_weight(double G, double H, double lambda_, double alpha,
                                                 const WeightBounds& b) {
    double w = -l1_threshold(G, alpha) / (H + lambda_);
    if (b.max_delta_step != 0.0 && fabs(w) > b.max_delta_step) w = copysign(b.max_delta_step, w);
    return w < b.lower ? b.lower : (w > b.upper ? b.upper : w);
}

__device__ __forceinline__ double weight_gain(double G, double H, double lambda_, double alpha,
                                              double w) {
    return -(2.0 * (G * w) + (H + lambda_) * (w * w));  // XGBoost's: no L1 term (alpha: in w)
}

// The parent's term of a gain (numpy_kernels._parent_gain).
__device__ __forceinline__ double parent_gain(double GP, double HP, double lambda_, double alpha,
                                              const WeightBounds& b) {
    if (!b.bounded) return score(GP, HP, lambda_, alpha);
    return weight_gain(GP, HP, lambda_, alpha, bounded_weight(GP, HP, lambda_, alpha, b));
}

// Gain of the split whose left child sums to (lg, lh) of the node's (tg, th), with the NumPy
// twin's float operations in its order; -inf where the candidate is not valid (a child's hessian
// below min_child_weight, or H + lambda not positive, or, bounded, its weights out of the order
// sign +1 / -1 asks: left <= right / left >= right).
__device__ __forceinline__ double candidate_gain(i64 lg, i64 lh, i64 tg, i64 th, double parent,
                                                 double inv_scale_g, double inv_scale_h,
                                                 double lambda_, double alpha,
                                                 double min_child_weight, const WeightBounds& b,
                                                 int sign) {
    const double NEG_INF = __longlong_as_double(0xfff0000000000000LL);
    double GL = (double)lg * inv_scale_g, HL = (double)lh * inv_scale_h;
    double GR = (double)(tg - lg) * inv_scale_g, HR = (double)(th - lh) * inv_scale_h;
    if (!(HL >= min_child_weight && HR >= min_child_weight && HL + lambda_ > 0 && HR + lambda_ > 0))
        return NEG_INF;
    if (!b.bounded) return (score(GL, HL, lambda_, alpha) + score(GR, HR, lambda_, alpha)) - parent;
    double WL = bounded_weight(GL, HL, lambda_, alpha, b);
    double WR = bounded_weight(GR, HR, lambda_, alpha, b);
    if ((sign > 0 && WL > WR) || (sign < 0 && WL < WR)) return NEG_INF;
    return (weight_gain(GL, HL, lambda_, alpha, WL) + weight_gain(GR, HR, lambda_, alpha, WR)) -
           parent;
}

__device__ __forceinline__ bool better(double gain, i64 index, const Best& b) {
    return gain > b.gain || (gain == b.gain && index < b.index);
}

__device__ __forceinline__ void shuffle_best(Best& b, int offset) {
    double g = __shfl_down_sync(0xffffffffu, b.gain, offset);
    i64 i = __shfl_down_sync(0xffffffffu, b.index, offset);
    i64 lg = __shfl_down_sync(0xffffffffu, b.left_g, offset);
    i64 lh = __shfl_down_sync(0xffffffffu, b.left_h, offset);
    if (better(g, i, b)) { b.gain = g; b.index = i; b.left_g = lg; b.left_h = lh; }
}


// The sum of the (gradient, hessian) pairs h[2b], h[2b+1] for b in lo..hi-1 over the whole block:
// every thread gets it in (tg, th). The node total of split search: every row sits in one bin of
// feature 0, so its bins add up to the node's sums. Integer adds: exact in any order. blockDim.x
// must be a multiple of 32; parts: __shared__ i64[2][32] scratch of the caller.
__device__ __forceinline__ void block_total(const i64* h, i64 lo, i64 hi, i64 (*parts)[32],
                                            i64& tg, i64& th) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    tg = 0; th = 0;
    for (i64 b = lo + threadIdx.x; b < hi; b += blockDim.x) { tg += h[2 * b]; th += h[2 * b + 1]; }
    for (int o = 16; o > 0; o >>= 1) {
        tg += __shfl_down_sync(0xffffffffu, tg, o);
        th += __shfl_down_sync(0xffffffffu, th, o);
    }
    if (lane == 0) { parts[0][warp] = tg; parts[1][warp] = th; }
    __syncthreads();
    tg = 0; th = 0;
    for (int i = 0; i < n_warps; ++i) { tg += parts[0][i]; th += parts[1][i]; }
}

// The block's best candidate (each thread holds its own in best) written by thread 0 to *out:
// warp shuffles, then thread 0 over the warps' bests. Ties keep the smaller index (better()).
// warp_best: __shared__ Best[32] scratch of the caller.
__device__ __forceinline__ void block_best(Best best, Best* warp_best, Best* out) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) shuffle_best(best, o);
    if (lane == 0) warp_best[warp] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < n_warps; ++i) {
            Best b = warp_best[i];
            if (better(b.gain, b.index, best)) best = b;
        }
        *out = best;
    }
}

#endif  // GBFLOW_COMMON_CUH
