"""Sparse benchmark: gbflow with sparse routing, with routing off, and XGBoost, same CSR data.

    python benchmarks/sparse_routing.py --device cuda                 # 1M x 20,000 (issue F4)
    python benchmarks/sparse_routing.py --device cuda --rounds-off 20 # routing off for fewer rounds
    python benchmarks/sparse_routing.py --device cpu --rows 100000 --cols 2000 --rounds 20

The data is a CSR matrix of one-hot-like blocks (``--groups`` categorical variables, each one-hot
over its share of the columns: one stored 1.0 per row and group, absent elsewhere) plus
``--dense`` dense Gaussian columns, with a binary label from a logit over the dense columns and
the effects of a share of the categories (``--effect-share``; training and test data share
them). Absent entries are missing values for both libraries. On the GPU,
gbflow gets a cupyx CSR matrix and XGBoost a QuantileDMatrix built from the scipy one (in its
timing); on the CPU both get the scipy matrix. Train time includes each library's
quantization. With ``--rounds-off`` smaller than ``--rounds``, routing off runs fewer rounds
and its per-round time is what compares. Peak GPU memory as in gpu_binary.py.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp


def make_data(n_rows: int, n_cols: int, n_dense: int, n_groups: int, seed: int,
              effect_share: float = 0.05, model_seed: int = 12345):
    """(scipy CSR float32 (n_rows, n_cols), labels float32): dense columns first, then the
    one-hot groups, every row holding n_dense + n_groups entries in ascending column order.
    ``seed`` draws the rows; ``model_seed`` the categories' effects (a share ``effect_share``
    of them has one), the same for training and test data."""
    rng = np.random.default_rng(seed)
    per_group = (n_cols - n_dense) // n_groups
    dense = rng.standard_normal((n_rows, n_dense), dtype=np.float32)
    # Skewed categories (a few frequent, a long tail), like real one-hot data.
    category = np.minimum((rng.pareto(1.2, (n_rows, n_groups)) * 20).astype(np.int64),
                          per_group - 1)
    hot_columns = n_dense + np.arange(n_groups) * per_group + category
    indices = np.concatenate([np.broadcast_to(np.arange(n_dense), (n_rows, n_dense)),
                              hot_columns], axis=1).astype(np.int32)
    data = np.concatenate([dense, np.ones((n_rows, n_groups), np.float32)], axis=1)
    width = n_dense + n_groups
    X = sp.csr_matrix((data.ravel(), indices.ravel(), np.arange(0, n_rows * width + 1, width)),
                      shape=(n_rows, n_cols))
    model = np.random.default_rng(model_seed)
    effect = model.normal(size=(n_groups, per_group)) * \
        (model.random((n_groups, per_group)) < effect_share)
    logit = dense[:, : min(4, n_dense)].sum(axis=1) * 0.5 \
        + effect[np.arange(n_groups)[None, :], category].sum(axis=1) \
        + 0.5 * np.sin(dense[:, 0] * dense[:, min(1, n_dense - 1)])
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return X, y


def auc(y, p):
    from gbflow.metrics import auc as _auc
    return _auc(np.asarray(y, dtype=np.float64), np.asarray(p, dtype=np.float64))


class _NoMemory:
    peak = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def _memory(device: str):
    if device != "cuda":
        return _NoMemory()
    from gpu_binary import PeakMemory
    return PeakMemory()


def _sync(device: str):
    if device == "cuda":
        import cupy
        cupy.cuda.Device().synchronize()


def _free(device: str):
    if device == "cuda":
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()


def run_gbflow(X, y, Xt, yt, args, threshold: float, rounds: int):
    import gbflow
    params = {"objective": "binary:logistic", "max_depth": args.depth, "learning_rate": 0.1,
              "max_bin": args.max_bin, "device": args.device, "sparse_threshold": threshold}
    # warm-up on the whole matrix: a slice routes fewer columns sparse, so the kernels of the
    # full width (global-memory sparse histograms, say) would compile in the timed run
    gbflow.train(X, y, params=params, num_boost_round=2, verbose=False)
    _free(args.device)
    with _memory(args.device) as memory:
        _sync(args.device)
        start = time.perf_counter()
        booster = gbflow.train(X, y, params=params, num_boost_round=rounds, verbose=False)
        _sync(args.device)
        seconds = time.perf_counter() - start
    prediction = booster.predict(Xt)
    prediction = prediction.get() if hasattr(prediction, "get") else prediction
    stages = ", ".join(f"{k} {v:.2f}s" for k, v in booster.timings.items() if k != "total")
    del booster
    _free(args.device)
    return seconds, auc(yt, prediction), memory.peak, stages


def run_xgboost(X, y, Xt, yt, args, rounds: int):
    import xgboost as xgb
    params = {"objective": "binary:logistic", "max_depth": args.depth, "eta": 0.1,
              "device": args.device, "tree_method": "hist", "max_bin": args.max_bin}
    if args.device == "cpu":
        params["nthread"] = args.threads
    xgb.train(params, xgb.QuantileDMatrix(X[:2000], y[:2000], max_bin=args.max_bin), 2)
    with _memory(args.device) as memory:
        start = time.perf_counter()
        d = xgb.QuantileDMatrix(X, y, max_bin=args.max_bin)
        booster = xgb.train(params, d, rounds)
        booster.predict(xgb.DMatrix(X[:10]))  # XGBoost trains lazily: make sure it finished
        seconds = time.perf_counter() - start
    prediction = booster.predict(xgb.DMatrix(Xt))
    del d, booster
    _free(args.device)
    return seconds, auc(yt, prediction), memory.peak, f"xgboost {xgb.__version__}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cols", type=int, default=20_000)
    parser.add_argument("--dense", type=int, default=10)
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--effect-share", type=float, default=0.05,
                        help="share of the categories that move the label")
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--rounds-off", type=int, default=None,
                        help="rounds for gbflow with routing off (default: --rounds)")
    parser.add_argument("--max-bin", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2, help="XGBoost's threads on the CPU")
    parser.add_argument("--no-xgboost", action="store_true")
    parser.add_argument("--no-off", action="store_true", help="skip gbflow with routing off")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure each library this many times, alternating; the medians "
                             "are shown (shared machines are noisy)")
    args = parser.parse_args()
    rounds_off = args.rounds_off or args.rounds

    start = time.perf_counter()
    X, y = make_data(args.rows, args.cols, args.dense, args.groups, args.seed,
                     args.effect_share)
    Xt, yt = make_data(max(10_000, args.rows // 10), args.cols, args.dense, args.groups,
                       args.seed + 1, args.effect_share)
    csr_bytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    print(f"data: {args.rows} x {args.cols} CSR, {X.nnz} stored entries "
          f"({X.nnz / (args.rows * args.cols):.4%}), {args.dense} dense columns, "
          f"{args.groups} one-hot groups; CSR {csr_bytes / 2**20:.0f} MiB; made in "
          f"{time.perf_counter() - start:.1f}s")
    if args.device == "cuda":
        import cupy
        import cupyx.scipy.sparse as cusp
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        print(f"device: {name}")
        X_ours, Xt_ours, y_ours = cusp.csr_matrix(X), cusp.csr_matrix(Xt), cupy.asarray(y)
    else:
        import os
        print(f"device: CPU, {os.cpu_count()} cores")
        X_ours, Xt_ours, y_ours = X, Xt, y
    print(f"depth {args.depth}, {args.rounds} rounds, max_bin {args.max_bin}, "
          f"{args.repeat} measurement(s) each, alternating")
    runs = {}  # label -> (rounds, [seconds], last (score, peak, stages))
    for _ in range(args.repeat):
        measured = [("gbflow routed (0.8)", args.rounds,
                     lambda: run_gbflow(X_ours, y_ours, Xt_ours, yt, args, 0.8, args.rounds))]
        if not args.no_off:
            measured.append(("gbflow routing off (1.0)", rounds_off,
                             lambda: run_gbflow(X_ours, y_ours, Xt_ours, yt, args, 1.0,
                                                rounds_off)))
        if not args.no_xgboost:
            measured.append(("xgboost", args.rounds,
                             lambda: run_xgboost(X, y, Xt, yt, args, args.rounds)))
        for label, rounds, run in measured:
            seconds, score, peak, stages = run()
            runs.setdefault(label, (rounds, [], None))
            runs[label] = (rounds, runs[label][1] + [seconds], (score, peak, stages))
    rows = [(label, rounds, float(np.median(times)), *last)
            for label, (rounds, times, last) in runs.items()]
    for label, (_, times, _) in runs.items():
        if len(times) > 1:
            print(f"{label}: seconds {', '.join(f'{t:.2f}' for t in times)}")
    for label, rounds, seconds, score, peak, stages in rows:
        memory = f", peak GPU memory {peak / 2**20:.0f} MiB ({peak / csr_bytes:.2f}x the CSR)" \
            if args.device == "cuda" else ""
        print(f"{label:26s} {rounds:4d} rounds {seconds:8.2f}s ({seconds / rounds * 1e3:7.1f} "
              f"ms/round), test AUC {score:.5f}{memory}\n    {stages}")
    base = rows[0][2] / rows[0][1]
    for label, rounds, seconds, *_ in rows[1:]:
        print(f"routed gbflow is {seconds / rounds / base:.2f}x faster per round than {label}")


if __name__ == "__main__":
    main()
