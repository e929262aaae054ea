"""Evaluation-set cost: training with and without an evaluation set, gbflow and XGBoost, same run.

    python benchmarks/evaluation.py --device cuda                 # 10M x 28 + 1M eval, 500 rounds
    python benchmarks/evaluation.py --device cpu --rows 200000 --eval-rows 200000 --rounds 100
    python benchmarks/evaluation.py --device cpu --rows 10000 --eval-rows 10000 --rounds 100

Per library, the same data and parameters (binary:logistic, depth 8 unless --depth, learning rate
0.1) trained three ways: without evaluation, with an evaluation set and ``--metrics`` every round,
and with early stopping (``--stop`` rounds) on it (``--repeat``: that many times in turn, the
median seconds shown). Reports seconds, the overhead of evaluation
against training without it (the ratio is what counts: machines are noisy), gbflow's stage
timers, and the peak device memory (GPU: NVML, above the data; CPU: the process's peak RSS
growth). Both libraries are warmed up first on a slice, untimed. XGBoost: ``QuantileDMatrix``
for training (its quantization timed with training, as gbflow's is) and a ``DMatrix`` built on
the training one's cuts (``ref=``) for the evaluation set, timed too.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time

import numpy as np
from gpu_binary import make_data, warm_rows  # the same HIGGS-like problem (NumPy or CuPy)


class PeakMemory:
    """Peak device memory above the start: NVML's used memory on the GPU (``gpu_binary``'s
    sampler); the process's peak RSS growth on the CPU (ru_maxrss: only growth beyond the
    earlier peak)."""

    def __init__(self, gpu: bool):
        import gpu_binary
        self.peak, self._nvml = 0, gpu_binary.PeakMemory() if gpu else None

    def __enter__(self):
        if self._nvml is not None:
            self._nvml.__enter__()
        self._base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return self

    def __exit__(self, *exc):
        if self._nvml is not None:
            self._nvml.__exit__(*exc)
            self.peak = self._nvml.peak
        else:
            self.peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - self._base


def run_gbflow(xp, sync, data, params, rounds, metrics, stop, gpu):
    import gbflow
    X, y, Xv, yv = data
    params = {**params, "eval_metric": metrics, "device": "cuda" if gpu else "cpu"}
    # warm-up (compilation, CUDA modules) on enough rows for the sketch's passes where the
    # data takes them: the first run timed otherwise pays their kernels' compilation
    warm = warm_rows(X)
    gbflow.train(X[:warm], y[:warm], params, 2, evals=[((Xv[:5000], yv[:5000]), "valid")],
                 verbose=False)
    results = {}
    for mode in ("none", "eval", "stop"):
        evals = [] if mode == "none" else [((Xv, yv), "valid")]
        sync()
        with PeakMemory(gpu) as memory:
            start = time.perf_counter()
            booster = gbflow.train(X, y, params, rounds, evals=evals,
                                   early_stopping_rounds=stop if mode == "stop" else None,
                                   verbose=False)
            sync()
            seconds = time.perf_counter() - start
        history = booster.evals_result.get("valid", {})
        note = ", ".join(f"{k} {v:.2f}" for k, v in booster.timings.items() if k != "total")
        results[mode] = (seconds, memory.peak, len(next(iter(history.values()), [])),
                         {k: v[-1] for k, v in history.items()}, booster.best_iteration, note)
        del booster
    return results


def run_xgboost(xp, sync, data, params, rounds, metrics, stop, gpu):
    import xgboost as xgb
    X, y, Xv, yv = data
    params = {**params, "eval_metric": metrics, "device": "cuda" if gpu else "cpu",
              "tree_method": "hist"}
    warm = xgb.QuantileDMatrix(X[:5000], y[:5000], max_bin=params["max_bin"])
    xgb.train(params, warm, 2, evals=[(xgb.DMatrix(Xv[:5000], yv[:5000]), "valid")],
              verbose_eval=False)
    results = {}
    for mode in ("none", "eval", "stop"):
        history = {}
        sync()
        with PeakMemory(gpu) as memory:
            start = time.perf_counter()
            d = xgb.QuantileDMatrix(X, y, max_bin=params["max_bin"])
            evals = [] if mode == "none" else \
                [(xgb.QuantileDMatrix(Xv, yv, ref=d, max_bin=params["max_bin"]), "valid")]
            booster = xgb.train(params, d, rounds, evals=evals, evals_result=history,
                                early_stopping_rounds=stop if mode == "stop" else None,
                                verbose_eval=False)
            booster.predict(xgb.DMatrix(X[:10]))  # XGBoost trains lazily: make sure it finished
            sync()
            seconds = time.perf_counter() - start
        history = history.get("valid", {})
        best = booster.best_iteration if mode == "stop" else None
        results[mode] = (seconds, memory.peak, len(next(iter(history.values()), [])),
                         {k: v[-1] for k, v in history.items()}, best, f"xgboost {xgb.__version__}")
        del d, evals, booster
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--eval-rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=28)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--metrics", default="auc", help="comma-separated eval_metric")
    parser.add_argument("--stop", type=int, default=20, help="early_stopping_rounds")
    parser.add_argument("--max-bin", type=int, default=256)
    parser.add_argument("--no-xgboost", action="store_true")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each library's three trainings this many times in turn and "
                             "show the median seconds (shared machines are noisy)")
    args = parser.parse_args()
    gpu = args.device == "cuda"
    if gpu:
        import cupy as xp
        props = xp.cuda.runtime.getDeviceProperties(0)
        device = f"{props['name'].decode()}, {props['totalGlobalMem'] / 2**30:.0f} GiB"

        def sync():
            xp.cuda.Device().synchronize()
            xp.get_default_memory_pool().free_all_blocks()
    else:
        import os
        xp, device = np, f"CPU, {os.cpu_count()} cores"

        def sync():
            pass
    X, y = make_data(xp, args.rows + args.eval_rows, args.features, seed=args.rows)
    data = (xp.ascontiguousarray(X[:args.rows]), y[:args.rows],
            xp.ascontiguousarray(X[args.rows:]), y[args.rows:])
    del X, y
    metrics = args.metrics.split(",")
    print(f"device: {device}; Python {sys.version.split()[0]}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"data: {args.rows:,} x {args.features} training, {args.eval_rows:,} evaluation rows; "
          f"depth {args.depth}, {args.rounds} rounds, max_bin {args.max_bin}, eval_metric "
          f"{metrics}, early stopping {args.stop}", flush=True)
    params = {"objective": "binary:logistic", "max_depth": args.depth, "learning_rate": 0.1,
              "max_bin": args.max_bin}
    runners = [("gbflow", run_gbflow)] + ([] if args.no_xgboost else [("xgboost", run_xgboost)])
    for name, runner in runners:
        runs = [runner(xp, sync, data, params, args.rounds, metrics, args.stop, gpu)
                for _ in range(max(1, args.repeat))]
        results = {mode: (float(np.median([r[mode][0] for r in runs])),) + runs[-1][mode][1:]
                   for mode in runs[-1]}
        if len(runs) > 1:
            print(f"{name:8s} seconds of each run: " + "; ".join(
                f"{mode} " + ", ".join(f"{r[mode][0]:.2f}" for r in runs) for mode in results))
        base = results["none"][0]
        for mode, (seconds, peak, n_evals, last, best, note) in results.items():
            overhead = f"{100 * (seconds / base - 1):+6.1f}%" if mode != "none" else "       "
            shown = " ".join(f"{k} {v:.6f}" for k, v in last.items())
            print(f"{name:8s} {mode:5s} {seconds:8.2f} s {overhead}  {n_evals:4d} evaluations  "
                  f"peak {peak / 2**30:6.2f} GiB  {shown}"
                  + (f"  best {best}" if best is not None else "") + f"  ({note})", flush=True)


if __name__ == "__main__":
    main()
