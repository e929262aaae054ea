"""Leaf budgets: gbflow against XGBoost with max_leaves and grow_policy, same data, same run.

    python benchmarks/grow_policy.py                          # GPU, 10M x 28, 100 rounds
    python benchmarks/grow_policy.py --rows 10000             # small data
    python benchmarks/grow_policy.py --device cpu --rows 200000 --rounds 30
    python benchmarks/grow_policy.py --setting lossguide:255:0 --setting depthwise:0:8
    python benchmarks/grow_policy.py --no-xgboost            # gbflow alone

Each setting is policy:max_leaves:max_depth (0: none); the default ones are lossguide with 255
and 63 leaves and no depth limit, depthwise with 127 leaves under depth 8, and plain depth 8 for
reference. The data is gpu_binary.py's HIGGS-like binary problem (generated with NumPy on the
CPU). Time includes each library's quantization; both are warmed up on a slice first. Printed per
setting: seconds, ms per round, held-out AUC, peak device memory above the data (NVML, GPU),
gbflow's stage timers and the leaves per tree of both.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from gpu_binary import PeakMemory, auc, free_gpu_memory, make_data, warm_rows

SETTINGS = ["lossguide:255:0", "lossguide:63:0", "depthwise:127:8", "depthwise:0:8"]


def _params(setting: str) -> dict:
    policy, leaves, depth = setting.split(":")
    return {"objective": "binary:logistic", "learning_rate": 0.1, "grow_policy": policy,
            "max_leaves": int(leaves), "max_depth": int(depth)}


def run_gbflow(params, X, y, Xt, yt, args, sync):
    import gbflow
    params = dict(params, device=args.device)
    warm = warm_rows(X)
    gbflow.train(X[:warm], y[:warm], params, 2, verbose=False)  # warm-up
    sync()
    start = time.perf_counter()
    booster = gbflow.train(X, y, params, args.rounds, verbose=False)
    sync()
    seconds = time.perf_counter() - start
    leaves = np.mean([(t.feature < 0).sum() for t in booster.trees])
    stages = ", ".join(f"{k} {v:.2f}s" for k, v in booster.timings.items() if k != "total")
    return seconds, booster.predict(Xt), leaves, stages


def run_xgboost(params, X, y, Xt, yt, args, sync):
    import xgboost as xgb
    params = dict(params, device=args.device, tree_method="hist")
    xgb.train(params, xgb.QuantileDMatrix(X[:5000], y[:5000]), 2)  # warm-up
    sync()
    start = time.perf_counter()
    booster = xgb.train(params, xgb.QuantileDMatrix(X, y), args.rounds)
    booster.predict(xgb.DMatrix(X[:10]))  # XGBoost trains lazily: make sure it finished
    sync()
    seconds = time.perf_counter() - start
    leaves = np.mean([dump.count("leaf=") for dump in booster.get_dump()])
    return seconds, booster.inplace_predict(Xt), leaves, f"xgboost {xgb.__version__}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--features", type=int, default=28)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--setting", action="append", help="policy:max_leaves:max_depth")
    parser.add_argument("--no-xgboost", action="store_true")
    args = parser.parse_args()
    gpu = args.device == "cuda"
    test_rows = min(500_000, max(args.rows // 5, 2000))
    if gpu:
        import cupy as xp
        name = xp.cuda.runtime.getDeviceProperties(0)["name"].decode()
        X, y = make_data(xp, args.rows + test_rows, args.features, seed=3)

        def sync():
            xp.cuda.Device().synchronize()
    else:
        name = f"CPU, {os.cpu_count()} cores"
        X, y = make_data(np, args.rows + test_rows, args.features, seed=3)

        def sync():
            pass
    X, Xt, y, yt = X[: args.rows], X[args.rows:], y[: args.rows], y[args.rows:]
    yt_host = np.asarray(yt.get() if gpu else yt, dtype=np.float64)
    print(f"device: {name}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"data: {args.rows:,} x {args.features} training, {test_rows:,} test rows; "
          f"{args.rounds} rounds, learning rate 0.1, max_bin 256")
    for setting in args.setting or SETTINGS:
        params = _params(setting)
        row = {}
        runners = [("gbflow", run_gbflow)] + ([] if args.no_xgboost else
                                              [("xgboost", run_xgboost)])
        for library, runner in runners:
            if gpu:
                free_gpu_memory(xp)
                with PeakMemory() as memory:
                    seconds, p, leaves, note = runner(params, X, y, Xt, yt, args, sync)
                peak = memory.peak / 2**30
            else:
                (seconds, p, leaves, note), peak = runner(params, X, y, Xt, yt, args, sync), 0.0
            p = np.asarray(p.get() if hasattr(p, "get") else p, dtype=np.float64)
            row[library] = seconds
            print(f"{setting:16s} {library:8s} {seconds:7.2f} s "
                  f"{1000 * seconds / args.rounds:8.2f} ms/round  AUC {auc(yt_host, p):.5f}  "
                  f"leaves/tree {leaves:6.1f}  peak {peak:5.2f} GiB  ({note})", flush=True)
        if "xgboost" in row:
            print(f"{setting:16s} ratio    {row['gbflow'] / row['xgboost']:.2f}x", flush=True)


if __name__ == "__main__":
    main()
