"""A Dask(-cuDF) pipeline with an evaluation set and early stopping: gbflow against xgboost.dask.

    python benchmarks/eval_pipeline.py                  # LocalCUDACluster, 4M rows from Parquet
    python benchmarks/eval_pipeline.py --gpus 2         # two GPUs, one worker each
    python benchmarks/eval_pipeline.py --cpu --rows 200000 --rounds 20   # smoke test on CPU

The shape of the job users run: raw loan applications (``examples/pipeline.py``'s generator) land
in Parquet; Dask reads them (cuDF partitions on GPUs), derives features of mixed dtypes (int8,
int32, int64, float64, with missing values), and splits the rows 80/20 by id into a training and
an evaluation frame (4M rows: 3.2M and 0.8M), both persisted before any timing. On the same
frames, each library trains three ways: without an evaluation set, with it and
``eval_metric=["logloss", "auc"]`` every round, and with early stopping (``--stop`` rounds) on
the last metric. Timed: gbflow's ``gbflow.train(ddf, ...)``; XGBoost's ``DaskQuantileDMatrix``
construction (the evaluation one with ``ref=``) plus ``xgb.dask.train``. Both warmed up first on
a slice. Printed: seconds, rounds, best round and score, gbflow's evaluation stage against its
training time, and the workers' peak device memory (gbflow's worker report: NVML on GPUs).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from pipeline import FEATURES, features, make_applications  # noqa: E402

LABEL = "default"


def start(args):
    from distributed import Client, LocalCluster
    if args.cpu:
        return Client(LocalCluster(n_workers=args.gpus, threads_per_worker=max(
            1, (os.cpu_count() or 1) // args.gpus), processes=True, dashboard_address=":0"))
    from dask_cuda import LocalCUDACluster
    return Client(LocalCUDACluster(CUDA_VISIBLE_DEVICES=",".join(map(str, range(args.gpus))),
                                   dashboard_address=":0"))


class DevicePeak:
    """The most GPU memory in use on any of ``n`` GPUs above what each held at the start (NVML,
    sampled every 5 ms from this process: the LocalCUDACluster's workers run on this host)."""

    def __init__(self, n: int, active: bool):
        self.n, self.active, self.peak = n, active, 0

    def __enter__(self):
        if not self.active:
            return self
        import pynvml
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.n)]

        def used():
            return [pynvml.nvmlDeviceGetMemoryInfo(h).used for h in handles]
        base, self._stop = used(), False

        def sample():
            while not self._stop:
                self.peak = max([self.peak] + [u - b for u, b in zip(used(), base)])
                time.sleep(0.005)
        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.active:
            self._stop = True
            self._thread.join()


def frames(args, folder):
    """The persisted training and evaluation frames (features and label only)."""
    import dask
    import dask.dataframe as dd
    per_part = -(-args.rows // args.partitions)
    raw = dd.from_map(make_applications, range(args.partitions), rows=per_part,
                      meta=make_applications(0, 0))
    raw.to_parquet(f"{folder}/raw", write_index=False)
    with dask.config.set({"dataframe.backend": "pandas" if args.cpu else "cudf"}):
        table = features(dd.read_parquet(f"{folder}/raw"))
    table = table.assign(has_history=table["has_history"].astype("int8"))
    held_out = table["application_id"] % 5 == 0
    columns = FEATURES + [LABEL]
    train, valid = table[~held_out][columns], table[held_out][columns]
    return train.persist(), valid.persist()


def run_gbflow(train, valid, params, rounds, stop, mode):
    import gbflow
    evals = [] if mode == "none" else [(valid, "valid")]
    start = time.perf_counter()
    booster = gbflow.train(train, label=LABEL, params=params, num_boost_round=rounds,
                           evals=evals, early_stopping_rounds=stop if mode == "stop" else None,
                           verbose=False)
    seconds = time.perf_counter() - start
    history = booster.evals_result.get("valid", {})
    timings = booster.timings
    evaluation = timings.get("evaluation", 0.0)
    share = 100 * evaluation / max(seconds - evaluation, 1e-9)
    note = (f"evaluation {evaluation:.2f} s = {share:.1f}% of the rest; " if evals else "") + \
        ", ".join(f"{k} {v:.2f}" for k, v in timings.items() if k != "total")
    return seconds, len(next(iter(history.values()), [])) or booster.num_boosted_rounds(), \
        booster.best_iteration, booster.best_score, note


def run_xgboost(client, train, valid, params, rounds, stop, mode):
    import xgboost as xgb
    import xgboost.dask  # noqa: F401  (xgb.dask)
    start = time.perf_counter()
    X, y = train[FEATURES], train[LABEL]
    dtrain = xgb.dask.DaskQuantileDMatrix(client, X, y, max_bin=params["max_bin"])
    evals = [] if mode == "none" else [(xgb.dask.DaskQuantileDMatrix(
        client, valid[FEATURES], valid[LABEL], ref=dtrain, max_bin=params["max_bin"]), "valid")]
    xgb_params = {**params, "tree_method": "hist"}
    out = xgb.dask.train(client, xgb_params, dtrain, rounds, evals=evals,
                         early_stopping_rounds=stop if mode == "stop" else None,
                         verbose_eval=False)
    seconds = time.perf_counter() - start
    booster, history = out["booster"], out["history"].get("valid", {})
    best = booster.best_iteration if mode == "stop" else None
    score = booster.best_score if mode == "stop" else None
    return seconds, len(next(iter(history.values()), [])) or booster.num_boosted_rounds(), \
        best, score, f"xgboost {xgb.__version__}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=1, help="workers (GPUs; CPUs with --cpu)")
    parser.add_argument("--cpu", action="store_true", help="LocalCluster and pandas partitions")
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--stop", type=int, default=20)
    parser.add_argument("--sparse-threshold", type=float, default=None,
                        help="gbflow's sparse_threshold (default: its own default)")
    parser.add_argument("--no-xgboost", action="store_true")
    args = parser.parse_args()
    client = start(args)
    folder = tempfile.mkdtemp(prefix="gbflow-eval-pipeline-")
    try:
        train, valid = frames(args, folder)
        n_train, n_valid = len(train), len(valid)
        device = "CPU" if args.cpu else client.run(_gpu_name)
        print(f"devices: {device}; {args.gpus} worker(s); {time.strftime('%Y-%m-%d %H:%M')}")
        print(f"data: {n_train:,} training and {n_valid:,} evaluation rows x {len(FEATURES)} "
              f"features ({', '.join(sorted({str(t) for t in train.dtypes}))}) from Parquet, "
              f"{train.npartitions} + {valid.npartitions} partitions; depth {args.depth}, up to "
              f"{args.rounds} rounds, eval_metric logloss+auc, early stopping {args.stop}",
              flush=True)
        params = {"objective": "binary:logistic", "max_depth": args.depth, "learning_rate": 0.1,
                  "max_bin": 256, "eval_metric": ["logloss", "auc"],
                  "device": "cpu" if args.cpu else "cuda"}
        if args.sparse_threshold is not None:
            params["sparse_threshold"] = args.sparse_threshold
        small_train, small_valid = train.partitions[0], valid.partitions[0]
        run_gbflow(small_train, small_valid, params, 2, None, "eval")  # warm-ups
        runners = [("gbflow", lambda mode: run_gbflow(train, valid, params, args.rounds,
                                                      args.stop, mode))]
        if not args.no_xgboost:
            peer = {k: v for k, v in params.items() if k != "sparse_threshold"}
            run_xgboost(client, small_train, small_valid, peer, 2, None, "eval")
            runners.append(("xgboost", lambda mode: run_xgboost(
                client, train, valid, peer, args.rounds, args.stop, mode)))
        for mode in ("none", "eval", "stop"):
            for name, runner in runners:
                with DevicePeak(args.gpus, not args.cpu) as device_memory:
                    seconds, rounds, best, score, note = runner(mode)
                shown = f"  best round {best + 1}, auc {score:.5f}" if best is not None else ""
                memory = f"  peak GPU memory {device_memory.peak / 2**30:.2f} GiB" \
                    if not args.cpu else ""
                print(f"{mode:5s} {name:8s} {seconds:7.2f} s  {rounds:4d} rounds{shown}{memory}"
                      f"  ({note})", flush=True)
    finally:
        client.close()
        shutil.rmtree(folder, ignore_errors=True)


def _gpu_name():
    import cupy
    return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()


if __name__ == "__main__":
    main()
