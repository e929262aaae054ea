"""GPU benchmark: gbflow (device="cuda") vs XGBoost (device="cuda", tree_method="hist"), same data.

Same data, same run, same GPU: the ratios are what count (shared machines are noisy).

    python benchmarks/gpu_binary.py                      # the issue's four cases
    python benchmarks/gpu_binary.py --case higgs         # one case: higgs, higgs64, epsilon, small
    python benchmarks/gpu_binary.py --rows 1000000 --features 28 --depth 8 --rounds 100
    python benchmarks/gpu_binary.py --no-xgboost         # gbflow alone

The data is generated on the GPU (CuPy) and handed to both libraries as CuPy arrays. Train time
includes each library's own quantization (gbflow's sketch + binning, XGBoost's QuantileDMatrix)
and excludes data generation. Both are warmed up first (CUDA module load, kernel compilation) on
a slice, untimed (gbflow's large enough for its sketch's kernels). Peak GPU memory is the
device's used memory sampled every 2 ms by NVML during training, minus what was in use before
(the data itself), so the two are comparable.
"""
from __future__ import annotations

import argparse
import threading
import time

import numpy as np

CASES = {  # name: rows, features, depth, rounds, max_bin
    "higgs": (10_000_000, 28, 8, 500, 256),
    "higgs64": (10_000_000, 28, 8, 500, 64),
    "epsilon": (400_000, 2000, 8, 200, 256),
    "small": (10_000, 28, 6, 100, 256),
}


def make_data(cp, n_rows: int, n_features: int, seed: int):
    """A HIGGS-like binary problem on the GPU: nonlinear logit over correlated Gaussians."""
    rng = cp.random.default_rng(seed)
    mix = rng.standard_normal((n_features, n_features), dtype=cp.float32) / np.sqrt(n_features)
    X = rng.standard_normal((n_rows, n_features), dtype=cp.float32) @ \
        (cp.eye(n_features, dtype=cp.float32) + 0.5 * mix)
    w = rng.standard_normal(n_features, dtype=cp.float32)
    logit = (X @ w) * 0.3 + cp.sin(2 * X[:, 0]) * X[:, 1] + 0.5 * (X[:, 2] > 0.3) * X[:, 3] \
        - 0.4 * X[:, 4] ** 2 + 0.8 * cp.tanh(X[:, 5] * X[:, 6])
    y = (rng.random(n_rows, dtype=cp.float32) < 1 / (1 + cp.exp(-logit))).astype(cp.float32)
    return cp.ascontiguousarray(X), y


class PeakMemory:
    """Samples the GPU's used memory (NVML) in a thread; ``peak`` is the most above the start."""

    def __init__(self):
        import pynvml
        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.peak = 0

    def _used(self):
        return self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used

    def __enter__(self):
        self._base, self.peak, self._stop = self._used(), 0, False

        def sample():
            while not self._stop:
                self.peak = max(self.peak, self._used() - self._base)
                time.sleep(0.002)
        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop = True
        self._thread.join()
        self.peak = max(self.peak, self._used() - self._base)


def auc(y, p):
    from gbflow.metrics import auc as _auc
    return _auc(np.asarray(y, dtype=np.float64), np.asarray(p, dtype=np.float64))


def free_gpu_memory(cp):
    cp.get_default_memory_pool().free_all_blocks()


def warm_rows(X, least: int = 5000) -> int:
    """Rows of X for gbflow's untimed warm-up: enough for the sketch's passes where the data
    takes them (its kernels compile at first use, seconds on a fresh machine, which the first
    timed run would pay otherwise), at least ``least``, at most all of X."""
    from gbflow.sketch.direct import DIRECT_VALUES
    return min(len(X), max(least, DIRECT_VALUES // X.shape[1] + 1))


def run_gbflow(cp, X, y, Xt, yt, depth, rounds, max_bin):
    import gbflow
    params = {"objective": "binary:logistic", "max_depth": depth, "learning_rate": 0.1,
              "max_bin": max_bin, "device": "cuda"}
    warm = warm_rows(X)
    gbflow.train(X[:warm], y[:warm], params=params, num_boost_round=2, verbose=False)  # warm-up
    free_gpu_memory(cp)
    with PeakMemory() as memory:
        cp.cuda.Device().synchronize()
        start = time.perf_counter()
        booster = gbflow.train(X, y, params=params, num_boost_round=rounds, verbose=False)
        cp.cuda.Device().synchronize()
        seconds = time.perf_counter() - start
    prediction = cp.asnumpy(booster.predict(Xt))
    stages = ", ".join(f"{k} {v:.2f}s" for k, v in booster.timings.items() if k != "total")
    del booster
    free_gpu_memory(cp)
    return seconds, auc(cp.asnumpy(yt), prediction), memory.peak, stages


def run_xgboost(cp, X, y, Xt, yt, depth, rounds, max_bin):
    import xgboost as xgb
    params = {"objective": "binary:logistic", "max_depth": depth, "eta": 0.1, "device": "cuda",
              "tree_method": "hist", "max_bin": max_bin}
    xgb.train(params, xgb.QuantileDMatrix(X[:5000], y[:5000], max_bin=max_bin), 2)  # warm-up
    with PeakMemory() as memory:
        start = time.perf_counter()
        d = xgb.QuantileDMatrix(X, y, max_bin=max_bin)
        booster = xgb.train(params, d, rounds)
        booster.predict(xgb.DMatrix(X[:10]))  # XGBoost trains lazily: make sure it finished
        seconds = time.perf_counter() - start
    prediction = booster.inplace_predict(Xt)
    del d, booster
    free_gpu_memory(cp)
    return seconds, auc(cp.asnumpy(yt), cp.asnumpy(prediction)), memory.peak, \
        f"xgboost {xgb.__version__}"


def run_case(cp, name, rows, features, depth, rounds, max_bin, with_xgboost, test_rows):
    X, y = make_data(cp, rows + test_rows, features, seed=rows + features)
    X, Xt, y, yt = X[:rows], X[rows:], y[:rows], y[rows:]
    X, Xt = cp.ascontiguousarray(X), cp.ascontiguousarray(Xt)
    print(f"\n== {name}: {rows:,} x {features} train, {test_rows:,} test, depth {depth}, "
          f"{rounds} rounds, max_bin {max_bin}", flush=True)
    results = {}
    runners = [("gbflow", run_gbflow)] + ([("xgboost", run_xgboost)] if with_xgboost else [])
    for label, runner in runners:
        seconds, score, peak, note = runner(cp, X, y, Xt, yt, depth, rounds, max_bin)
        results[label] = (seconds, score, peak)
        print(f"{label:8s} {seconds:8.2f} s  {1000 * seconds / rounds:7.2f} ms/round  "
              f"AUC {score:.5f}  peak GPU memory {peak / 2**30:6.2f} GiB  ({note})", flush=True)
    if "xgboost" in results:
        g, x = results["gbflow"], results["xgboost"]
        print(f"ratio    gbflow/xgboost time {g[0] / x[0]:.2f}x, AUC difference "
              f"{g[1] - x[1]:+.5f}, memory {g[2] / max(x[2], 1):.2f}x", flush=True)
    del X, Xt, y, yt
    free_gpu_memory(cp)
    return results


def main():
    import cupy as cp
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), action="append")
    parser.add_argument("--rows", type=int)
    parser.add_argument("--features", type=int, default=28)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--max-bin", type=int, default=256)
    parser.add_argument("--test-rows", type=int, default=500_000)
    parser.add_argument("--no-xgboost", action="store_true")
    args = parser.parse_args()
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"device: {props['name'].decode()}, {props['multiProcessorCount']} SMs, "
          f"{props['totalGlobalMem'] / 2**30:.0f} GiB; CuPy {cp.__version__}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    if args.rows:
        cases = {"custom": (args.rows, args.features, args.depth, args.rounds, args.max_bin)}
    else:
        cases = {name: CASES[name] for name in (args.case or list(CASES))}
    summary = []
    for name, (rows, features, depth, rounds, max_bin) in cases.items():
        test_rows = min(args.test_rows, max(rows // 5, 2000))
        results = run_case(cp, name, rows, features, depth, rounds, max_bin,
                           not args.no_xgboost, test_rows)
        summary.append((name, results))
    print("\nsummary (seconds, AUC):")
    for name, results in summary:
        print(f"  {name:8s} " + "  ".join(f"{k} {v[0]:.2f}s {v[1]:.5f}"
                                          for k, v in results.items()))


if __name__ == "__main__":
    main()
