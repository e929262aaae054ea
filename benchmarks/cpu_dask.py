"""CPU benchmark of gbflow on Dask: one Dask worker against in-process training, same data.

    python benchmarks/cpu_dask.py                  # 1,000,000 x 28, depth 6, 100 rounds, 3 repeats
    python benchmarks/cpu_dask.py --rows 200000 --repeat 1
    python benchmarks/cpu_dask.py --workers 2      # the Dask side on 2 workers (cores shared)
    python benchmarks/cpu_dask.py --workers 2 --xgboost   # and xgboost.dask, same frame, same run

Timed:
- in-process: ``gbflow.train(pandas_frame, label="y")``;
- Dask: ``gbflow.train(dask_frame, label="y")`` with a ``distributed.Client`` of one worker
  process (``LocalCluster(processes=True)``, as many threads as the machine has cores: gbflow's
  kernels use the worker's threads) and the
  partitions already in the worker's memory (persisted, untimed: the data lives on the worker).
  It includes what Dask adds: handing the partitions to the task, checking and binning them there,
  the task round trip, returning the model.
- with ``--xgboost``, the peer: ``xgboost.dask`` on the same persisted frame and client
  (``DaskQuantileDMatrix`` built inside the timed span, ``tree_method="hist"``, same depth,
  rounds, learning rate and max_bin).
The runs alternate (in-process, Dask, in-process, ...) and the medians are compared: this machine is
shared and noisy. Both sides' numba kernels are compiled/loaded by untimed warm-up runs, and their
model files are compared (they must be identical).

Then, untimed against in-process, the memory story: the same table built lazily on the worker
(``dd.from_map``, nothing persisted), trained once; the worker's resident memory before, after
binning (raw partitions released) and at its peak, against the raw partitions' size.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_binary import make_data  # noqa: E402  (the F1 benchmark's HIGGS-like problem)


def frame(n_rows: int, n_features: int, seed: int) -> pd.DataFrame:
    X, y = make_data(n_rows, n_features, seed)
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(n_features)])
    df["y"] = y.astype(np.float64)
    return df


def partition(index: int, rows: int, n_features: int, seed: int) -> pd.DataFrame:
    """One partition of the lazily built table (for the memory run)."""
    return frame(rows, n_features, seed * 1000 + index)


def _rss() -> int:
    import psutil
    return psutil.Process().memory_info().rss


def stages(timings: dict) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in timings.items())


def train_xgboost(client, ddf, params: dict, rounds: int):
    """xgboost.dask's hist training on the frame's features and "y" (its quantile matrix
    built here, as gbflow bins inside its train call)."""
    import xgboost as xgb
    import xgboost.dask  # noqa: F401  (a submodule: not imported by xgboost itself)
    features = [c for c in ddf.columns if c != "y"]
    dtrain = xgb.dask.DaskQuantileDMatrix(client, ddf[features], ddf["y"],
                                          max_bin=params["max_bin"])
    return xgb.dask.train(client, {"objective": "binary:logistic", "tree_method": "hist",
                                   "max_depth": params["max_depth"],
                                   "eta": params["learning_rate"], "max_bin": params["max_bin"]},
                          dtrain, num_boost_round=rounds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=28)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--eta", type=float, default=0.1)
    parser.add_argument("--max-bin", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--xgboost", action="store_true",
                        help="also time xgboost.dask on the same frame in the same run")
    args = parser.parse_args()

    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    import gbflow

    params = {"objective": "binary:logistic", "max_depth": args.depth, "learning_rate": args.eta,
              "max_bin": args.max_bin}
    df = frame(args.rows, args.features, args.seed)
    print(f"device: CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"Dask: {args.workers} worker process(es) of "
          f"{max(1, (os.cpu_count() or 1) // args.workers)} thread(s) each (gbflow's kernels use "
          f"the worker's threads)")
    print(f"data: {args.rows:,} x {args.features} float32 + label, {args.partitions} partitions "
          f"({df.memory_usage(index=True).sum() / 2**20:.0f} MiB in pandas); depth {args.depth}, "
          f"{args.rounds} rounds, eta {args.eta}, max_bin {args.max_bin}")
    threads = max(1, (os.cpu_count() or 1) // args.workers)
    with LocalCluster(n_workers=args.workers, threads_per_worker=threads, processes=True,
                      dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        small = df.iloc[:2000]
        gbflow.train(small, label="y", params=params, num_boost_round=2, verbose=False)
        gbflow.train(dd.from_pandas(small, npartitions=2), label="y", params=params,
                     num_boost_round=2, verbose=False)  # loads the kernels in the worker(s)
        ddf = client.persist(dd.from_pandas(df, npartitions=args.partitions))
        sides = ("in-process", "dask") + (("xgboost.dask",) if args.xgboost else ())
        if args.xgboost:
            train_xgboost(client, dd.from_pandas(small, npartitions=2), params, 2)
        times = {side: [] for side in sides}
        models = {}
        for r in range(args.repeat):
            for side in sides:
                if side == "xgboost.dask":
                    start = time.perf_counter()
                    train_xgboost(client, ddf, params, args.rounds)
                    times[side].append(time.perf_counter() - start)
                    print(f"run {r + 1} {side:10s} {times[side][-1]:6.2f} s", flush=True)
                    continue
                data = df if side == "in-process" else ddf
                start = time.perf_counter()
                booster = gbflow.train(data, label="y", params=params,
                                       num_boost_round=args.rounds, verbose=False)
                seconds = time.perf_counter() - start
                times[side].append(seconds)
                models[side] = booster.to_json()
                rows = "" if side == "in-process" else "   rows per worker " + "/".join(
                    f"{w['rows']:,}" for w in booster.worker_report)
                print(f"run {r + 1} {side:10s} {seconds:6.2f} s   stages (s): "
                      f"{stages(booster.timings)}{rows}", flush=True)
        median = {side: statistics.median(v) for side, v in times.items()}
        print(f"median: in-process {median['in-process']:.2f} s, Dask {median['dask']:.2f} s: "
              f"Dask / in-process = {median['dask'] / median['in-process']:.3f} "
              f"(target <= 1.1); models identical: {models['dask'] == models['in-process']}")
        if args.xgboost:
            print(f"median: xgboost.dask {median['xgboost.dask']:.2f} s: gbflow Dask / "
                  f"xgboost.dask = {median['dask'] / median['xgboost.dask']:.3f}")

        # Memory: a lazily built table, binned where it is computed; gbflow lets the raw
        # partitions go once every worker has binned its share.
        del ddf
        per = -(-args.rows // args.partitions)
        lazy = dd.from_map(partition, range(args.partitions), rows=per,
                           n_features=args.features, seed=args.seed,
                           meta=frame(1, args.features, 0).iloc[:0])
        baseline = client.run(_rss)  # per worker, before the lazy partitions are computed
        booster = gbflow.train(lazy, label="y", params=params, num_boost_round=args.rounds,
                               verbose=False)
        for w in booster.worker_report:
            base = baseline[w["address"]] / 2**20
            mib = {k: w[k] / 2**20 for k in ("raw_bytes", "binned_bytes", "rss_start",
                                              "rss_loaded", "rss_quantized", "peak_rss")}
            print(f"memory, worker {w['rank']} ({w['rows']:,} rows, lazy input): raw partitions "
                  f"{mib['raw_bytes']:.0f} MiB, binned shards {mib['binned_bytes']:.0f} MiB; "
                  f"process RSS {base:.0f} MiB idle, {mib['rss_start']:.0f} MiB holding the "
                  f"computed partitions, {mib['rss_loaded']:.0f} MiB with their checked float32 "
                  f"copies, {mib['rss_quantized']:.0f} MiB once binned, peak "
                  f"{mib['peak_rss']:.0f} MiB = idle + "
                  f"{(mib['peak_rss'] - base) / mib['raw_bytes']:.2f} x raw")
        after = client.run(_rss)
        print("memory after training (raw partitions and shards released): " + ", ".join(
            f"{after[a] / 2**20:.0f} MiB" for a in sorted(after)))


if __name__ == "__main__":
    main()
