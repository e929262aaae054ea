"""gbflow in a Dask pipeline, end to end: raw Parquet -> features in Dask -> train on the cluster
-> score -> Parquet.

    python examples/pipeline.py                      # a LocalCluster of CPU workers, pandas
    python examples/pipeline.py --gpu                # a LocalCUDACluster, dask_cudf partitions
    python examples/pipeline.py --rows 2000000 --workers 4
    python examples/pipeline.py --scheduler tcp://host:8786   # an existing cluster

The story: a lender keeps loan applications in Parquet. The pipeline reads them with Dask, derives
features (ratios, logs, a per-region aggregate joined back, the month of the application), splits
the rows into train / validation / test, trains a default-risk classifier with gbflow *on the
workers that hold the partitions* (each partition is binned where it lives; histograms are summed
between workers), appends the predicted probability to the test rows, and writes them to Parquet
for the next step of the pipeline. Everything up to the final AUC check stays lazy and
distributed; nothing is collected on the client but the model and a few numbers.
"""
from __future__ import annotations

import argparse
import os
import shutil
import time

import numpy as np
import pandas as pd

REGIONS = np.array(["north", "south", "east", "west", "centre", "islands"])


def make_applications(partition: int, rows: int, seed: int = 7) -> pd.DataFrame:
    """One partition of raw loan applications (deterministic per partition)."""
    rng = np.random.default_rng([seed, partition])
    region = rng.integers(0, len(REGIONS), rows)
    age = rng.integers(21, 76, rows)
    income = np.round(rng.lognormal(10.6 + 0.08 * region, 0.55, rows), -2)
    loan = np.round(income * rng.uniform(0.1, 1.2, rows), -2)
    debt_ratio = np.clip(rng.beta(2.0, 5.0, rows) + 0.15 * loan / income, 0, 2)
    late = rng.poisson(0.3 + 0.8 * debt_ratio)
    score = np.clip(rng.normal(690 - 35 * late + 0.8 * (age - 40), 55), 300, 850)
    years = np.minimum(rng.exponential(6.0, rows), age - 18).round(1)
    applied = pd.Timestamp("2025-01-01") + pd.to_timedelta(rng.integers(0, 365, rows), unit="D")
    logit = (-2.6 + 2.2 * np.maximum(debt_ratio - 0.45, 0) - 0.9 * np.log(income / 50_000)
             + 0.35 * np.minimum(late, 4) - (score - 690) / 70 + 0.5 * (loan / income > 0.9)
             - 0.25 * np.minimum(years, 10) / 10 + 0.3 * (applied.month.to_numpy() >= 11))
    frame = pd.DataFrame({
        "application_id": partition * rows + np.arange(rows, dtype=np.int64),
        "region": REGIONS[region], "applied": applied, "age": age, "income": income,
        "loan_amount": loan, "debt_ratio": debt_ratio, "late_payments": late,
        "credit_score": score, "years_employed": years,
        "default": (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.int8),
    })
    frame.loc[rng.random(rows) < 0.05, "credit_score"] = np.nan  # no credit history
    frame.loc[rng.random(rows) < 0.08, "years_employed"] = np.nan  # not reported
    return frame


def start_cluster(args):
    """A distributed Client: the given scheduler, a LocalCUDACluster (--gpu) or a LocalCluster."""
    from distributed import Client, LocalCluster
    if args.scheduler:
        return Client(args.scheduler)
    if args.gpu:
        from dask_cuda import LocalCUDACluster
        return Client(LocalCUDACluster())
    threads = max(1, (os.cpu_count() or 1) // args.workers)
    # One worker process per share of the cores; gbflow's kernels use the worker's threads.
    cluster = LocalCluster(n_workers=args.workers, threads_per_worker=threads, processes=True,
                           dashboard_address=":0")
    return Client(cluster)


def features(applications):
    """Feature engineering, all lazy Dask operations (pandas or cuDF partitions alike)."""
    region_income = (applications.groupby("region")["income"].mean()
                     .rename("region_income").reset_index().compute())  # 6 rows
    frame = applications.merge(region_income, on="region", how="left")
    return frame.assign(
        loan_to_income=frame["loan_amount"] / frame["income"],
        log_income=np.log1p(frame["income"]),
        income_vs_region=frame["income"] / frame["region_income"],
        month=frame["applied"].dt.month.astype("int32"),
        has_history=frame["credit_score"].notnull(),
    )


FEATURES = ["age", "income", "loan_amount", "debt_ratio", "late_payments", "credit_score",
            "years_employed", "loan_to_income", "log_income", "income_vs_region", "month",
            "has_history"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="loan applications")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="CPU workers of the LocalCluster")
    parser.add_argument("--gpu", action="store_true",
                        help="LocalCUDACluster and dask_cudf partitions (needs RAPIDS)")
    parser.add_argument("--scheduler", help="address of an existing Dask scheduler")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--out", default="out/pipeline", help="folder for Parquet and the model")
    args = parser.parse_args()

    import dask
    import dask.dataframe as dd

    import gbflow
    from gbflow.metrics import auc, logloss

    started = time.perf_counter()
    client = start_cluster(args)
    workers = client.nthreads()
    print(f"cluster: {len(workers)} worker(s) ({'GPU' if args.gpu else 'CPU'}), "
          f"dashboard {client.dashboard_link}")
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)

    # 1. The raw table lands in Parquet (in real life: it is already there) ----------------------
    per_part = -(-args.rows // args.partitions)
    meta = make_applications(0, 0)
    raw = dd.from_map(make_applications, range(args.partitions), rows=per_part, meta=meta)
    raw.to_parquet(f"{args.out}/raw", write_index=False)
    print(f"wrote {per_part * args.partitions:,} raw applications to {args.out}/raw "
          f"({time.perf_counter() - started:.1f} s)")

    # 2. Read and engineer features lazily; pandas or cuDF partitions -------------------------
    with dask.config.set({"dataframe.backend": "cudf" if args.gpu else "pandas"}):
        applications = dd.read_parquet(f"{args.out}/raw")
    table = features(applications)
    train, valid, test = table.random_split([0.7, 0.15, 0.15], random_state=0)
    columns = FEATURES + ["default"]

    # 3. Train where the partitions live -----------------------------------------------------
    #    gbflow.train sees a Dask DataFrame and an active Client: one training task per worker
    #    bins its partitions in place (the raw ones are then let go) and the workers sum their
    #    histograms with each other; progress lines come back here.
    params = {"objective": "binary:logistic", "max_depth": 6, "learning_rate": 0.1,
              "eval_metric": ["logloss", "auc"], "device": "cuda" if args.gpu else "cpu"}
    t = time.perf_counter()
    booster = gbflow.train(train[columns], label="default", params=params,
                           num_boost_round=args.rounds, evals=[(valid[columns], "valid")],
                           early_stopping_rounds=20, verbose=25)
    print(f"trained {booster} in {time.perf_counter() - t:.1f} s; best round "
          f"{booster.best_iteration + 1}, valid auc {booster.best_score:.4f}")
    print("stages (s): " + ", ".join(f"{k} {v:.2f}" for k, v in booster.timings.items()))
    for r in booster.worker_report:
        print(f"  worker {r['rank']}: {r['partitions']} partitions, {r['rows']:,} rows, raw "
              f"{r['raw_bytes'] / 2**20:.0f} MiB -> binned {r['binned_bytes'] / 2**20:.0f} MiB; "
              f"process memory {r['rss_start'] / 2**20:.0f} MiB at start, peak "
              f"{r['peak_rss'] / 2**20:.0f} MiB during training")

    # 4. Score the test rows and write them out: lazy until to_parquet ------------------------
    #    transform() keeps every column (ids, dates, the region) and appends the probability.
    scored = booster.transform(test, name="p_default")
    scored.to_parquet(f"{args.out}/scored", write_index=False)
    result = dd.read_parquet(f"{args.out}/scored", columns=["default", "p_default"]).compute()
    if hasattr(result, "to_pandas"):  # cuDF, when Dask's DataFrame backend is cuDF
        result = result.to_pandas()
    y, p = result["default"].to_numpy(np.float64), result["p_default"].to_numpy()
    print(f"wrote {len(result):,} scored test rows to {args.out}/scored: test auc "
          f"{auc(y, p):.4f}, logloss {logloss(y, p):.4f}")

    # 5. The model file, reloaded: the same predictions ---------------------------------------
    path = f"{args.out}/model.json"
    booster.save_model(path)
    reloaded = gbflow.load_model(path)
    sample = test[FEATURES].partitions[0]
    same = (reloaded.predict(sample) == booster.predict(sample)).all().compute()
    print(f"saved {path}; reloaded model predicts identically: {bool(same)}")
    print(f"whole pipeline: {time.perf_counter() - started:.1f} s")
    client.close()


if __name__ == "__main__":
    main()
