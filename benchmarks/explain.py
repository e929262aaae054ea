"""SHAP benchmark (issue F11): gbflow's pred_contribs against XGBoost's on the same trees.

    python benchmarks/explain.py                       # GPU: 1M x 28, depth 8, 500 rounds
    python benchmarks/explain.py --rows 100000 --explain-rows 10000 --rounds 100 --device cpu

Data: ``gpu_binary.make_data`` (the HIGGS-like problem), float32, one draw from a fixed seed.
One gbflow model is trained (binary:logistic, learning rate 0.1, --depth, --rounds) and
exported with ``Booster.to_xgboost``: both libraries explain the same trees, so the values must
agree to float32 rounding (the max difference is printed) and the times compare the SHAP
computations alone. --explain-rows rows are explained, on the device of --device (CuPy arrays on
cuda: both libraries read the same device matrix; XGBoost with device=cuda uses GPUTreeShap).
Each timed call runs after an untimed warm-up call on 1,000 rows (kernel compilation); the
median of --repeats calls is reported, with the peak of CuPy's memory pool during gbflow's call
(device memory: the (n, F + 1) float64 result and the path arrays) and XGBoost's call. Also timed:
the prediction itself (margins), pred_leaf, approx_contribs, and pred_interactions on
--interaction-rows rows.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from gpu_binary import make_data  # noqa: E402

import gbflow  # noqa: E402


def _timed(call, repeats: int, sync) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        result = call()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--explain-rows", type=int, default=1_000_000)
    parser.add_argument("--interaction-rows", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    import xgboost as xgb
    X, y = make_data(np, args.rows, 28, 0)
    X, y = np.asarray(X, dtype=np.float32), np.asarray(y, dtype=np.float32)
    print(f"device {args.device}; train {X.shape}, explain {args.explain_rows} rows, "
          f"interactions {args.interaction_rows}; depth {args.depth}, {args.rounds} rounds; "
          f"xgboost {xgb.__version__}")
    if args.device == "cuda":
        import cupy as cp
        name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
        print(f"GPU: {name}")
        xp, sync = cp, cp.cuda.Device().synchronize
        pool = cp.get_default_memory_pool()
    else:
        xp, sync, pool = np, (lambda: None), None
    data = xp.asarray(X)
    start = time.perf_counter()
    booster = gbflow.train(data, xp.asarray(y), {"objective": "binary:logistic",
                                                 "max_depth": args.depth, "learning_rate": 0.1,
                                                 "device": args.device},
                           args.rounds, verbose=False)
    print(f"gbflow training: {time.perf_counter() - start:.2f} s, "
          f"{sum(t.n_nodes for t in booster.trees)} nodes")
    model = booster.to_xgboost()
    model.set_param({"device": args.device})
    rows = data[: args.explain_rows]
    small = data[:1000]

    def peak_of(call):
        if pool is None:
            return call(), float("nan")
        pool.free_all_blocks()
        before = pool.total_bytes()
        # CuPy's pool has no peak counter: sample total_bytes right after (the result is held)
        result = call()
        return result, (pool.total_bytes() - before) / 2**30

    def matrix(r):
        return xgb.DMatrix(r, feature_names=model.feature_names)

    cases = [
        ("margin", lambda r: booster.predict(r, output_margin=True),
         lambda r: model.inplace_predict(r, predict_type="margin")),
        ("pred_leaf", lambda r: booster.predict(r, pred_leaf=True),
         lambda r: model.predict(matrix(r), pred_leaf=True)),
        ("approx_contribs", lambda r: booster.predict(r, pred_contribs=True,
                                                      approx_contribs=True),
         lambda r: model.predict(matrix(r), pred_contribs=True, approx_contribs=True)),
        ("pred_contribs", lambda r: booster.predict(r, pred_contribs=True),
         lambda r: model.predict(matrix(r), pred_contribs=True)),
    ]
    print(f"{'case':18s} {'rows':>9s} {'gbflow s':>9s} {'xgboost s':>9s} {'ratio':>6s} "
          f"{'gb GiB':>7s} {'max |diff|':>10s}")
    results = {}
    for name, ours, theirs in cases + [
            ("pred_interactions", lambda r: booster.predict(r, pred_interactions=True),
             lambda r: model.predict(matrix(r), pred_interactions=True))]:
        part = rows if name != "pred_interactions" else data[: args.interaction_rows]
        ours(small)  # warm-up: compilation
        (t_ours, got), peak = peak_of(lambda: _timed(lambda: ours(part), args.repeats, sync))
        got = got.get() if hasattr(got, "get") else np.asarray(got)
        try:
            theirs(small)
            t_theirs, expected = _timed(lambda: theirs(part), args.repeats, sync)
        except Exception as e:  # e.g. XGBoost's GPU predictor has no approx_contribs
            print(f"{name:18s} {len(part):9d} {t_ours:9.3f} {'n/a':>9s} {'':6s} {peak:7.2f}  "
                  f"(XGBoost: {str(e).splitlines()[0][:90]})")
            continue
        expected = expected.get() if hasattr(expected, "get") else np.asarray(expected)
        diff = np.abs(got.reshape(expected.shape).astype(np.float64) - expected).max()
        results[name] = (t_ours, t_theirs)
        print(f"{name:18s} {len(part):9d} {t_ours:9.3f} {t_theirs:9.3f} "
              f"{t_ours / t_theirs:6.2f} {peak:7.2f} {diff:10.2e}")
    t_ours, t_theirs = results["pred_contribs"]
    verdict = "PASS" if t_ours <= t_theirs else "MISS"
    print(f"target: SHAP at least as fast as XGBoost's pred_contribs: {verdict} "
          f"({t_ours:.3f} s vs {t_theirs:.3f} s)")


if __name__ == "__main__":
    main()
