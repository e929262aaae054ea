"""GPU benchmark on Dask: gbflow against xgboost.dask on a LocalCUDACluster, same data, same run.

    python benchmarks/gpu_dask.py                       # 10,000,000 x 28, depth 8, 500 rounds,
                                                        # then 10,000 rows, 100 rounds
    python benchmarks/gpu_dask.py --rows 1000000 --rounds 100 --skip-small
    python benchmarks/gpu_dask.py --cpu --rows 20000 --rounds 10   # smoke test of this script on
                                                                   # a CPU LocalCluster

Both libraries train on the same persisted Dask(-cuDF) partitions (one LocalCUDACluster worker per
GPU; the partitions are generated on the GPUs and persisted before any timing). Timed:
- gbflow: ``gbflow.train(ddf, label="y")`` (its per-partition quantization included);
- XGBoost: ``xgb.dask.DaskQuantileDMatrix`` construction plus ``xgb.dask.train``.
Both are warmed up first (CUDA contexts, kernel compilation) by a small untimed run. Test AUC is
computed on held-out partitions with each library's Dask prediction.

Needs a CUDA machine with RAPIDS (cudf, dask_cudf, dask_cuda), CuPy and xgboost with CUDA; it
ran on one and two H200s on 2026-11-22 (numbers in docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import os
import platform
import time


def make_partition(index: int, rows: int, n_features: int, seed: int, gpu: bool):
    """One partition of a HIGGS-like binary problem, generated on the worker (GPU or CPU)."""
    if gpu:
        import cudf as frames
        import cupy as xp
    else:
        import numpy as xp
        import pandas as frames
    rng = xp.random.default_rng([seed, index]) if not gpu else xp.random.default_rng(
        seed * 100_003 + index)
    mix_rng = xp.random.default_rng(2026)  # the same problem in every partition and table
    mix = mix_rng.standard_normal((n_features, n_features)) / n_features ** 0.5
    X = (rng.standard_normal((rows, n_features)) @ (xp.eye(n_features) + 0.5 * mix))
    X = X.astype(xp.float32)
    w = mix_rng.standard_normal(n_features)
    logit = (X @ w) * 0.3 + xp.sin(2 * X[:, 0]) * X[:, 1] + 0.5 * (X[:, 2] > 0.3) * X[:, 3] \
        - 0.4 * X[:, 4] ** 2 + 0.8 * xp.tanh(X[:, 5] * X[:, 6])
    y = (rng.random(rows) < 1 / (1 + xp.exp(-logit))).astype(xp.float32)
    frame = frames.DataFrame(X, columns=[f"f{i}" for i in range(n_features)])  # one copy
    frame["y"] = y
    return frame


def table(client, rows: int, n_features: int, partitions: int, seed: int, gpu: bool):
    import dask.dataframe as dd
    per = -(-rows // partitions)
    meta = make_partition(0, 1, n_features, seed, gpu).iloc[:0]
    ddf = dd.from_map(make_partition, range(partitions), rows=per, n_features=n_features,
                      seed=seed, gpu=gpu, meta=meta)
    ddf = client.persist(ddf)
    from distributed import wait
    wait(ddf)
    return ddf


def auc(label, prediction) -> float:
    import numpy as np

    from gbflow.metrics import auc as _auc
    return _auc(np.asarray(label, dtype=np.float64), np.asarray(prediction, dtype=np.float64))


def host(series):
    return series.to_numpy() if hasattr(series, "to_numpy") else series.get()


def run_gbflow(client, train, test, args, rounds: int):
    import gbflow
    params = {"objective": "binary:logistic", "max_depth": args.depth, "learning_rate": args.eta,
              "max_bin": args.max_bin, "device": "cpu" if args.cpu else "cuda"}
    start = time.perf_counter()
    booster = gbflow.train(train, label="y", params=params, num_boost_round=rounds,
                           verbose=False)
    seconds = time.perf_counter() - start
    result = test[["y"]].assign(p=booster.predict(test.drop(columns="y"))).compute()
    if not args.cpu:
        result = result.to_pandas()
    stages = ", ".join(f"{k} {v:.2f}" for k, v in booster.timings.items())
    for report in booster.worker_report:  # each worker's task, stage by stage
        stages += (f"\n      rank {report['rank']} ({report['transport']}): " + ", ".join(
            f"{k} {v:.2f}" for k, v in report["stages"].items())
            + f"; communication {report['communication_seconds']:.2f}")
    return seconds, auc(result["y"], result["p"]), stages


def run_xgboost(client, train, test, args, rounds: int):
    import xgboost as xgb
    import xgboost.dask  # noqa: F401  (not imported by "import xgboost")
    params = {"objective": "binary:logistic", "max_depth": args.depth, "eta": args.eta,
              "tree_method": "hist", "max_bin": args.max_bin,
              "device": "cpu" if args.cpu else "cuda"}
    start = time.perf_counter()
    dtrain = xgb.dask.DaskQuantileDMatrix(client, train.drop(columns="y"), train["y"],
                                          max_bin=args.max_bin)
    output = xgb.dask.train(client, params, dtrain, num_boost_round=rounds)
    seconds = time.perf_counter() - start
    prediction = xgb.dask.predict(client, output["booster"], test.drop(columns="y"))
    result = test[["y"]].assign(p=prediction).compute()
    if not args.cpu:
        result = result.to_pandas()
    return seconds, auc(result["y"], result["p"]), f"xgboost {xgb.__version__}"


def start_client(args):
    from distributed import Client, LocalCluster
    if args.cpu:
        return Client(LocalCluster(n_workers=args.workers or 2, threads_per_worker=1,
                                   dashboard_address=":0"))
    from dask_cuda import LocalCUDACluster
    cluster = LocalCUDACluster(n_workers=args.workers) if args.workers else LocalCUDACluster()
    return Client(cluster)


def devices(client, cpu: bool) -> str:
    if cpu:
        return f"CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores"

    def name():
        import cupy
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        return props["name"].decode() if isinstance(props["name"], bytes) else props["name"]

    names = client.run(name)
    return ", ".join(f"{a}: {n}" for a, n in sorted(names.items()))


def case(client, args, rows: int, rounds: int, label: str):
    n_workers = len(client.nthreads())
    partitions = max(1, args.partitions_per_worker * n_workers)
    train = table(client, rows, args.features, partitions, args.seed, not args.cpu)
    test = table(client, max(rows // 5, 1000), args.features, partitions, args.seed + 1,
                 not args.cpu)
    print(f"\n{label}: train {rows:,} x {args.features} in {partitions} partitions on "
          f"{n_workers} worker(s); depth {args.depth}, {rounds} rounds, eta {args.eta}, "
          f"max_bin {args.max_bin}", flush=True)
    results = {}
    for name, runner in (("gbflow", run_gbflow), ("xgboost", run_xgboost)):
        seconds, score, info = runner(client, train, test, args, rounds)
        results[name] = (seconds, score)
        print(f"  {name:8s} train {seconds:8.2f} s   test AUC {score:.5f}   ({info})", flush=True)
    g, x = results["gbflow"], results["xgboost"]
    print(f"  gbflow / xgboost.dask: time x{g[0] / x[0]:.2f}, AUC {g[1] - x[1]:+.5f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--features", type=int, default=28)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--eta", type=float, default=0.1)
    parser.add_argument("--max-bin", type=int, default=256)
    parser.add_argument("--workers", type=int, default=0, help="GPUs to use (default: all)")
    parser.add_argument("--partitions-per-worker", type=int, default=4)
    parser.add_argument("--small-rows", type=int, default=10_000)
    parser.add_argument("--small-rounds", type=int, default=100)
    parser.add_argument("--skip-small", action="store_true")
    parser.add_argument("--cpu", action="store_true",
                        help="smoke-test this script on a CPU LocalCluster (pandas partitions)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    client = start_client(args)
    print(f"devices: {devices(client, args.cpu)}")
    warm = argparse.Namespace(**{**vars(args), "depth": 2})
    case_train = table(client, 4000, args.features, 2, 99, not args.cpu)
    for runner in (run_gbflow, run_xgboost):  # CUDA contexts, kernels: untimed
        runner(client, case_train, case_train, warm, 2)
    case(client, args, args.rows, args.rounds, "large")
    if not args.skip_small:
        case(client, args, args.small_rows, args.small_rounds, "small")
    client.close()


if __name__ == "__main__":
    main()
