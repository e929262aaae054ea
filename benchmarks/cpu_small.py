"""CPU benchmark on small data: gbflow vs xgboost-cpu (hist) on the frames searches and notebooks
train on, in the same run, on the same data.

    python benchmarks/cpu_small.py                      # digits, 10K x 28, 100K x 28
    python benchmarks/cpu_small.py --cases digits --loops whole levels --repeat 5

Cases: ``digits`` (sklearn's 1,797 x 64 handwritten digits, 10 classes, multi:softprob),
``10k`` and ``100k`` (the HIGGS-like binary problem of ``cpu_binary.py``, 28 features), ``csr``
(a 6,000 x 400 scipy CSR, 3% stored, 4 classes from its first columns: the sparse store); depth 6,
100 rounds, learning rate 0.3 (XGBoost's default). Each library's time includes its own data
structure (gbflow's quantization, XGBoost's DMatrix); gbflow's kernels are compiled by a warm-up
run first (the first call is ``first_call.py``'s subject). ``--loops`` trains gbflow with each
tree loop asked for (``whole``: the CPU's whole-tree grower, the default; ``levels``: the
level-by-level loop, ``GBFLOW_WHOLE_TREES=0``) and checks that their model files are equal.
Prints every run's seconds (the ratio of the medians is what counts: shared machines are noisy),
gbflow's stage timers, and the process's peak resident memory.
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import time

import numpy as np
from cpu_binary import make_data


def load_case(name: str):
    """(X, y, objective parameters) of a case."""
    if name == "digits":
        from sklearn.datasets import load_digits
        X, y = load_digits(return_X_y=True)
        return X.astype(np.float32), y.astype(np.float32), {"objective": "multi:softprob",
                                                            "num_class": 10}
    if name == "csr":
        import scipy.sparse
        X = scipy.sparse.random(6000, 400, density=0.03, format="csr", random_state=2,
                                dtype=np.float32)
        y = (np.asarray(X[:, :8].sum(axis=1)).ravel() * 10).astype(int) % 4
        return X, y.astype(np.float32), {"objective": "multi:softprob", "num_class": 4}
    n_rows = {"10k": 10_000, "100k": 100_000}[name]
    X, y = make_data(n_rows, 28, seed=0)
    return X, y, {"objective": "binary:logistic"}


def run_gbflow(X, y, params, rounds, loop):
    import gbflow
    os.environ["GBFLOW_WHOLE_TREES"] = "0" if loop == "levels" else "1"
    start = time.perf_counter()
    booster = gbflow.train(X, y, params=params, num_boost_round=rounds, verbose=False)
    seconds = time.perf_counter() - start
    return seconds, booster


def run_xgboost(X, y, params, rounds):
    import xgboost as xgb
    start = time.perf_counter()
    booster = xgb.train({**params, "tree_method": "hist"}, xgb.DMatrix(X, label=y), rounds)
    return time.perf_counter() - start, booster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="*", default=["digits", "10k", "100k"],
                        choices=["digits", "10k", "100k", "csr"])
    parser.add_argument("--loops", nargs="*", default=["whole"], choices=["whole", "levels"])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-xgboost", action="store_true")
    args = parser.parse_args()
    import numba

    import gbflow
    print(f"device: CPU ({platform.processor() or platform.machine()}), {os.cpu_count()} cores, "
          f"numba threads {numba.get_num_threads()}; gbflow {gbflow.__version__}")
    if not args.no_xgboost:
        import xgboost
        print(f"xgboost {xgboost.__version__}")
    for case in args.cases:
        X, y, objective = load_case(case)
        params = {**objective, "max_depth": args.depth, "learning_rate": 0.3,
                  "nthread": os.cpu_count()}
        print(f"\n{case}: {X.shape[0]:,} x {X.shape[1]}, {objective['objective']}, depth "
              f"{args.depth}, {args.rounds} rounds")
        run_gbflow(X[:500], y[:500], params, 2, "whole")  # compile (or load the cache)
        times = {loop: [] for loop in args.loops}
        times["xgboost"] = []
        models = {}
        for _ in range(args.repeat):
            for loop in args.loops:
                seconds, booster = run_gbflow(X, y, params, args.rounds, loop)
                times[loop].append(seconds)
                models[loop] = booster
            if not args.no_xgboost:
                times["xgboost"].append(run_xgboost(X, y, params, args.rounds)[0])
        for loop in args.loops:
            stages = ", ".join(f"{k} {v:.3f}s" for k, v in models[loop].timings.items()
                               if k != "total")
            print(f"  gbflow ({loop}): " + ", ".join(f"{t:.3f}" for t in times[loop]) +
                  f" s; median {statistics.median(times[loop]):.3f} s  [{stages}]")
        if times["xgboost"]:
            print("  xgboost: " + ", ".join(f"{t:.3f}" for t in times["xgboost"]) +
                  f" s; median {statistics.median(times['xgboost']):.3f} s")
            for loop in args.loops:
                ratio = statistics.median(times[loop]) / statistics.median(times["xgboost"])
                print(f"  gbflow ({loop}) / xgboost: {ratio:.2f}x")
        files = {loop: booster.to_json() for loop, booster in models.items()}
        if len(files) > 1:
            same = len(set(files.values())) == 1
            print(f"  model files of the loops: {'identical' if same else 'DIFFERENT'}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak resident memory of the process: {peak:.0f} MiB (no device memory: CPU)")


if __name__ == "__main__":
    main()
