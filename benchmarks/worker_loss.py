"""What losing a worker costs: gbflow's restart against an uninterrupted run, xgboost.dask beside.

    python benchmarks/worker_loss.py     # 300,000 x 28, depth 6, 100 rounds, 3 workers
    python benchmarks/worker_loss.py --rows 1000000 --kill-at 60
    python benchmarks/worker_loss.py --etl-seconds 1   # partitions that take 1 s to compute

On one CPU ``LocalCluster`` of worker processes (``--workers``, one thread each), the same
persisted-from-pandas frame (``dd.from_pandas``: Dask can recompute a lost partition from the
graph), an evaluation set with early stopping off:

1. gbflow uninterrupted (timed, after an untimed warm-up that compiles the kernels);
2. gbflow with one worker SIGKILLed once rank 0 has reported ``--kill-at`` completed rounds: the
   time to the model, the rounds lost, the restart's own cost (the kill to the model less the
   restarted run's boosting, which runs on fewer workers), and the model file compared with
   run 1's (must be equal);
3. xgboost.dask uninterrupted on the same frame, and xgboost.dask with the same kill (what it
   raises, and when).

Prints the device (CPU), the data shape, per-stage seconds and each worker's peak resident memory
(there is no device memory on this path). The nanny restarts a killed worker, so the cluster has
its full size again for the next run.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_binary import make_data  # noqa: E402


def frame(n_rows: int, n_features: int, seed: int) -> pd.DataFrame:
    X, y = make_data(n_rows, n_features, seed)
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    df["y"] = y
    return df


def kill_when(client, known_rounds: dict, at: int, out: dict) -> threading.Thread:
    """SIGKILL the second worker (by address) once ``known_rounds['n']`` reaches ``at``."""
    def run():
        while known_rounds.get("n", 0) < at:
            time.sleep(0.005)
        pids = client.run(os.getpid)
        victim = sorted(pids)[1]
        out.update(victim=victim, at=time.perf_counter(), round=known_rounds["n"])
        os.kill(pids[victim], signal.SIGKILL)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _slow(frame, seconds: float):
    """A partition's pipeline of ``seconds`` (waiting, not computing: the machine stays free)."""
    time.sleep(seconds)
    return frame


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--features", type=int, default=28)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--kill-at", type=int, default=50)
    ap.add_argument("--etl-seconds", type=float, default=0.0,
                    help="seconds each training partition's pipeline takes (a sleep: reading "
                         "and feature engineering elsewhere), paid again when it is recomputed")
    args = ap.parse_args()

    import dask.dataframe as dd
    import distributed

    import gbflow
    from gbflow.dask import rounds as rounds_module
    df = frame(args.rows, args.features, 1)
    valid = frame(args.rows // 4, args.features, 2)
    params = {"objective": "binary:logistic", "max_depth": args.depth, "eval_metric": "auc"}
    print(f"device: CPU ({os.cpu_count()} cores), {args.workers} worker processes x 1 thread; "
          f"data {args.rows:,} x {args.features} (+ {len(valid):,} evaluation rows), depth "
          f"{args.depth}, {args.rounds} rounds; kill one worker after {args.kill_at} rounds; "
          f"{args.etl_seconds:g} s of pipeline a training partition")
    with distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        ddf = dd.from_pandas(df, npartitions=2 * args.workers)
        if args.etl_seconds:
            ddf = ddf.map_partitions(_slow, args.etl_seconds, meta=df.iloc[:0])
        dvalid = dd.from_pandas(valid, npartitions=args.workers)
        kwargs = dict(label="y", params=params, num_boost_round=args.rounds, verbose=False,
                      evals=[(dvalid, "valid")])
        gbflow.train(ddf, **{**kwargs, "num_boost_round": 2})  # compiles the workers' kernels
        t = time.perf_counter()
        whole = gbflow.train(ddf, **kwargs)
        uninterrupted = time.perf_counter() - t
        per_round = uninterrupted / args.rounds
        print(f"gbflow uninterrupted: {uninterrupted:.2f} s ({per_round * 1e3:.1f} ms a round); "
              f"stages of rank 0: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                 whole.worker_report[0]["stages"].items()))
        print("  peak resident memory per worker (MiB): " + ", ".join(
            f"{r['peak_rss'] / 2**20:.0f}" for r in whole.worker_report))

        known, put = {}, rounds_module.KnownRounds.put

        def spy(self, message):
            put(self, message)
            known["n"] = self.rounds
        rounds_module.KnownRounds.put = spy
        client.wait_for_workers(args.workers)
        killed: dict = {}
        t = time.perf_counter()
        killer = kill_when(client, known, args.kill_at, killed)
        restarted = gbflow.train(ddf, **kwargs)
        total = time.perf_counter() - t
        killer.join()
        rounds_module.KnownRounds.put = put
        after = time.perf_counter() - killed["at"]
        expected_after = uninterrupted * (1 - killed["round"] / args.rounds)
        print(f"gbflow with {killed['victim']} killed after round {killed['round']}: model in "
              f"{total:.2f} s ({total - uninterrupted:+.2f} s against uninterrupted); from the "
              f"kill to the model {after:.2f} s where the rounds left took {expected_after:.2f} s"
              f" uninterrupted: the restart cost {after - expected_after:.2f} s "
              f"(= {(after - expected_after) / per_round:.1f} rounds)")
        print(f"  same model file as uninterrupted: {restarted.to_json() == whole.to_json()}; "
              f"restart stages of rank 0: " + ", ".join(
                  f"{k} {v:.2f}" for k, v in restarted.worker_report[0]["stages"].items()))

        print("  restarted run's stage seconds (rank 0): " + ", ".join(
            f"{k} {v:.2f}" for k, v in restarted.timings.items()))
        # With fewer workers the rounds left take another time than they did on all (on a
        # machine of fewer cores than workers, less): the restart's own cost is the time from
        # the kill to the model less the restarted run's boosting (its fit less the binning).
        boosting = restarted.worker_report[0]["stages"]["fit"] - \
            restarted.timings.get("quantize", 0.0)
        print(f"  the restart's own cost: {after - boosting:.2f} s (= "
              f"{(after - boosting) / per_round:.1f} uninterrupted rounds): the kill to the "
              f"model less the restarted run's boosting ({boosting:.2f} s on "
              f"{len(restarted.worker_report)} worker(s)); the partitions computed again in "
              f"{restarted.timings.get('dask_compute', 0.0):.2f} s of it")
        try:
            import xgboost
            import xgboost.dask
        except ImportError:
            print("xgboost.dask: not installed")
            return
        client.wait_for_workers(args.workers)
        xparams = {**params, "tree_method": "hist", "nthread": 1}
        X, y = ddf.drop(columns="y"), ddf["y"]
        dtrain = xgboost.dask.DaskQuantileDMatrix(client, X, y)
        t = time.perf_counter()
        xgboost.dask.train(client, xparams, dtrain, args.rounds)
        print(f"xgboost.dask {xgboost.__version__} uninterrupted: {time.perf_counter() - t:.2f} s")
        pids = client.run(os.getpid)
        threading.Timer(per_round * args.kill_at, lambda: os.kill(
            pids[sorted(pids)[1]], signal.SIGKILL)).start()
        t = time.perf_counter()
        try:
            xgboost.dask.train(client, xparams, dtrain, args.rounds * 5)
            print("xgboost.dask with a worker killed: finished (the kill came after its end?)")
        except Exception as e:  # noqa: BLE001 - what it raises is the finding
            print(f"xgboost.dask with a worker killed: {type(e).__name__} after "
                  f"{time.perf_counter() - t:.1f} s: {str(e).splitlines()[0][:160]}")


if __name__ == "__main__":
    main()
