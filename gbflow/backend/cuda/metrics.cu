// Integer tallies with 64-bit atomics, whose sums do not depend on the order the rows arrive in:
// the evaluation metrics' (see numpy_kernels.auc_tally) and the leaf quantiles' (quantile_tally).

extern "C" __global__ void auc_tally(const long long* bucket, long long bucket_stride,
                                     const double* label, const double* weight, int has_weight,
                                     double scale, long long n_rows, long long n_buckets,
                                     long long* out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long step = (long long)gridDim.x * blockDim.x;
    for (; i < n_rows; i += step) {
        double w = has_weight ? weight[i] * scale : scale;
        long long positive = (long long)rint(w * label[i]);
        long long b = bucket[i * bucket_stride];
        // two's complement: an unsigned 64-bit add is the signed one
        atomicAdd((unsigned long long*)&out[b], (unsigned long long)positive);
        atomicAdd((unsigned long long*)&out[n_buckets + b],
                  (unsigned long long)((long long)rint(w) - positive));
    }
}

// Block sums of integers in shared memory, then one 64-bit atomic a block: exact in any order.
__device__ void add_block_sum(long long value, long long* shared, long long* out) {
    shared[threadIdx.x] = value;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd((unsigned long long*)out, (unsigned long long)shared[0]);
    __syncthreads();
}

// See numpy_kernels.fixed_point_words. scale: a device scalar (scale_on_device) or the value
// given. out: two int64 words, zeroed by the caller. blockDim.x: 256.
extern "C" __global__ void fixed_point_words(const double* values, long long n,
                                             const double* scale_on_device, double scale_given,
                                             int on_device, double low_scale, long long* out) {
    __shared__ long long shared[256];
    double scale = on_device ? *scale_on_device : scale_given;
    long long high_sum = 0, low_sum = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        double scaled = values[i] * scale;
        double high = rint(scaled);
        high_sum += (long long)high;
        low_sum += (long long)rint((scaled - high) * low_scale);
    }
    add_block_sum(high_sum, shared, out);
    add_block_sum(low_sum, shared, out + 1);
}

// One round of the leaf quantiles (numpy_kernels.quantile_tally): a row's weight goes to its
// (group, byte) slot when its higher bytes equal its group's prefix. The rows of a warp that
// share a slot are summed with shuffles first and added by one lane: the first rounds send
// most rows of a group to one slot.
extern "C" __global__ void quantile_tally(const unsigned long long* keys, const long long* groups,
                                          const long long* weights, int has_weights,
                                          const unsigned long long* prefix, int shift,
                                          long long n, long long* table) {
    long long step = (long long)gridDim.x * blockDim.x;
    long long first = (long long)blockIdx.x * blockDim.x;
    for (long long base = first; base < n; base += step) {  // whole warps stay in the loop
        long long i = base + threadIdx.x;
        unsigned long long slot = ~0ull;
        long long w = 0;
        if (i < n) {
            unsigned long long key = keys[i];
            long long g = groups[i];
            if (shift == 56 || (key >> (shift + 8)) == prefix[g]) {
                slot = (unsigned long long)g * 256 + ((key >> shift) & 255);
                w = has_weights ? weights[i] : 1;
            }
        }
        unsigned mask = __match_any_sync(0xffffffffu, slot);
        long long sum = 0;
        for (int lane = 0; lane < 32; ++lane) {
            long long v = __shfl_sync(0xffffffffu, w, lane);
            if (mask & (1u << lane)) sum += v;
        }
        if (slot != ~0ull && (threadIdx.x & 31) == __ffs(mask) - 1)
            atomicAdd((unsigned long long*)&table[slot], (unsigned long long)sum);
    }
}

// The choice after a round of quantile_tally (numpy_kernels.quantile_select): one block of 256
// threads a group scans its slots in shared memory (integer sums: exact), counts the slots whose
// running weight is still below the rank to reach, and thread 0 updates the group's rank and
// prefix. Every thread reads remaining[g] before the count's barrier, thread 0 writes it after.
extern "C" __global__ void quantile_select(const long long* table, long long* remaining,
                                           unsigned long long* prefix) {
    __shared__ long long running[256];
    int g = blockIdx.x, t = threadIdx.x;
    running[t] = table[(long long)g * 256 + t];
    __syncthreads();
    for (int offset = 1; offset < 256; offset *= 2) {
        long long add = t >= offset ? running[t - offset] : 0;
        __syncthreads();
        running[t] += add;
        __syncthreads();
    }
    long long goal = remaining[g];
    int below = __syncthreads_count(running[t] < goal);
    if (t == 0) {
        int byte = below < 255 ? below : 255;
        remaining[g] = goal - (byte > 0 ? running[byte - 1] : 0);
        prefix[g] = (prefix[g] << 8) | (unsigned long long)byte;
    }
}
