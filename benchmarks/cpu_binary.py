"""CPU benchmark: gbflow vs LightGBM vs XGBoost (hist) on one synthetic dense binary problem.

Same data, same run, same machine: the ratios are what count (shared machines are noisy).

    python benchmarks/cpu_binary.py                     # 1,000,000 x 28, depth 6, 100 rounds
    python benchmarks/cpu_binary.py --rows 100000       # quicker

Each library's train time excludes data generation and its own data-structure construction is
included (gbflow's quantization, XGBoost's QuantileDMatrix, LightGBM's Dataset). gbflow's numba
kernels are compiled (and cached on disk) by a small warm-up run first, which is not timed.
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np


def make_data(n_rows: int, n_features: int, seed: int):
    """A HIGGS-like binary problem: nonlinear logit over correlated Gaussian features."""
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(n_features, n_features)) / np.sqrt(n_features)
    mixing = np.eye(n_features) + 0.5 * mix
    X = (rng.normal(size=(n_rows, n_features)) @ mixing).astype(np.float32)
    w = rng.normal(size=n_features)
    logit = (X @ w) * 0.3 + np.sin(2 * X[:, 0]) * X[:, 1] + 0.5 * (X[:, 2] > 0.3) * X[:, 3] \
        - 0.4 * X[:, 4] ** 2 + 0.8 * np.tanh(X[:, 5] * X[:, 6])
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return X, y


def auc(y, p):
    from gbflow.metrics import auc as _auc
    return _auc(y.astype(np.float64), np.asarray(p, dtype=np.float64))


def run_gbflow(X, y, Xt, yt, args):
    import gbflow
    params = {"objective": "binary:logistic", "max_depth": args.depth, "learning_rate": args.eta,
              "max_bin": args.max_bin}
    gbflow.train(X[:2000], y[:2000], params=params, num_boost_round=2, verbose=False)  # JIT warm-up
    start = time.perf_counter()
    booster = gbflow.train(X, y, params=params, num_boost_round=args.rounds, verbose=False)
    seconds = time.perf_counter() - start
    stages = ", ".join(f"{k} {v:.2f}s" for k, v in booster.timings.items() if k != "total")
    return seconds, auc(yt, booster.predict(Xt)), stages


def run_xgboost(X, y, Xt, yt, args):
    import xgboost as xgb
    start = time.perf_counter()
    d = xgb.QuantileDMatrix(X, y, max_bin=args.max_bin)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": args.depth, "eta": args.eta,
                         "tree_method": "hist", "max_bin": args.max_bin,
                         "nthread": os.cpu_count()}, d, args.rounds)
    seconds = time.perf_counter() - start
    return seconds, auc(yt, booster.predict(xgb.DMatrix(Xt))), f"xgboost {xgb.__version__}"


def run_lightgbm(X, y, Xt, yt, args):
    import lightgbm as lgb
    start = time.perf_counter()
    d = lgb.Dataset(X, y, params={"max_bin": args.max_bin - 1, "verbose": -1})
    booster = lgb.train({"objective": "binary", "max_depth": args.depth,
                         "num_leaves": 2 ** args.depth, "learning_rate": args.eta,
                         "max_bin": args.max_bin - 1, "min_sum_hessian_in_leaf": 1.0,
                         "min_data_in_leaf": 1, "num_threads": os.cpu_count(), "verbose": -1},
                        d, args.rounds)
    seconds = time.perf_counter() - start
    return seconds, auc(yt, booster.predict(Xt)), f"lightgbm {lgb.__version__}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--test-rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=28)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--eta", type=float, default=0.1)
    parser.add_argument("--max-bin", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", default=["gbflow", "lightgbm", "xgboost"])
    args = parser.parse_args()

    X, y = make_data(args.rows + args.test_rows, args.features, args.seed)
    X, Xt, y, yt = X[: args.rows], X[args.rows :], y[: args.rows], y[args.rows :]
    print(f"device: CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"data: train {X.shape[0]:,} x {X.shape[1]}, test {Xt.shape[0]:,}; depth {args.depth}, "
          f"{args.rounds} rounds, eta {args.eta}, max_bin {args.max_bin}")
    runners = {"gbflow": run_gbflow, "lightgbm": run_lightgbm, "xgboost": run_xgboost}
    results = {}
    for name in args.only:
        seconds, score, info = runners[name](X, y, Xt, yt, args)
        results[name] = (seconds, score)
        print(f"{name:9s} train {seconds:7.2f} s   test AUC {score:.5f}   ({info})", flush=True)
    if "gbflow" in results:
        g_time, g_auc = results["gbflow"]
        for peer in ("lightgbm", "xgboost"):
            if peer in results:
                p_time, p_auc = results[peer]
                print(f"gbflow / {peer}: time x{g_time / p_time:.2f}, AUC {g_auc - p_auc:+.5f}")


if __name__ == "__main__":
    main()
