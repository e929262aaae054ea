"""The GPU against the CPU: the same model bit for bit (squared error), bounded differences
(logistic, softmax), cuDF and CuPy in and out, device selection. Runs only where a GPU is
present."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import make_table

import gbflow
from gbflow.backend import cuda_available, get_backend
from gbflow.metrics import auc

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not cuda_available(),
                                 reason="no CUDA GPU with CuPy on this machine")]


def _fit(data, device, rounds=20, weight=None, **params):
    return gbflow.train(data, label="y", weight=weight, num_boost_round=rounds, verbose=False,
                        params={"device": device, **params})


@pytest.mark.parametrize("params", [
    {"max_depth": 6},
    {"max_depth": 8, "max_bin": 64, "reg_alpha": 0.3, "min_child_weight": 3.0},
    {"max_depth": 4, "max_bin": 1000, "subsample": 0.7, "colsample_bytree": 0.6, "gamma": 0.01},
    {"max_depth": 5, "subsample": 0.3, "sampling_method": "gradient_based"},
])
def test_squared_error_same_trees_on_gpu_and_cpu(params):
    """Splits, thresholds, default directions, leaf values: the model files are equal bytes."""
    df = make_table(n_rows=20000, n_features=8, seed=21)
    weight = np.random.default_rng(1).uniform(0.2, 3.0, len(df))
    cpu = _fit(df, "cpu", weight=weight, **params)
    gpu = _fit(df, "cuda", weight=weight, **params)
    assert gpu.to_json() == cpu.to_json()
    assert np.array_equal(gpu.predict(df).to_numpy(), cpu.predict(df).to_numpy())


@pytest.mark.parametrize("task,params", [
    ("binary", {"objective": "binary:logistic"}),
    ("multiclass", {"objective": "multi:softprob", "num_class": 3}),
])
def test_logistic_and_softmax_stay_close_to_the_cpu(task, params):
    """exp() on the GPU may differ from NumPy's in the last bit, so gradients may differ by an
    ulp: the models are not bit-identical, but their predictions agree to 1e-6."""
    df = make_table(n_rows=20000, n_features=8, task=task, seed=22)
    cpu = _fit(df, "cpu", max_depth=6, **params)
    gpu = _fit(df, "cuda", max_depth=6, **params)
    p_cpu, p_gpu = np.asarray(cpu.predict(df)), np.asarray(gpu.predict(df))
    assert np.max(np.abs(p_cpu - p_gpu)) < 1e-6
    if task == "binary":
        assert abs(auc(df["y"].to_numpy(), p_cpu) - auc(df["y"].to_numpy(), p_gpu)) < 1e-6


def test_margin_update_on_a_column_view():
    """The margin kernels write through a strided column view (one column of (n, groups))."""
    import cupy as cp

    from gbflow.backend import cuda_kernels, numpy_kernels
    rng = np.random.default_rng(3)
    row_index = rng.permutation(5000).astype(np.int32)
    start, count = np.array([0, 100, 100, 4500]), np.array([100, 0, 4400, 500])
    values = rng.normal(size=4)
    expected = np.zeros((5000, 3))
    numpy_kernels.add_leaf_values(expected[:, 1], row_index, start, count, values)
    margin = cp.zeros((5000, 3))
    cuda_kernels.add_leaf_values(margin[:, 1], cp.asarray(row_index), start, count, values)
    assert np.array_equal(cp.asnumpy(margin), expected)


def test_cupy_arrays_in_and_out():
    import cupy as cp
    df = make_table(n_rows=5000, seed=23)
    X = df.drop(columns="y").to_numpy(dtype=np.float32)
    y = df["y"].to_numpy()
    on_host = gbflow.train(X, y, params={"device": "cpu"}, num_boost_round=10, verbose=False)
    on_gpu = gbflow.train(cp.asarray(X), cp.asarray(y), num_boost_round=10, verbose=False)
    assert on_gpu.to_json() == on_host.to_json()
    prediction = on_gpu.predict(cp.asarray(X))
    assert isinstance(prediction, cp.ndarray)
    assert np.array_equal(cp.asnumpy(prediction), on_host.predict(X))


def test_cudf_in_and_out():
    cudf = pytest.importorskip("cudf")
    df = make_table(n_rows=5000, seed=24)
    df.index = pd.RangeIndex(7, 7 + 3 * len(df), 3)
    gdf = cudf.from_pandas(df)
    assert get_backend("auto", data_on_gpu=True).name == "cuda"
    on_gpu = _fit(gdf, "auto", rounds=10)  # "auto" trains where the data is
    on_cpu = _fit(df, "cpu", rounds=10)
    assert on_gpu.to_json() == on_cpu.to_json()
    prediction = on_gpu.predict(gdf)
    assert isinstance(prediction, cudf.Series) and prediction.name == "prediction"
    assert prediction.index.to_pandas().equals(df.index)
    assert np.array_equal(prediction.to_numpy(), on_cpu.predict(df).to_numpy())
    out = on_gpu.transform(gdf.assign(id=np.arange(len(gdf))), name="score")
    assert isinstance(out, cudf.DataFrame) and list(out.columns[-2:]) == ["id", "score"]
    assert np.array_equal(out["score"].to_numpy(), prediction.to_numpy())
    with pytest.raises(KeyError, match="label column 'target' is not in training data"):
        gbflow.train(gdf, label="target", verbose=False)


def test_cudf_nulls_are_missing_values():
    cudf = pytest.importorskip("cudf")
    df = make_table(n_rows=3000, seed=25)
    gdf = cudf.from_pandas(df)
    gdf["x0"] = gdf["x0"].nans_to_nulls()  # cuDF nulls, not NaN
    assert gdf["x0"].null_count > 0
    assert _fit(gdf, "cuda", rounds=5).to_json() == _fit(df, "cuda", rounds=5).to_json()
    # an integer column with nulls: NaN where null, like the float column
    codes = pd.array([None if i % 7 == 3 else i % 7 for i in range(len(df))], dtype="Int32")
    df["codes"] = codes.astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    gdf["codes"] = cudf.from_pandas(pd.Series(codes, index=df.index))
    assert gdf["codes"].dtype.kind == "i" and gdf["codes"].null_count > 0
    assert _fit(gdf, "cuda", rounds=5).to_json() == _fit(df, "cuda", rounds=5).to_json()
    label = df["y"].astype("Float64")
    label.iloc[:2] = pd.NA
    gdf["y"] = cudf.from_pandas(label)  # a null label is refused like NaN
    with pytest.raises(ValueError, match="label column 'y' .* 2 NaN"):
        _fit(gdf, "cuda", rounds=1)


def test_own_memory_pool_bypasses_the_process_allocator():
    """Dask-CUDA workers set RMM's allocator (a cudaMalloc per array): training tasks use CuPy's
    pool instead, for their thread only, and give its cached blocks back afterwards."""
    import cupy
    pool = cupy.get_default_memory_pool()
    calls = []

    def counting(size):
        calls.append(size)
        return pool.malloc(size)

    backend = get_backend("cuda")
    with cupy.cuda.using_allocator(counting):
        with backend.own_memory_pool():
            inside = cupy.zeros(1000)
            df = make_table(n_rows=2000, seed=3)
            _fit(df, "cuda", rounds=3)
        assert calls == []
        outside = cupy.zeros(1000)
        assert len(calls) == 1
    del inside, outside


def test_to_host_all_joins_neighbouring_views_and_keeps_values():
    """One wait for many arrays: views that follow each other in one allocation (the split
    search's results) share a copy; separate arrays, host arrays, empty arrays, odd sizes and
    non-contiguous views all come back with their values, dtypes and shapes."""
    import cupy as cp

    from gbflow.backend import cuda_kernels
    backend = get_backend("cuda")
    results = cuda_kernels._split_results(5)
    for i, r in enumerate(results):
        r[...] = ((cp.arange(r.size) + i) % 3).astype(r.dtype).reshape(r.shape)
    rng = np.random.default_rng(0)
    others = [cp.asarray(rng.integers(0, 9, size=7).astype(np.int8)),
              np.arange(3.0), cp.zeros(0, dtype=np.int64),
              cp.asarray(rng.normal(size=(4, 6)))[:, ::2]]
    arrays = others[:2] + list(results) + others[2:]
    fetched = backend.to_host_all(arrays)
    for a, f in zip(arrays, fetched):
        expected = a if isinstance(a, np.ndarray) else cp.asnumpy(a)
        assert isinstance(f, np.ndarray) and f.dtype == expected.dtype
        assert np.array_equal(f, expected)
    # the buffer is reused: earlier results are copies, not views of it
    again = backend.to_host_all([cp.full(40, 7, dtype=np.int64)])
    assert np.array_equal(fetched[2], cp.asnumpy(results[0])) and np.all(again[0] == 7)


def test_auto_device_trains_small_host_data_on_the_cpu(monkeypatch):
    """device="auto" on a GPU machine: host data of at most AUTO_CPU_CELLS cells trains on the
    CPU (the same model as device="cpu"), larger host data and device data on the GPU."""
    from conftest import record_backends

    from gbflow.backend import AUTO_CPU_CELLS
    chosen = record_backends(monkeypatch)
    small = make_table(n_rows=2000, seed=25)
    assert _fit(small, "auto", rounds=5).to_json() == _fit(small, "cpu", rounds=5).to_json()
    n_rows = AUTO_CPU_CELLS // (small.shape[1] - 1) + 1  # one row over the limit
    large = make_table(n_rows=n_rows, seed=26)
    _fit(large, "auto", rounds=2)
    assert chosen == ["cpu", "cpu", "cuda"]


def test_in_process_training_bypasses_only_rmms_default_allocator():
    """``import cudf`` sets RMM's allocator over its default resource for the whole process (a
    cudaMalloc per array: 1M x 28 rows trained 1.8-2.2x slower): in-process training then
    allocates from CuPy's pool. An allocator the user chose (here a counting one) is kept,
    and the memory report still reads the device stages under either."""
    import cupy

    from gbflow.binning import padded_width
    pool = cupy.get_default_memory_pool()
    calls = []

    def counting(size):
        calls.append(size)
        return pool.malloc(size)

    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, 10)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.float64)
    params = {"max_depth": 4, "device": "cuda"}
    with cupy.cuda.using_allocator(counting):
        booster = gbflow.train(X, y, params, 5, verbose=False)
    assert calls  # the user's allocator served training
    stages = booster.memory_report["device"]["by_stage"]
    assert min(stages["gradients"], stages["margins"]) >= len(y) * padded_width(10, 1)
    rmm_cupy = pytest.importorskip("rmm.allocators.cupy")
    seen = []

    class Allocator(gbflow.callback.TrainingCallback):
        def before_training(self, model):
            seen.append(cupy.cuda.get_allocator() == pool.malloc)
            return model

    before = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(rmm_cupy.rmm_cupy_allocator)
    try:
        gbflow.train(X, y, params, 2, verbose=False, callbacks=[Allocator()])
    finally:
        cupy.cuda.set_allocator(before)
    assert seen == [True]  # CuPy's pool, not RMM's default resource


@pytest.mark.parametrize("name", ["scatter_and_histogram", "scatter_and_histogram_equal",
                                  "build_histograms_shared", "build_histograms_shared_equal",
                                  "build_child_histograms_shared",
                                  "build_child_histograms_shared_equal"])
@pytest.mark.parametrize("bin_itemsize", [1, 2])
def test_histogram_kernels_fit_two_blocks_a_multiprocessor(name, bin_itemsize):
    """The shared-memory histogram kernels run 1024 threads a block and need two blocks a
    multiprocessor: at most 32 registers a thread (40 took the 10M numeric benchmark's trees
    40% longer). scatter_and_histogram_equal keeps to it without launch bounds (kernels.cu,
    HIST_BOUNDS), which a change of compiler or code could undo silently."""
    from gbflow.backend import cuda_kernels
    assert cuda_kernels._kernel(name, bin_itemsize).num_regs <= 32


def test_cuda_kernels_compile_at_creation_counted_as_compilation():
    """A kernel is compiled when created (NVRTC here: a source new to CuPy's cache), in this
    thread's compile seconds, so that no stage timer counts it; it then runs."""
    import time

    import cupy as cp

    from gbflow.backend import compiling, cuda_kernels
    source = (f"// {time.time_ns()}\n"
              'extern "C" __global__ void add_one(float* x) { x[threadIdx.x] += 1.0f; }')
    from cupy.cuda import compiler
    compiles = []
    original = compiler._compile_module_with_cache

    def counted(*args, **kwargs):
        compiles.append(args)
        return original(*args, **kwargs)

    before = compiling.compile_seconds()
    compiler._compile_module_with_cache = counted
    try:
        kernel = cuda_kernels._raw_kernel(source, "add_one", ("--fmad=false",))
        assert len(compiles) == 1 and compiling.compile_seconds() > before
        x = cp.zeros(4, dtype=cp.float32)
        kernel((1,), (4,), (x,))
    finally:
        compiler._compile_module_with_cache = original
    assert len(compiles) == 1  # the launch compiled nothing more
    assert x.get().tolist() == [1.0] * 4


_TRAIN_ON_THE_GPU = """
import numpy as np
import gbflow
from gbflow.backend import compiling
rng = np.random.default_rng(1)
X = rng.standard_normal((3000, 6)).astype(np.float32)
y = (X[:, 0] + rng.standard_normal(3000) > 0).astype(np.float32)
booster = gbflow.train(X, y, {"objective": "binary:logistic", "max_depth": 3, "device": "cuda",
                              "eval_metric": ["auc", "logloss"]}, 5, evals=[((X, y), "v")],
                       verbose=False)
gbflow.train(X, y % 3, {"objective": "multi:softprob", "num_class": 3, "max_depth": 3,
                        "device": "cuda"}, 3, verbose=False)
print(compiling.compile_seconds(), dict(booster.timings).get("compile", 0.0))
"""


def test_compile_on_the_gpu_fills_cupys_cache_so_that_a_new_process_compiles_nothing(tmp_path):
    """``gbflow compile --device cuda`` with empty kernel caches compiles gbflow's CUDA kernels
    (announced); a new process then trains on the GPU and spends (almost) no time compiling."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "CUPY_CACHE_DIR": str(tmp_path / "cupy"),
           "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    done = subprocess.run([sys.executable, "-m", "gbflow", "compile", "--device", "cuda"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "compiling the CUDA kernels" in done.stderr and "CuPy's kernel cache" in done.stderr
    assert "compiled: dense binary, sketched" in done.stderr
    after = subprocess.run([sys.executable, "-c", _TRAIN_ON_THE_GPU], capture_output=True,
                           text=True, env=env, timeout=300)
    assert after.returncode == 0, after.stderr
    assert "compiling the CUDA kernels" not in after.stderr
    seconds, in_timings = map(float, after.stdout.split()[-2:])
    assert seconds < 0.5 and in_timings < 0.5, after.stdout


def test_cupys_own_compiles_count_as_compilation():
    """An element-wise kernel new to CuPy (a new expression) compiles at its first call; with
    the CUDA backend in use that time is compilation, not the caller's stage."""
    import time

    import cupy as cp

    from gbflow.backend import compiling
    get_backend("cuda")
    kernel = cp.ElementwiseKernel("float32 x", "float32 y", f"y = x + {time.time_ns() % 1000}.0f",
                                  f"gbflow_test_add_{time.time_ns()}")
    before = compiling.compile_seconds()
    kernel(cp.zeros(4, dtype=cp.float32))
    assert compiling.compile_seconds() > before


def _registered(cupy, array) -> bool:
    host = getattr(cupy.cuda.runtime, "memoryTypeHost", 1)
    return cupy.cuda.runtime.pointerGetAttributes(array.ctypes.data).type == host


def test_host_arrays_are_registered_while_binned_then_released(monkeypatch, tmp_path):
    """Large host matrices are page-locked in place while the sketch and binning copy them (and
    then copied at the bus's speed), a block inside another's keeps the registration, memory
    maps and strided views are not registered, and every registration ends with the last
    block: also when training uses it and when the block raises; a paged training from such
    an array gives the in-core model."""
    import cupy

    from gbflow import prepare
    from gbflow.backend import cuda as cuda_backend
    monkeypatch.setattr(cuda_backend, "_REGISTER_BYTES", 1 << 10)
    backend = get_backend("cuda")
    rng = np.random.default_rng(3)
    X = rng.standard_normal((60_000, 12)).astype(np.float32)
    mapped = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32,
                                       shape=(1000, 12))
    with backend.host_registered([X, X[:0], X.T[::2], mapped]):
        assert _registered(cupy, X) and not _registered(cupy, mapped)
        with backend.host_registered([X]):  # the same array in another block: shared
            pass
        assert _registered(cupy, X)
        assert np.array_equal(cupy.asarray(X[100:200]).get(), X[100:200])
    assert not _registered(cupy, X)
    with pytest.raises(RuntimeError, match="inside"):
        with backend.host_registered([X]):
            raise RuntimeError("inside")
    assert not _registered(cupy, X)
    seen = []
    real = backend.host_registered

    def watched(arrays):
        seen.append([a is X for a in arrays])
        return real(arrays)
    monkeypatch.setattr(type(backend), "host_registered", lambda self, arrays: watched(arrays))
    y = (X[:, 0] + rng.standard_normal(len(X)) > 0).astype(np.float32)
    params = {"device": "cuda", "objective": "reg:squarederror", "max_depth": 5}
    paged = gbflow.train(X, y, {**params, "device_memory_limit": 200_000}, 5, verbose=False)
    in_core = gbflow.train(X, y, params, 5, verbose=False)
    assert seen and all(any(s) for s in seen), prepare.bin_into
    assert paged.to_json() == in_core.to_json()
    assert not _registered(cupy, X)
