// LambdaMART's pair sums (numpy_kernels.lambda_pairs, its twin): the same operations in the
// same order, compiled without FMA contraction, so the bits agree with the host's.

struct PairTerms {
    double grad;  // of the lower place
    double curvature;
    double push;
};

__device__ PairTerms lambda_pair(const double* y, const double* s, const double* e,
                                 const double* gain, const double* discount,
                                 const double* inv_ideal, const double* relevant,
                                 const double* acc, long long q, long long first, long long last,
                                 int kind, int score_normalize, long long a, long long b) {
    PairTerms out = {0.0, 0.0, 0.0};
    double y_top = y[a], y_low = y[b];
    if (y_top == y_low) return out;
    double delta;
    if (kind == 0) {
        delta = fabs((gain[a] - gain[b]) * (discount[a - first] - discount[b - first])) *
                inv_ideal[q];
    } else if (kind == 1) {
        double r_h = (double)(a - first) + 1.0, r_l = (double)(b - first) + 1.0;
        double between = acc[b - 1] - acc[a];
        double change;
        if (y_top < y_low) {
            change = relevant[b] / r_l - (relevant[a] + 1.0) / r_h - between;
        } else {
            change = relevant[a] / r_h - relevant[b] / r_l + between;
        }
        delta = fabs(change / relevant[last]);
    } else {
        delta = 1.0;
    }
    if (score_normalize && s[first] != s[last]) delta = delta / (fabs(s[a] - s[b]) + 0.01);
    long long high = y_top > y_low ? a : b, low = y_top > y_low ? b : a;
    double total = e[high] + e[low];
    double sig;
    if (total > 0.0) {
        sig = e[high] / total;
    } else if (s[high] > s[low]) {
        sig = 1.0;
    } else if (s[high] < s[low]) {
        sig = 0.0;
    } else {
        sig = 0.5;
    }
    double push = (1.0 - sig) * delta;
    double curvature = fmax(sig * (1.0 - sig), 1e-16) * delta * 2.0;
    out.grad = y_top > y_low ? push : -push;
    out.curvature = curvature;
    out.push = push;
    return out;
}

// One thread a place b: its pairs with the top places above it.
extern "C" __global__ void lambda_own(const double* y, const double* s, const double* e,
                                      const double* gain, const double* discount,
                                      const double* inv_ideal, const double* relevant,
                                      const double* acc, const long long* starts,
                                      const long long* query_of, long long n, int kind,
                                      long long top_k, int score_normalize, double* own) {
    for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < n;
         b += (long long)gridDim.x * blockDim.x) {
        long long q = query_of[b], first = starts[q], last = starts[q + 1] - 1;
        long long stop = first + top_k < b ? first + top_k : b;
        double g = 0.0, h = 0.0, p = 0.0;
        for (long long a = first; a < stop; ++a) {
            PairTerms t = lambda_pair(y, s, e, gain, discount, inv_ideal, relevant, acc, q,
                                      first, last, kind, score_normalize, a, b);
            g += t.grad;
            h += t.curvature;
            p += t.push;
        }
        own[3 * b] = g;
        own[3 * b + 1] = h;
        own[3 * b + 2] = p;
    }
}

// One thread a (query, top place i): its pairs with the places below it.
extern "C" __global__ void lambda_top(const double* y, const double* s, const double* e,
                                      const double* gain, const double* discount,
                                      const double* inv_ideal, const double* relevant,
                                      const double* acc, const long long* starts,
                                      long long n_queries, int kind, long long top_k,
                                      int score_normalize, double* top) {
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n_queries * top_k;
         t += (long long)gridDim.x * blockDim.x) {
        long long q = t / top_k, i = t % top_k;
        long long first = starts[q], end = starts[q + 1];
        double g = 0.0, h = 0.0;
        for (long long b = first + i + 1; b < end; ++b) {
            PairTerms p = lambda_pair(y, s, e, gain, discount, inv_ideal, relevant, acc, q,
                                      first, end - 1, kind, score_normalize, first + i, b);
            g -= p.grad;
            h += p.curvature;
        }
        top[2 * t] = g;
        top[2 * t + 1] = h;
    }
}

// XGBoost's ranking auc's pair counts (numpy_kernels.pair_order_counts, its twin): one thread a
// place b, 2 for each earlier place of its segment with a larger value, 1 for an equal finite
// one.
extern "C" __global__ void pair_order_counts(const float* values, const long long* starts,
                                             const long long* query_of, long long n,
                                             long long* out) {
    for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < n;
         b += (long long)gridDim.x * blockDim.x) {
        float v = values[b];
        int finite = isfinite(v);
        long long count = 0;
        for (long long a = starts[query_of[b]]; a < b; ++a) {
            float u = values[a];
            count += u > v ? 2 : ((u == v && finite) ? 1 : 0);
        }
        out[b] = count;
    }
}
