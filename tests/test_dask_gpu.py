"""Dask on GPUs (marked ``gpu``; skipped without a GPU, CuPy, dask_cudf and dask_cuda): dask_cudf
partitions trained on a LocalCUDACluster give the model of in-process training, and predictions
stay cuDF-backed. Not run on the CPU machines; written for the GPU machine."""
from __future__ import annotations

import numpy as np
import pytest

from gbflow.backend import cuda_available

pytestmark = pytest.mark.gpu

if not cuda_available():
    pytest.skip("no CUDA GPU with CuPy on this machine", allow_module_level=True)

cudf = pytest.importorskip("cudf")
dask_cudf = pytest.importorskip("dask_cudf")
dask_cuda = pytest.importorskip("dask_cuda")
distributed = pytest.importorskip("distributed")
dd = pytest.importorskip("dask.dataframe")

from conftest import make_table  # noqa: E402

import gbflow  # noqa: E402
import gbflow.dask  # noqa: E402


@pytest.fixture(scope="module")
def gpu_client():
    with dask_cuda.LocalCUDACluster() as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        yield client


def test_dask_cudf_on_every_gpu_gives_the_in_process_model(gpu_client):
    df = make_table(n_rows=20_000, task="binary", seed=50)
    params = {"objective": "binary:logistic", "max_depth": 5, "subsample": 0.8,
              "device": "cuda", "eval_metric": ["logloss", "auc"]}
    expected = gbflow.train(cudf.from_pandas(df.iloc[:16_000]), label="y", params=params,
                            num_boost_round=10, evals=[(cudf.from_pandas(df.iloc[16_000:]), "v")],
                            verbose=False)
    train = dd.from_pandas(cudf.from_pandas(df.iloc[:16_000]), npartitions=8)
    valid = dd.from_pandas(cudf.from_pandas(df.iloc[16_000:]), npartitions=2)
    booster = gbflow.train(train, label="y", params=params, num_boost_round=10,
                           evals=[(valid, "v")], verbose=False, client=gpu_client)
    assert booster.to_json() == expected.to_json()
    n_gpus = len(gpu_client.nthreads())
    assert len(booster.worker_report) == min(n_gpus, 8)
    if n_gpus > 1:  # the histograms went through NCCL (in place), and still the same model
        assert {r["transport"] for r in booster.worker_report} == {"nccl"}


def test_predictions_of_dask_cudf_stay_on_the_gpu(gpu_client):
    df = make_table(n_rows=5_000, seed=51)
    booster = gbflow.train(df, label="y", params={"max_depth": 4}, num_boost_round=5,
                           verbose=False)
    ddf = dd.from_pandas(cudf.from_pandas(df), npartitions=4)
    with gpu_client.as_current():
        prediction = booster.predict(ddf)
        assert prediction.divisions == ddf.divisions
        assert type(prediction._meta).__module__.startswith("cudf")
        computed = prediction.compute()
        assert type(computed).__module__.startswith("cudf")
        np.testing.assert_array_equal(computed.to_numpy(), booster.predict(df).to_numpy())
        scored = booster.transform(ddf, name="p").compute()
        assert type(scored).__module__.startswith("cudf") and "p" in scored.columns


def test_dask_cudf_category_columns_from_parquet_give_the_in_process_model(gpu_client,
                                                                          tmp_path):
    """F9's pipeline: a column of 300 categories (and missing values) written to Parquet in
    several files, read back by dask_cudf, made a category column there (its categories
    unknown to Dask) and trained on the LocalCUDACluster: the in-process model, and
    predictions that stay cuDF-backed."""
    import pandas as pd
    rng = np.random.default_rng(52)
    n = 6000
    df = make_table(n_rows=n, seed=52)
    code = rng.integers(0, 300, n)
    df["city"] = pd.Series([f"c{i:03d}" for i in code], dtype="category")
    df.loc[rng.random(n) < 0.05, "city"] = None
    df["y"] += rng.normal(size=300)[code]
    # written by cuDF as strings, as a RAPIDS pipeline must: cuDF 26.10 writes no category
    # column ("not supported by the gpu accelerated parquet writer") and cannot read pandas's
    # (dictionary columns of int8/int16 indices: "Unsupported type: dictionary<...int16>")
    written = cudf.from_pandas(df.assign(city=df.city.astype(object)))
    dd.from_pandas(written, npartitions=4).to_parquet(str(tmp_path / "table"))
    ddf = dask_cudf.read_parquet(str(tmp_path / "table"))
    if not isinstance(ddf.city.dtype, cudf.CategoricalDtype):  # read as strings
        ddf = ddf.assign(city=ddf.city.astype("category"))
    params = {"max_depth": 4, "learning_rate": 0.3, "device": "cuda"}
    expected = gbflow.train(cudf.from_pandas(df), label="y", params=params,
                            num_boost_round=5, verbose=False)
    assert any(t.categories for t in expected.trees)
    booster = gbflow.train(ddf, label="y", params=params, num_boost_round=5, verbose=False,
                           client=gpu_client)
    assert booster.to_json() == expected.to_json()
    with gpu_client.as_current():
        computed = booster.predict(ddf).compute()
    assert type(computed).__module__.startswith("cudf")
    np.testing.assert_array_equal(computed.to_numpy(), expected.predict(df).to_numpy())


class _AllocatorSeen(gbflow.callback.TrainingCallback):
    """Notes, on each worker before the first round, CuPy's allocator: its module's name."""

    def before_training(self, model):
        import cupy
        from distributed import get_worker
        allocator = cupy.cuda.get_allocator()
        get_worker().log_event("gbflow-test-allocator",
                               getattr(allocator, "__module__", None) or "cupy")
        return model


@pytest.mark.parametrize("pool", [None, "1GB"])
def test_training_tasks_keep_an_rmm_pool_and_bypass_rmms_default(pool):
    """A LocalCUDACluster's worker imports cuDF, which hands CuPy to RMM's allocator over RMM's
    default resource (a cudaMalloc per array): training tasks take CuPy's pool instead. Started
    with an RMM pool (``rmm_pool_size``), the worker keeps it. The model is the same."""
    df = make_table(n_rows=4_000, seed=52)
    params = {"max_depth": 4, "device": "cuda"}
    expected = gbflow.train(df, label="y", params=params, num_boost_round=3, verbose=False)
    with dask_cuda.LocalCUDACluster(n_workers=1, rmm_pool_size=pool) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        client.run(__import__, "cudf")
        ddf = dd.from_pandas(cudf.from_pandas(df), npartitions=2)
        booster = gbflow.train(ddf, label="y", params=params, num_boost_round=3, verbose=False,
                               client=client, callbacks=[_AllocatorSeen()])
        seen = [message for _, message in client.get_events("gbflow-test-allocator")]
    assert booster.to_json() == expected.to_json()
    assert len(seen) == 1
    assert seen[0].startswith("rmm") == (pool is not None), seen
