"""Row sampling on the GPU or CPU: gbflow's uniform and gradient-based subsample against XGBoost's
(gradient-based is XGBoost's on the GPU only), same data and parameters in the same run.

    python sampling.py                      # GPU, 1M x 28, subsample 0.2 and 0.1
    python sampling.py --device cpu --rows 200000

Prints each run's seconds (quantization included for both), held-out AUC and gbflow's stage
timers. Sampling changes what a tree
learns from, not (in core) how long it takes: sampled-out rows still pass the kernels.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def make_data(n_rows: int, n_features: int, seed: int):
    """A HIGGS-like binary problem (gpu_binary.py's), on the host."""
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((n_features, n_features)).astype(np.float32) / np.sqrt(n_features)
    X = rng.standard_normal((n_rows, n_features)).astype(np.float32) @ \
        (np.eye(n_features, dtype=np.float32) + 0.5 * mix)
    w = rng.standard_normal(n_features).astype(np.float32)
    logit = (X @ w) * 0.3 + np.sin(2 * X[:, 0]) * X[:, 1] + 0.5 * (X[:, 2] > 0.3) * X[:, 3] \
        - 0.4 * X[:, 4] ** 2 + 0.8 * np.tanh(X[:, 5] * X[:, 6])
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return np.ascontiguousarray(X), y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--test-rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--rates", type=float, nargs="*", default=[0.2, 0.1])
    parser.add_argument("--no-xgboost", action="store_true")
    args = parser.parse_args()
    from sklearn.metrics import roc_auc_score

    import gbflow
    from gbflow.sketch.direct import DIRECT_VALUES
    X, y = make_data(args.rows + args.test_rows, 28, seed=0)
    X, Xt, y, yt = X[:args.rows], X[args.rows:], y[:args.rows], y[args.rows:]
    print(f"device {args.device}; {args.rows:,} x 28 train, {args.test_rows:,} test, depth "
          f"{args.depth}, {args.rounds} rounds, learning rate 0.1; gbflow {gbflow.__version__}")
    base = {"objective": "binary:logistic", "max_depth": args.depth, "learning_rate": 0.1,
            "device": args.device}
    settings = [("none", 1.0, "uniform")] + [(f"{m} {r}", r, m) for r in args.rates
                                             for m in ("uniform", "gradient_based")]
    data = X, y
    if args.device == "cuda":
        import cupy as cp
        data = cp.asarray(X), cp.asarray(y)
    # compile every setting's kernels first, on enough rows for the sketch's passes when the
    # data takes them
    warm = min(args.rows, max(20_000, DIRECT_VALUES // 28 + 1))
    for name, rate, method in settings:
        gbflow.train(data[0][:warm], data[1][:warm], num_boost_round=2, verbose=False,
                     params={**base, "subsample": rate, "sampling_method": method})
    for name, rate, method in settings:
        params = {**base, "subsample": rate, "sampling_method": method}
        start = time.perf_counter()
        booster = gbflow.train(*data, params=params, num_boost_round=args.rounds, verbose=False)
        seconds = time.perf_counter() - start
        score = roc_auc_score(yt, np.asarray(booster.predict(Xt)))
        stages = ", ".join(f"{k} {v:.2f}" for k, v in booster.timings.items())
        print(f"gbflow   {name:22s} {seconds:6.2f} s  AUC {score:.5f}  ({stages})", flush=True)
    if args.no_xgboost:
        return
    import xgboost as xgb
    dtest = xgb.DMatrix(Xt)
    xgb_data = data if args.device == "cuda" else (X, y)
    for name, rate, method in settings:
        if method == "gradient_based" and args.device != "cuda":
            continue  # XGBoost samples by gradient on the GPU only
        params = {**base, "tree_method": "hist", "subsample": rate, "sampling_method": method,
                  "eval_metric": "auc"}
        start = time.perf_counter()  # its quantization inside, as gbflow's
        booster = xgb.train(params, xgb.QuantileDMatrix(*xgb_data, max_bin=256), args.rounds)
        seconds = time.perf_counter() - start
        score = roc_auc_score(yt, booster.predict(dtest))
        print(f"xgboost  {name:22s} {seconds:6.2f} s  AUC {score:.5f}  (xgboost "
              f"{xgb.__version__})", flush=True)


if __name__ == "__main__":
    main()
