// Evaluation metrics' kernels (see numpy_kernels.auc_tally): integer tallies with 64-bit atomics,
// whose sums do not depend on the order the rows arrive in.

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
