"""Objectives benchmark: gbflow against XGBoost per objective, same data, same run, one row each.

    python benchmarks/objectives.py --device cuda                 # 10M x 28, depth 8, 100 rounds
    python benchmarks/objectives.py --device cpu --rows 200000 --rounds 50
    python benchmarks/objectives.py --objective count:poisson --objective reg:gamma
    python benchmarks/objectives.py --objective reg:squarederror \
        --param 'monotone_constraints="(1,0,-1,1)"' --param max_delta_step=0.5
    python benchmarks/objectives.py --objective rank:ndcg --docs-per-query 100
    python benchmarks/objectives.py --objective multi:softmax --num-class 10 --rows 1000000 \
        --features 50 --depth 6     # F7's multiclass case

The features are gpu_binary.py's HIGGS-like Gaussians (generated on the GPU, or with NumPy on the
CPU); each objective gets a target of its kind driven by the same signal (counts for Poisson,
positive values for gamma, compound Poisson-gamma with zeros for Tweedie, event times of
hazard exp(signal) with 30% censored (negative) for Cox, classes for the
classifiers, relevance 0..4 (0/1 for rank:map) in queries of --docs-per-query consecutive rows
for the ranking objectives). Time includes each library's quantization; both are warmed up on a
slice first.
The held-out value is each library's own evaluation of the objective's default metric on a
test set, so the two columns compare model quality as well as time. Peak device memory (NVML,
above the data) is printed for the GPU.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
from gpu_binary import PeakMemory, free_gpu_memory, make_data, warm_rows

OBJECTIVES = ["reg:squarederror", "reg:squaredlogerror", "reg:pseudohubererror",
              "reg:absoluteerror", "reg:quantileerror", "binary:logistic", "binary:hinge",
              "count:poisson", "reg:gamma", "reg:tweedie", "multi:softmax", "survival:cox",
              "rank:ndcg", "rank:pairwise", "rank:map"]


def targets(xp, objective: str, f, seed: int, num_class: int = 3):
    """A target of the objective's kind driven by the signal f (float32, on f's device)."""
    rng = xp.random.default_rng(seed)
    n = f.shape[0]
    if objective == "count:poisson":
        y = rng.poisson(xp.exp(0.5 * f))
    elif objective == "reg:gamma":
        y = rng.gamma(2.0, xp.exp(0.3 * f) / 2) + 1e-3
    elif objective == "reg:tweedie":
        y = rng.poisson(xp.exp(0.3 * f)) * rng.gamma(2.0, 1.0, n)
    elif objective == "reg:squaredlogerror":
        y = xp.exp(0.5 * f + 0.3 * rng.standard_normal(n))
    elif objective in ("reg:pseudohubererror", "reg:absoluteerror", "reg:quantileerror"):
        y = f + rng.standard_normal(n) * xp.sqrt(1 + rng.standard_normal(n) ** 2)
    elif objective == "reg:squarederror":
        y = f + rng.standard_normal(n)
    elif objective == "multi:softmax":
        edges = [-1.0, 0.5] if num_class == 3 else np.linspace(-1.5, 1.5, num_class - 1).tolist()
        y = xp.digitize(f + 0.5 * rng.standard_normal(n), xp.asarray(edges))
    elif objective in ("rank:ndcg", "rank:pairwise"):
        y = xp.digitize(f + 0.5 * rng.standard_normal(n), xp.asarray([-0.5, 0.3, 1.0, 1.6]))
    elif objective == "survival:cox":  # event times of hazard exp(f), 30% censored
        time = rng.exponential(1.0, n) * xp.exp(-f)
        y = xp.where(rng.random(n) < 0.3, -time, time)
    elif objective == "rank:map":
        y = f + 0.5 * rng.standard_normal(n) > 0.8
    else:
        y = rng.random(n) < 1 / (1 + xp.exp(-2 * f))
    return xp.asarray(y, dtype=xp.float32)


def run(library: str, objective: str, X, y, Xt, yt, args, sync, qid=None, qid_test=None):
    params = {"objective": objective, "max_depth": args.depth, "learning_rate": 0.1,
              "max_bin": args.max_bin}
    if objective == "multi:softmax":
        params["num_class"] = args.num_class
    if objective == "reg:quantileerror":
        params["quantile_alpha"] = 0.9
    params.update(args.param)
    if library == "gbflow":
        import gbflow
        params["device"] = args.device
        warm_test = (Xt[:1000], yt[:1000]) if qid is None else \
            (Xt[:1000], yt[:1000], None, qid_test[:1000])
        # warm-up, evaluation too; on enough rows for the sketch's passes when the data takes
        # them (their kernels compile at first use: seconds)
        warm = warm_rows(X)
        gbflow.train(X[:warm], y[:warm], params, 2, verbose=False,
                     qid=None if qid is None else qid[:warm], evals=[(warm_test, "test")])
        sync()
        start = time.perf_counter()
        test = (Xt, yt) if qid is None else (Xt, yt, None, qid_test)
        booster = gbflow.train(X, y, params, args.rounds, evals=[(test, "test")],
                               verbose=False, qid=qid)
        sync()
        seconds = time.perf_counter() - start
        history = booster.evals_result["test"]
        return seconds, {k: v[-1] for k, v in history.items()}
    import xgboost as xgb
    params.update(device=args.device, tree_method="hist")
    xgb.train(params, xgb.QuantileDMatrix(X[:5000], y[:5000], max_bin=args.max_bin,
                                          qid=None if qid is None else qid[:5000]), 2)
    sync()
    history = {}
    start = time.perf_counter()
    d = xgb.QuantileDMatrix(X, y, max_bin=args.max_bin, qid=qid)
    test = xgb.QuantileDMatrix(Xt, yt, ref=d, max_bin=args.max_bin, qid=qid_test)
    booster = xgb.train(params, d, args.rounds, evals=[(test, "test")], evals_result=history,
                        verbose_eval=False)
    booster.predict(xgb.DMatrix(X[:10]))  # XGBoost trains lazily: make sure it finished
    sync()
    seconds = time.perf_counter() - start
    return seconds, {k: v[-1] for k, v in history["test"].items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--test-rows", type=int, default=500_000)
    parser.add_argument("--features", type=int, default=28)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--max-bin", type=int, default=256)
    parser.add_argument("--num-class", type=int, default=3, help="multi:softmax's classes")
    parser.add_argument("--docs-per-query", type=int, default=100,
                        help="rows per query of the ranking objectives (consecutive rows)")
    parser.add_argument("--objective", action="append", choices=OBJECTIVES)
    parser.add_argument("--param", action="append", default=[], type=_param,
                        help="name=value (a JSON value, else a string) for both libraries, "
                             "e.g. max_delta_step=0.5")
    args = parser.parse_args()
    args.param = dict(args.param)
    gpu = args.device == "cuda"
    if gpu:
        import cupy as xp
        name = xp.cuda.runtime.getDeviceProperties(0)["name"].decode()

        def sync():
            xp.cuda.Device().synchronize()
    else:
        xp = np
        import os
        name = f"CPU, {os.cpu_count()} cores"

        def sync():
            pass
    X, _ = make_data(xp, args.rows + args.test_rows, args.features, seed=7) if gpu else \
        (None, None)
    if not gpu:
        rng = np.random.default_rng(7)
        X = rng.standard_normal((args.rows + args.test_rows, args.features), dtype=np.float32)
    f = X[:, 0] * 0.6 + xp.sin(2 * X[:, 1]) * X[:, 2] * 0.5 + 0.4 * xp.tanh(X[:, 3] * X[:, 4])
    Xtr, Xte = xp.ascontiguousarray(X[: args.rows]), xp.ascontiguousarray(X[args.rows:])
    print(f"device: {name}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"data: {args.rows:,} x {args.features} training, {args.test_rows:,} test rows; depth "
          f"{args.depth}, {args.rounds} rounds, max_bin {args.max_bin}"
          f"{'; ' + str(args.param) if args.param else ''}")
    print(f"{'objective':22s} {'gbflow':>9s} {'xgboost':>9s} {'ratio':>6s}  held-out metric "
          f"(gbflow / xgboost)")
    for objective in args.objective or OBJECTIVES:
        y = targets(xp, objective, f, seed=11, num_class=args.num_class)
        ytr, yte = y[: args.rows], y[args.rows:]
        qid = qid_test = None
        if objective.startswith("rank:"):
            qid = xp.arange(args.rows) // args.docs_per_query
            qid_test = xp.arange(args.test_rows) // args.docs_per_query
        row = {}
        for library in ("gbflow", "xgboost"):
            with (PeakMemory() if gpu else _NoMemory()) as memory:
                row[library] = run(library, objective, Xtr, ytr, Xte, yte, args, sync, qid,
                                   qid_test) + (memory.peak,)
            if gpu:
                free_gpu_memory(xp)
        (g, gm, gp), (x, xm, xp_peak) = row["gbflow"], row["xgboost"]
        metric = next(iter(gm))
        memory_note = f"  peak {gp / 2**30:.2f} / {xp_peak / 2**30:.2f} GiB" if gpu else ""
        print(f"{objective:22s} {g:8.2f}s {x:8.2f}s {g / x:5.2f}x  {metric} {gm[metric]:.5f} / "
              f"{xm.get(metric, float('nan')):.5f}{memory_note}", flush=True)


def _param(text: str) -> tuple:
    name, _, value = text.partition("=")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


class _NoMemory:
    peak = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
