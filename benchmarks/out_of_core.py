"""Out-of-core benchmark (issue F8): device memory, host-paged training and XGBoost's ExtMem.

    python benchmarks/out_of_core.py                   # GPU: 10M x 28, depth 8, 500 rounds
    python benchmarks/out_of_core.py --json out/f8.jsonl          # also one JSON line per case
    python benchmarks/out_of_core.py --cases bandwidth,gbflow-paged --rounds 100
    python benchmarks/out_of_core.py --no-xgboost                 # gbflow's cases alone
    python benchmarks/out_of_core.py --device cpu --rows 20000 --eval-rows 5000 --rounds 5 \\
        --depth 4 --cases gbflow-incore,xgb-incore,gbflow-paged,xgb-extmem   # CPU smoke run

Data: ``gpu_binary.make_data`` (the HIGGS-like problem) drawn once with NumPy on the host from a
fixed seed, as float32, ``--rows`` training rows and ``--eval-rows`` held-out rows from the same
draw, saved to a temporary folder that every case loads: every case sees the same bytes (the
checksum is printed). binary:logistic, learning rate 0.1, ``--depth``, ``--rounds``, max_bin 256.
"Binned size" is taken as rows x features bytes (one byte a value at max_bin <= 256), and the
limit of the paged cases is ``--limit-fraction`` of it (``--limit`` overrides).

Each case runs in its own process (this script again, with ``--worker CASE``), so each peak is
its own. Peak device memory: NVML's used memory of the GPU, sampled every 3 ms in a thread from
the process's start, minus the used memory at its start (before the CUDA context and the data),
so it includes the CUDA context (printed apart as "context"), the data where it is on the device,
the warm-up and training; sampling stops when training returns. "host +" is the process's
resident memory (/proc/self/statm, page-locked pages included) above its value when the timed
training started, sampled in the same thread. Each library is warmed up first (untimed) with the
case's parameters on the first 1,000,000 rows (all of them when fewer; gbflow's paged cases on
all the rows: CuPy compiles its reductions and scans for the sizes they meet, and a smaller
warm-up left 0.5-0.8 s of compiling in the timed run), 2 rounds, then its cached device memory
is freed. Train time: from the call to the model's completion, the
library's quantization included (gbflow's sketch and binning, XGBoost's DMatrix construction);
"ms/tree" excludes it (gbflow's "quantize" stage; XGBoost's DMatrix construction). AUC: scikit-
learn's roc_auc_score on the held-out rows (host arrays).

Cases:

- bandwidth: host-to-device copy rate: a page-locked (pinned) host buffer of --bandwidth-mib MiB
  copied into a device buffer with cudaMemcpyAsync on one stream, 2 warm-up copies then
  --repeats timed with CUDA events; GB/s = 1e9 bytes/s, the median is the reference. A pageable
  (ordinary NumPy) buffer's rate is printed for information.
- gbflow-incore: the data uploaded to the GPU (CuPy arrays), ``gbflow.train`` with device cuda.
- gbflow-incore-gbs: the same with sampling_method="gradient_based", subsample --subsample: the
  in-core throughput "at the same parameters" that the paged sampled case is compared with.
- xgb-incore: XGBoost's QuantileDMatrix from the same CuPy arrays, ``xgb.train``, device cuda.
- gbflow-paged: the data as host NumPy arrays, device cuda, device_memory_limit = the limit.
- gbflow-paged-gbs: the same with gradient-based sampling.
- xgb-extmem: XGBoost's ExtMemQuantileDMatrix over an ``xgboost.DataIter`` of --batches host
  NumPy batches, each uploaded to the GPU in ``next`` (XGBoost's GPU ExtMem takes device batches
  only), cache on the host (on_host=True), cache_host_ratio = 1 - limit fraction (a quarter of
  its cache on the GPU, as gbflow's limit; --xgb-cache-host-ratio auto: XGBoost's estimate),
  under the CUDA async memory pool XGBoost's docs ask for (use_cuda_async_pool, CuPy's
  MemoryAsyncPool on the default pool, release threshold 90% of the GPU's memory).
- xgb-extmem-gbs (not run unless named): xgb-extmem with gradient-based sampling.

Raw data larger than the device (not run unless named): the training rows are also written as
--batches Parquet files (row groups of 2**20 rows), and the limit of these cases is a third of
the raw float32 size (rows x features x 4 bytes; --limit overrides), so the raw values are three
times the limit while their bins fit it:

- gbflow-parquet: ``gbflow.train(folder, "y")`` in this process, device cuda (reading the files
  timed).
- xgb-parquet: XGBoost's QuantileDMatrix over an ``xgboost.DataIter`` reading the same files one
  at a time (pandas), each batch uploaded to the GPU in ``next`` (XGBoost's iterator input).
- gbflow-dask-parquet: a ``dask_cuda.LocalCUDACluster`` of one worker, ``dask.dataframe.
  read_parquet(folder)`` (pandas partitions, one a file), ``gbflow.train(ddf, "y")`` (the
  worker joins its partitions in host memory when they would not fit; peak device memory
  includes the worker process's).

Their model files are compared with gbflow-incore's (all but the label column's name).

Paged streaming rate: time per tree = (train time - quantization) / rounds; bytes streamed per
tree = binned size x (depth + 1), assuming every tree reads all pages once per level (depth
histogram passes) plus once more (the last level's row positions / margins), and that all pages
stream (if the limit keeps a share resident, the true rate is lower by that share). Targets
(PASS/MISS at the end): in-core peak memory gbflow <= XGBoost; paged streaming >= 70% of the
pinned copy rate; paged with gradient-based sampling >= 50% of in-core throughput at the same
parameters (train time ratio, quantization included) and AUC within 0.002 of in-core training
without sampling; and the paged model file equal to the in-core one. On a CPU (--device cpu), a
smoke run: no NVML (device memory n/a), XGBoost on the CPU (ExtMem cached on disk).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
from gpu_binary import make_data  # the same HIGGS-like problem as the other GPU benchmarks

CASES = ("bandwidth", "gbflow-incore", "gbflow-incore-gbs", "xgb-incore", "gbflow-paged",
         "gbflow-paged-gbs", "xgb-extmem", "xgb-extmem-gbs", "gbflow-parquet", "xgb-parquet",
         "gbflow-dask-parquet")
DEFAULT_CASES = CASES[:7]
GiB = 2**30
# Warm-up rows: gbflow's sketch compiles kernels that only data of more than about 200,000 rows
# uses (3 to 4 s on an H100), so a 5,000-row warm-up leaves them in the first timed run.
WARM_ROWS = 1_000_000


class NotAvailable(Exception):
    """The case cannot run here (an unknown parameter, no GPU, ...): reported, not an error."""


# ------------------------------------------------------------------------------------ memory


class Memory:
    """Peak device memory (NVML used memory above the value at construction) and peak host
    resident memory (above ``begin_host``), sampled every ``interval`` seconds in a thread."""

    def __init__(self, gpu: bool, interval: float = 0.003):
        self.interval, self.note = interval, ""
        self._nvml = self._handle = None
        if gpu:
            try:
                import pynvml
                pynvml.nvmlInit()
                visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
                index = int(visible) if visible.isdigit() else 0
                self._nvml, self._handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
            except Exception as e:  # no pynvml or no driver: the column says n/a
                self.note = f"no NVML ({type(e).__name__}: {e})"
        self.base = self._used()
        self.device_peak = 0 if self.base is not None else None
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._host_base, self.host_peak = None, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _used(self):
        if self._handle is None:
            return None
        return self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used

    def _rss(self):
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * self._page
        except OSError:
            return None

    def above_start(self):
        """Device bytes in use now above the start (None without NVML)."""
        used = self._used()
        return None if used is None else used - self.base

    def sample(self):
        used = self._used()
        if used is not None:
            self.device_peak = max(self.device_peak, used - self.base)
        if self._host_base is not None:
            rss = self._rss()
            if rss is not None:
                self.host_peak = max(self.host_peak, rss - self._host_base)

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.interval)

    def start(self):
        self._thread.start()
        return self

    def begin_host(self):
        rss = self._rss()
        if rss is not None:
            self._host_base, self.host_peak = rss, 0

    def stop(self):
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self.sample()
            self._host_base = None


# ------------------------------------------------------------------------------ data, helpers


def data_paths(folder: str) -> dict:
    return {name: os.path.join(folder, f"{name}.npy") for name in ("X", "y", "Xt", "yt")}


def checksum(*arrays) -> str:
    digest = hashlib.sha256()
    for a in arrays:
        digest.update(np.ascontiguousarray(a).view(np.uint8).reshape(-1))
    return digest.hexdigest()[:16]


def write_data(args, folder: str) -> str:
    """Draw the data once (NumPy, seeded), float32, and save it; returns its checksum."""
    total = args.rows + args.eval_rows
    X, y = make_data(np, total, args.features, seed=args.seed)
    X = np.ascontiguousarray(X, dtype=np.float32)
    y = np.ascontiguousarray(y, dtype=np.float32)
    paths = data_paths(folder)
    np.save(paths["X"], X[:args.rows])
    np.save(paths["y"], y[:args.rows])
    np.save(paths["Xt"], X[args.rows:])
    np.save(paths["yt"], y[args.rows:])
    return checksum(X, y)


def load_data(folder: str):
    paths = data_paths(folder)
    return tuple(np.load(paths[name]) for name in ("X", "y", "Xt", "yt"))


def warm_rows(n_rows: int, whole: bool = False) -> int:
    return n_rows if whole else min(n_rows, WARM_ROWS)


def binned_bytes(args) -> int:
    return args.rows * args.features


def parse_size(text: str) -> int:
    """Bytes of "8GB", "512MiB", "1e9" or "123" (for the printed numbers: gbflow gets the text)."""
    units = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
             "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
    s = text.strip().lower().replace(" ", "")
    number = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    return int(float(number) * units[s[len(number):]])


def limit_value(args):
    """The device_memory_limit given to gbflow and its bytes."""
    if args.limit:
        return (args.limit if not args.limit.isdigit() else int(args.limit)), \
            parse_size(args.limit)
    value = max(1, int(args.limit_fraction * binned_bytes(args)))
    return value, value


def model_digest(booster) -> str:
    """The model file's digest, its label column name left out (arrays have none, the Parquet
    cases' is "y"): the rest of the file must be equal."""
    model = json.loads(booster.to_json())
    model.pop("label_name", None)
    return hashlib.sha256(json.dumps(model, sort_keys=True).encode()).hexdigest()[:16]


def roc_auc(y, p) -> float:
    from sklearn.metrics import roc_auc_score
    return float(roc_auc_score(np.asarray(y, dtype=np.float64), np.asarray(p, dtype=np.float64)))


def gib(n) -> str:
    return "n/a" if n is None else f"{n / GiB:.2f}"


class Device:
    """CuPy on the GPU (context made here, its bytes noted), NumPy on the CPU."""

    def __init__(self, gpu: bool, memory: Memory, result: dict):
        self.gpu = gpu
        if not gpu:
            self.xp = np
            result["device_name"] = f"CPU, {os.cpu_count()} cores"
            return
        try:
            import cupy as cp
            cp.cuda.runtime.getDeviceCount()
        except Exception as e:
            raise NotAvailable(f"no CUDA device through CuPy ({type(e).__name__}: {e})") from None
        self.xp = cp
        cp.cuda.Device(0).use()
        cp.cuda.runtime.free(cp.cuda.runtime.malloc(1))  # the context, before any data
        props = cp.cuda.runtime.getDeviceProperties(0)
        result["device_name"] = props["name"].decode()
        result["cupy"] = cp.__version__
        result["context_bytes"] = memory.above_start()

    def to_device(self, a):
        return self.xp.asarray(a) if self.gpu else a

    def to_host(self, a):
        return self.xp.asnumpy(a) if self.gpu else np.asarray(a)

    def sync(self):
        if self.gpu:
            self.xp.cuda.Device().synchronize()

    def free(self):
        if self.gpu:
            self.sync()
            self.xp.get_default_memory_pool().free_all_blocks()
            self.xp.get_default_pinned_memory_pool().free_all_blocks()


# ------------------------------------------------------------------------------------ cases


def run_bandwidth(args, memory, result):
    if args.device != "cuda":
        raise NotAvailable("the copy bandwidth needs --device cuda")
    device = Device(True, memory, result)
    cp = device.xp
    import cupyx
    nbytes = args.bandwidth_mib * 2**20
    rt = cp.cuda.runtime
    host = cupyx.empty_pinned((nbytes,), dtype=np.uint8)
    host[:] = 1
    target = cp.empty(nbytes, dtype=cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def copy(source_ptr) -> float:
        start.record(stream)
        rt.memcpyAsync(target.data.ptr, source_ptr, nbytes, rt.memcpyHostToDevice, stream.ptr)
        end.record(stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / 1000

    for _ in range(2):
        copy(host.ctypes.data)
    pinned = [nbytes / 1e9 / copy(host.ctypes.data) for _ in range(args.repeats)]
    pageable_host = np.ones(nbytes, dtype=np.uint8)
    copy(pageable_host.ctypes.data)
    pageable = [nbytes / 1e9 / copy(pageable_host.ctypes.data) for _ in range(3)]
    memory.stop()
    result.update(bytes=nbytes, repeats=args.repeats, h2d_pinned_gbps=float(np.median(pinned)),
                  h2d_pinned_best_gbps=float(max(pinned)),
                  h2d_pageable_gbps=float(np.median(pageable)))
    print(f"{result['case']:18s} host-to-device {nbytes / 2**20:.0f} MiB x {args.repeats}: pinned "
          f"median {result['h2d_pinned_gbps']:.2f} GB/s (best {max(pinned):.2f}, worst "
          f"{min(pinned):.2f}); pageable median {result['h2d_pageable_gbps']:.2f} GB/s",
          flush=True)


def gbflow_params(case: str, args) -> dict:
    params = {"objective": "binary:logistic", "max_depth": args.depth, "learning_rate": 0.1,
              "max_bin": args.max_bin, "device": args.device}
    if case.endswith("-gbs"):
        params.update(sampling_method="gradient_based", subsample=args.subsample)
    if "paged" in case:
        params["device_memory_limit"] = limit_value(args)[0]
    if "parquet" in case:
        params["device_memory_limit"] = raw_limit(args)
    return params


def raw_limit(args) -> int:
    """The parquet cases' device_memory_limit: a third of the raw float32 training values."""
    return parse_size(args.limit) if args.limit else args.rows * args.features * 4 // 3


def parquet_folder(folder: str) -> str:
    return os.path.join(folder, "parquet")


def write_parquet(args, folder: str) -> None:
    """The training rows as --batches Parquet files of columns f0.. and y (float32)."""
    import pandas as pd
    X, y, _, _ = load_data(folder)
    target = parquet_folder(folder)
    os.makedirs(target, exist_ok=True)
    bounds = np.linspace(0, len(X), max(1, args.batches) + 1).astype(np.int64)
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        frame = pd.DataFrame(X[a:b], columns=[f"f{j}" for j in range(X.shape[1])])
        frame["y"] = y[a:b]
        frame.to_parquet(os.path.join(target, f"part-{k:04d}.parquet"), index=False,
                         row_group_size=2**20)


def train_dask_parquet(gbflow, args, params):
    """gbflow.train on a one-worker LocalCUDACluster over the Parquet folder."""
    import dask.dataframe as dd
    from distributed import Client
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as e:
        raise NotAvailable(f"no dask_cuda ({e})") from None
    with LocalCUDACluster(n_workers=1) as cluster, Client(cluster) as client:
        ddf = dd.read_parquet(parquet_folder(args.data_dir))
        warm = dd.from_pandas(ddf.partitions[0].compute().head(warm_rows(args.rows)),
                              npartitions=1)
        gbflow.train(warm, "y", params=params, num_boost_round=2, verbose=False,
                     client=client)
        start = time.perf_counter()
        booster = gbflow.train(ddf, "y", params=params, num_boost_round=args.rounds,
                               verbose=False, client=client)
        return booster, time.perf_counter() - start


def run_gbflow(args, memory, result):
    import gbflow
    case, gpu = result["case"], args.device == "cuda"
    params = gbflow_params(case, args)
    result["params"] = params
    result["gbflow"] = getattr(gbflow, "__version__", "?")
    try:  # the parameters alone, before a GPU or data is touched
        from gbflow.params import make_params
        make_params(params)
    except ImportError:
        pass
    except (ValueError, TypeError) as e:
        raise NotAvailable(str(e)) from None
    if case == "gbflow-dask-parquet":
        booster, seconds = train_dask_parquet(gbflow, args, params)
        memory.stop()
        X, y, Xt, yt = load_data(args.data_dir)
        result.update(data_bytes=int(X.nbytes + y.nbytes), data_on="Parquet", seconds=seconds,
                      device_name="dask worker", limit_bytes=params["device_memory_limit"],
                      auc=roc_auc(yt, booster.predict(Xt)),
                      timings={k: float(v) for k, v in booster.timings.items()},
                      quantize_seconds=booster.timings.get("quantize"),
                      model_digest=model_digest(booster))
        return
    device = Device(gpu, memory, result)
    X, y, Xt, yt = load_data(args.data_dir)
    paged = "paged" in case or "parquet" in case
    if not paged:
        X, y = device.to_device(X), device.to_device(y)
    result.update(data_bytes=int(X.nbytes + y.nbytes),
                  data_on="device" if gpu and not paged else "host")
    warm = dict(params)
    n = warm_rows(len(X), whole="paged" in case)
    if "parquet" in case:  # raw values three times the limit in the warm-up too
        warm["device_memory_limit"] = max(1, n * args.features * 4 // 3)
    elif paged and n < len(X):  # the warm-up pages too
        warm["device_memory_limit"] = max(1, int(args.limit_fraction * n * args.features))
    try:
        gbflow.train(X[:n], y[:n], params=warm, num_boost_round=2, verbose=False)
    except (ValueError, TypeError, NotImplementedError) as e:
        raise NotAvailable(f"{type(e).__name__}: {e}") from None
    device.free()
    memory.begin_host()
    device.sync()
    start = time.perf_counter()
    if case == "gbflow-parquet":
        del X, y  # read from the files
        booster = gbflow.train(parquet_folder(args.data_dir), "y", params=params,
                               num_boost_round=args.rounds, verbose=False)
        X = y = None
    else:
        booster = gbflow.train(X, y, params=params, num_boost_round=args.rounds, verbose=False)
    device.sync()
    seconds = time.perf_counter() - start
    memory.stop()
    timings = {k: float(v) for k, v in booster.timings.items()}
    extra = {k: v for k, v in vars(booster).items() if not k.startswith("_")
             and any(w in k for w in ("page", "stream", "memory", "paging", "device"))}
    del X, y
    device.free()
    prediction = device.to_host(booster.predict(device.to_device(Xt)))
    result.update(seconds=seconds, quantize_seconds=timings.get("quantize"),
                  auc=roc_auc(yt, prediction), timings=timings,
                  model_digest=model_digest(booster))
    if extra:
        result["booster_info"] = json.loads(json.dumps(extra, default=str))
    if paged:
        result["limit_bytes"] = parse_size(str(params["device_memory_limit"]))


def data_iter(xgb, n_batches: int, load, to_device, **iter_args):
    """An ``xgboost.DataIter`` over ``n_batches`` batches: batch k is ``load(k)`` -> host (X, y),
    each moved by ``to_device`` (held while XGBoost reads it). iter_args: DataIter's own."""

    class Batches(xgb.DataIter):
        def __init__(self):
            self._it, self._held = 0, None
            super().__init__(**iter_args)

        def next(self, input_data) -> bool:
            if self._it == n_batches:
                return False
            X, y = load(self._it)
            self._held = (to_device(X), to_device(y))  # alive while XGBoost reads
            input_data(data=self._held[0], label=self._held[1])
            self._it += 1
            return True

        def reset(self) -> None:
            self._it, self._held = 0, None

    return Batches()


def host_batches(xgb, X, y, n_batches: int, to_device, cache_prefix: str):
    """An ``xgboost.DataIter`` over row batches of host arrays, each moved by ``to_device``,
    cached on the host (external memory)."""
    bounds = np.linspace(0, len(X), max(1, n_batches) + 1).astype(np.int64)
    return data_iter(xgb, len(bounds) - 1,
                     lambda k: (X[bounds[k]:bounds[k + 1]], y[bounds[k]:bounds[k + 1]]),
                     to_device, cache_prefix=cache_prefix, on_host=True)


def parquet_batches(xgb, files: list, to_device):
    """An ``xgboost.DataIter`` reading ``files`` one at a time (pandas), label column y, each
    batch moved by ``to_device``."""
    import pandas as pd

    def load(k: int):
        frame = pd.read_parquet(files[k])
        y = frame.pop("y").to_numpy()
        return frame.to_numpy(np.float32), y

    return data_iter(xgb, len(files), load, to_device)


def async_pool(xgb, device: Device, stack: contextlib.ExitStack, result: dict) -> None:
    """XGBoost's recommended setting for GPU external memory: the CUDA async pool (default
    pool, release threshold 90% of the device's memory) for XGBoost and for CuPy."""
    cp = device.xp
    rt = cp.cuda.runtime
    notes = []
    try:
        pool = rt.deviceGetDefaultMemPool(0)
        release_threshold = getattr(rt, "cudaMemPoolAttrReleaseThreshold", 4)
        rt.memPoolSetAttribute(pool, release_threshold, int(0.9 * rt.memGetInfo()[1]))
        stack.enter_context(cp.cuda.using_allocator(cp.cuda.MemoryAsyncPool("default").malloc))
        notes.append("CuPy on the CUDA async pool")
    except Exception as e:
        notes.append(f"CuPy async pool not set ({type(e).__name__}: {e})")
    try:
        stack.enter_context(xgb.config_context(use_cuda_async_pool=True))
        notes.append("use_cuda_async_pool=True")
    except Exception as e:
        notes.append(f"use_cuda_async_pool not available ({type(e).__name__}: {e})")
    result["pool"] = "; ".join(notes)


def run_xgboost(args, memory, result):
    try:
        import xgboost as xgb
    except ImportError as e:
        raise NotAvailable(f"no xgboost ({e})") from None
    case, gpu = result["case"], args.device == "cuda"
    extmem = "extmem" in case
    from_files = case == "xgb-parquet"
    params = {"objective": "binary:logistic", "max_depth": args.depth, "eta": 0.1,
              "max_bin": args.max_bin, "tree_method": "hist", "device": args.device}
    if case.endswith("-gbs"):
        params.update(sampling_method="gradient_based", subsample=args.subsample)
    result.update(params=params, xgboost=xgb.__version__)
    device = Device(gpu, memory, result)
    X, y, Xt, yt = load_data(args.data_dir)
    if not extmem and not from_files:
        X, y = device.to_device(X), device.to_device(y)
    result.update(data_bytes=int(X.nbytes + y.nbytes),
                  data_on="device" if gpu and not extmem and not from_files else "host")
    ratio = None
    if extmem and gpu and args.xgb_cache_host_ratio != "auto":
        ratio = max(0.0, min(1.0, 1 - args.limit_fraction)) \
            if args.xgb_cache_host_ratio == "match" else float(args.xgb_cache_host_ratio)
    cache = tempfile.mkdtemp(prefix="xgb-extmem-")
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, cache, ignore_errors=True)
        if extmem and gpu:
            async_pool(xgb, device, stack, result)

        def matrix(Xa, ya, batches: int, prefix: str):
            if case == "xgb-parquet" and prefix == "train":
                folder = parquet_folder(args.data_dir)
                return xgb.QuantileDMatrix(parquet_batches(xgb, sorted(
                    os.path.join(folder, f) for f in os.listdir(folder)), device.to_device),
                    max_bin=args.max_bin)
            if not extmem:
                return xgb.QuantileDMatrix(Xa, ya, max_bin=args.max_bin)
            it = host_batches(xgb, Xa, ya, batches, device.to_device, os.path.join(cache, prefix))
            if ratio is None:
                return xgb.ExtMemQuantileDMatrix(it, max_bin=args.max_bin)
            try:
                return xgb.ExtMemQuantileDMatrix(it, max_bin=args.max_bin,
                                                 cache_host_ratio=ratio)
            except TypeError:  # an XGBoost without the adaptive cache
                result["cache_host_ratio_note"] = "cache_host_ratio not taken"
                return xgb.ExtMemQuantileDMatrix(it, max_bin=args.max_bin)

        n = warm_rows(len(X))
        try:
            warm = matrix(X[:n], y[:n], 2, "warm")
            xgb.train(params, warm, 2)
        except xgb.core.XGBoostError as e:
            raise NotAvailable(str(e).strip().splitlines()[0]) from None
        del warm
        device.free()
        memory.begin_host()
        device.sync()
        start = time.perf_counter()
        d = matrix(X, y, args.batches, "train")
        quantize = time.perf_counter() - start
        booster = xgb.train(params, d, args.rounds)
        booster.predict(xgb.DMatrix(X[:10]))  # XGBoost trains lazily: make sure it finished
        device.sync()
        seconds = time.perf_counter() - start
        memory.stop()
        del d, X, y
        device.free()
        prediction = device.to_host(booster.inplace_predict(device.to_device(Xt)))
    result.update(seconds=seconds, quantize_seconds=quantize, auc=roc_auc(yt, prediction))
    if extmem:
        result.update(batches=args.batches, cache_host_ratio=ratio if gpu else None)


def worker(args) -> int:
    case = args.worker
    result = {"case": case, "status": "ok", "device": args.device, "rows": args.rows,
              "features": args.features, "depth": args.depth, "rounds": args.rounds,
              "max_bin": args.max_bin, "eval_rows": args.eval_rows}
    memory = Memory(args.device == "cuda").start()  # the baseline: before context and data
    try:
        if case == "bandwidth":
            run_bandwidth(args, memory, result)
        elif case.startswith("gbflow"):
            run_gbflow(args, memory, result)
        else:
            run_xgboost(args, memory, result)
    except NotAvailable as e:
        result["status"] = f"not available: {e}"
        print(f"{case:18s} not available: {e}", flush=True)
    finally:
        memory.stop()
    result.update(peak_device_bytes=memory.device_peak, host_peak_bytes=memory.host_peak)
    if memory.note:
        result["memory_note"] = memory.note
    if result["status"] == "ok" and case != "bandwidth":
        derive(result, args)
        report(result)
    with open(args.result_file, "w") as f:
        json.dump(result, f, default=str)
    return 0


def derive(result: dict, args) -> None:
    rounds = max(args.rounds, 1)
    seconds, quantize = result["seconds"], result.get("quantize_seconds") or 0.0
    result["ms_per_round"] = 1000 * seconds / rounds
    result["ms_per_tree"] = 1000 * (seconds - quantize) / rounds
    if result["case"] == "gbflow-paged":
        passes = args.depth + 1
        per_tree = max(seconds - quantize, 1e-12) / rounds
        result.update(binned_bytes=binned_bytes(args), passes_per_tree=passes,
                      stream_gbps=binned_bytes(args) * passes / per_tree / 1e9)
        try:  # for information: gbflow pads binned rows (to 32 bytes for 28 features)
            from gbflow.binning import padded_width
            width = padded_width(args.features, 1 if args.max_bin <= 256 else 2)
            width *= 1 if args.max_bin <= 256 else 2
            result.update(padded_row_bytes=width,
                          stream_gbps_padded=args.rows * width * passes / per_tree / 1e9)
        except Exception:  # no such helper in this gbflow: the figure is left out
            pass


def report(r: dict) -> None:
    context = r.get("context_bytes")
    line = (f"{r['case']:18s} {r['seconds']:8.2f} s  {r['ms_per_round']:8.2f} ms/round  "
            f"{r['ms_per_tree']:8.2f} ms/tree  AUC {r['auc']:.5f}  peak device "
            f"{gib(r['peak_device_bytes'])} GiB (context {gib(context)})  host +"
            f"{gib(r['host_peak_bytes'])} GiB  data {gib(r['data_bytes'])} GiB on "
            f"{r['data_on']}")
    print(line, flush=True)
    if "timings" in r:
        stages = ", ".join(f"{k} {v:.2f}s" for k, v in r["timings"].items() if k != "total")
        print(f"{'':18s} gbflow stages: {stages}", flush=True)
    info = dict(r.get("booster_info") or {})
    stages = info.pop("memory_report", None)
    if info:
        print(f"{'':18s} booster: {str(info)[:300]}", flush=True)
    if isinstance(stages, dict) and stages.get("device"):
        device, mib = stages["device"], lambda b: f"{b / 2**20:.0f}"
        by_stage = ", ".join(f"{k} {mib(v - device['start'])}"
                             for k, v in device["by_stage"].items())
        held = ", ".join(f"{k} {mib(v)}" for k, v in stages["held"].items())
        print(f"{'':18s} memory_report (MiB in CuPy's pool above the start, "
              f"{mib(device['start'])}): peak {mib(device['peak'] - device['start'])}; "
              f"by stage: {by_stage}; held: {held}", flush=True)
    if "limit_bytes" in r:
        print(f"{'':18s} device_memory_limit {r['params']['device_memory_limit']!r} = "
              f"{r['limit_bytes'] / 2**20:.1f} MiB", flush=True)
    if "stream_gbps" in r:
        print(f"{'':18s} effective streaming {r['stream_gbps']:.2f} GB/s = binned "
              f"{r['binned_bytes'] / 1e6:.0f} MB x {r['passes_per_tree']} passes per tree "
              f"(depth + 1, assumed) / {r['ms_per_tree']:.2f} ms per tree"
              + (f"; {r['stream_gbps_padded']:.2f} GB/s counting gbflow's rows padded to "
                 f"{r['padded_row_bytes']} bytes" if "stream_gbps_padded" in r else ""),
              flush=True)
    if "pool" in r or "cache_host_ratio" in r:
        print(f"{'':18s} xgboost {r.get('xgboost')}: {r.get('batches')} batches, "
              f"cache_host_ratio {r.get('cache_host_ratio')}, {r.get('pool', 'default pool')}"
              + (f", {r['cache_host_ratio_note']}" if "cache_host_ratio_note" in r else ""),
              flush=True)


# ------------------------------------------------------------------------------------ driver


WORKER_OPTIONS = ("rows", "features", "depth", "rounds", "eval_rows", "max_bin", "device",
                  "limit_fraction", "limit", "batches", "subsample", "bandwidth_mib", "repeats",
                  "xgb_cache_host_ratio", "seed")


def run_case(case: str, args, data_dir: str) -> dict:
    fd, path = tempfile.mkstemp(suffix=".json", prefix="gbflow-f8-")
    os.close(fd)
    command = [sys.executable, os.path.abspath(__file__), "--worker", case,
               "--data-dir", data_dir, "--result-file", path]
    for name in WORKER_OPTIONS:
        value = getattr(args, name)
        if value is not None:
            command += [f"--{name.replace('_', '-')}", str(value)]
    try:
        code = subprocess.run(command, timeout=args.timeout).returncode
        status = f"failed (exit code {code})"
    except subprocess.TimeoutExpired:
        status = f"timed out after {args.timeout} s"
    try:
        with open(path) as f:
            result = json.load(f)
    except (OSError, ValueError):
        result = {"case": case, "status": status}
        print(f"{case:18s} {status}", flush=True)
    finally:
        os.unlink(path)
    return result


def device_header(args) -> str:
    if args.device != "cuda":
        return f"CPU, {os.cpu_count()} cores (smoke mode: no device memory)"
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else name
        total = pynvml.nvmlDeviceGetMemoryInfo(h).total
        text = f"{name}, {total / GiB:.0f} GiB"
        with contextlib.suppress(Exception):
            text += (f", PCIe gen {pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h)} "
                     f"x{pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)}")
        with contextlib.suppress(Exception):
            driver = pynvml.nvmlSystemGetDriverVersion()
            text += f", driver {driver.decode() if isinstance(driver, bytes) else driver}"
        return text
    except Exception as e:
        return f"GPU (no NVML: {type(e).__name__}: {e})"


def versions(args) -> str:
    parts = [f"Python {sys.version.split()[0]}", f"NumPy {np.__version__}"]
    for module in ("gbflow", "xgboost", "cupy") if args.device == "cuda" else ("gbflow",
                                                                              "xgboost"):
        try:
            parts.append(f"{module} {__import__(module).__version__}")
        except Exception:
            parts.append(f"{module} absent")
    return ", ".join(parts)


def ok(results: dict, case: str):
    r = results.get(case)
    return r if r is not None and r.get("status") == "ok" else None


def why(results: dict, *cases) -> str:
    for case in cases:
        r = results.get(case)
        if r is None:
            return f"{case} not run"
        if r.get("status") != "ok":
            return f"{case}: {r.get('status')}"
    return ""


def verdict(passed: bool) -> str:
    return "PASS" if passed else "MISS"


def summary(results: dict, args) -> None:
    print("\nsummary:")
    print(f"  {'case':18s} {'train s':>9s} {'ms/round':>9s} {'ms/tree':>9s} {'AUC':>8s} "
          f"{'peak GiB':>9s} {'host+GiB':>9s} {'data GiB':>9s}  status")
    for case, r in results.items():
        if case == "bandwidth":
            if r.get("status") == "ok":
                print(f"  {case:18s} pinned host-to-device {r['h2d_pinned_gbps']:.2f} GB/s "
                      f"(pageable {r['h2d_pageable_gbps']:.2f} GB/s)")
            else:
                print(f"  {case:18s} {r.get('status')}")
            continue
        if r.get("status") != "ok":
            print(f"  {case:18s} {r.get('status')}")
            continue
        print(f"  {case:18s} {r['seconds']:9.2f} {r['ms_per_round']:9.2f} "
              f"{r['ms_per_tree']:9.2f} {r['auc']:8.5f} {gib(r['peak_device_bytes']):>9s} "
              f"{gib(r['host_peak_bytes']):>9s} {gib(r['data_bytes']):>5s} {r['data_on']:6s} ok")
    print("\ntargets (F8):")
    g, x = ok(results, "gbflow-incore"), ok(results, "xgb-incore")
    if g and x and g["peak_device_bytes"] is not None and x["peak_device_bytes"] is not None:
        ratio = g["peak_device_bytes"] / max(x["peak_device_bytes"], 1)
        print(f"  {verdict(ratio <= 1)}  in-core peak device memory gbflow <= XGBoost: "
              f"{gib(g['peak_device_bytes'])} vs {gib(x['peak_device_bytes'])} GiB "
              f"({ratio:.2f}x)")
    else:
        print(f"  n/a   in-core peak memory: "
              f"{why(results, 'gbflow-incore', 'xgb-incore') or 'no device memory (no NVML)'}")
    if g and x:
        print(f"  info  in-core train time gbflow/XGBoost {g['seconds'] / x['seconds']:.2f}x "
              f"({g['seconds']:.2f} s vs {x['seconds']:.2f} s), AUC difference "
              f"{g['auc'] - x['auc']:+.5f}")
    p, bw = ok(results, "gbflow-paged"), ok(results, "bandwidth")
    if p and bw:
        share = p["stream_gbps"] / bw["h2d_pinned_gbps"]
        print(f"  {verdict(share >= 0.70)}  paged streaming >= 70% of the host-to-device rate: "
              f"{p['stream_gbps']:.2f} GB/s (binned size x {p['passes_per_tree']} passes per "
              f"tree, assumed) vs {bw['h2d_pinned_gbps']:.2f} GB/s pinned = {100 * share:.0f}%")
    else:
        print(f"  n/a   paged streaming: {why(results, 'gbflow-paged', 'bandwidth')}")
    if p and g:
        same = p.get("model_digest") == g.get("model_digest")
        print(f"  {verdict(same)}  device_memory_limit keeps the model: gbflow-paged's model "
              f"file {'equals' if same else 'differs from'} gbflow-incore's (AUC "
              f"{p['auc']:.5f} vs {g['auc']:.5f}); paged/in-core time "
              f"{p['seconds'] / g['seconds']:.2f}x")
    s = ok(results, "gbflow-paged-gbs")
    reference = ok(results, "gbflow-incore-gbs")
    label = "in-core at the same parameters (gbflow-incore-gbs)"
    if reference is None and g is not None:
        reference, label = g, "in-core without sampling (gbflow-incore-gbs not run)"
    if s and reference:
        share = reference["seconds"] / s["seconds"]
        trees = reference["ms_per_tree"] / max(s["ms_per_tree"], 1e-12)
        print(f"  {verdict(share >= 0.50)}  paged gradient-based sampling >= 50% of the "
              f"throughput of {label}: {100 * share:.0f}% ({s['seconds']:.2f} s vs "
              f"{reference['seconds']:.2f} s; {100 * trees:.0f}% per tree after quantization)")
    else:
        print(f"  n/a   paged sampled throughput: "
              f"{why(results, 'gbflow-paged-gbs', 'gbflow-incore-gbs')}")
    if s and g:
        diff = s["auc"] - g["auc"]
        print(f"  {verdict(abs(diff) <= 0.002)}  paged gradient-based sampling AUC within 0.002 "
              f"of in-core without sampling: {s['auc']:.5f} vs {g['auc']:.5f} ({diff:+.5f})")
    else:
        print(f"  n/a   sampled AUC: {why(results, 'gbflow-paged-gbs', 'gbflow-incore')}")
    for mine, theirs in (("gbflow-paged", "xgb-extmem"), ("gbflow-paged-gbs", "xgb-extmem-gbs")):
        a, b = ok(results, mine), ok(results, theirs)
        if a and b:
            memory = "n/a" if a["peak_device_bytes"] is None or b["peak_device_bytes"] is None \
                else f"{a['peak_device_bytes'] / max(b['peak_device_bytes'], 1):.2f}x"
            print(f"  info  {mine} vs XGBoost {theirs}: time {a['seconds'] / b['seconds']:.2f}x "
                  f"({a['seconds']:.2f} s vs {b['seconds']:.2f} s), peak device memory "
                  f"{memory}, AUC difference {a['auc'] - b['auc']:+.5f}")


def summary_parquet(results: dict) -> None:
    g = ok(results, "gbflow-incore")
    for case in ("gbflow-parquet", "gbflow-dask-parquet"):
        r = ok(results, case)
        if r and g:
            same = r.get("model_digest") == g.get("model_digest")
            print(f"  {verdict(same)}  {case}: raw values {r['data_bytes'] / r['limit_bytes']:.1f}"
                  f"x the limit; model file {'equals' if same else 'differs from'} "
                  f"gbflow-incore's; time {r['seconds']:.2f} s vs {g['seconds']:.2f} s in-core; "
                  f"peak device {gib(r['peak_device_bytes'])} GiB")
        elif case in results:
            print(f"  n/a   {case}: {why(results, case, 'gbflow-incore')}")
    a, b = ok(results, "gbflow-parquet"), ok(results, "xgb-parquet")
    if a and b:
        print(f"  info  gbflow-parquet vs XGBoost's iterator (xgb-parquet): time "
              f"{a['seconds'] / b['seconds']:.2f}x ({a['seconds']:.2f} s vs {b['seconds']:.2f} s)"
              f", quantization {a['quantize_seconds']:.2f} s vs {b['quantize_seconds']:.2f} s, "
              f"AUC difference {a['auc'] - b['auc']:+.5f}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--features", type=int, default=28)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--eval-rows", type=int, default=1_000_000)
    parser.add_argument("--max-bin", type=int, default=256)
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES),
                        help=f"comma list of {', '.join(CASES)} (default: all but the last)")
    parser.add_argument("--limit-fraction", type=float, default=0.25,
                        help="device_memory_limit as a share of the binned size (rows x features)")
    parser.add_argument("--limit", help="device_memory_limit as given to gbflow (bytes or e.g. "
                                        "'512MiB'), instead of --limit-fraction")
    parser.add_argument("--subsample", type=float, default=0.2,
                        help="subsample of the gradient-based sampling cases")
    parser.add_argument("--batches", type=int, default=10, help="host batches of xgb-extmem")
    parser.add_argument("--xgb-cache-host-ratio", default="match",
                        help="ExtMemQuantileDMatrix's cache_host_ratio: 'match' (1 - "
                             "limit fraction), 'auto' (XGBoost's estimate) or a number")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--no-xgboost", action="store_true")
    parser.add_argument("--json", help="write one JSON line per case to this file")
    parser.add_argument("--bandwidth-mib", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=10, help="timed copies of bandwidth")
    parser.add_argument("--seed", type=int, default=20240801)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per case")
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    if args.worker:
        return worker(args)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        raise SystemExit(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    cases = [c for c in CASES if c in cases and not (args.no_xgboost and c.startswith("xgb"))]
    limit, limit_bytes = limit_value(args)
    print(f"device: {device_header(args)}; {versions(args)}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"data: {args.rows:,} x {args.features} float32 training rows "
          f"({args.rows * args.features * 4 / GiB:.2f} GiB raw, binned size "
          f"{binned_bytes(args) / 2**20:.0f} MiB taken as rows x features bytes), "
          f"{args.eval_rows:,} held-out rows; binary:logistic, depth {args.depth}, "
          f"{args.rounds} rounds, learning rate 0.1, max_bin {args.max_bin}; paged limit "
          f"{limit!r} ({limit_bytes / 2**20:.1f} MiB); sampling: gradient_based, subsample "
          f"{args.subsample}", flush=True)
    folder = tempfile.mkdtemp(prefix="gbflow-f8-data-")
    results: dict = {}
    out = open(args.json, "w") if args.json else None
    try:
        if any(c != "bandwidth" for c in cases):
            start = time.perf_counter()
            digest = write_data(args, folder)
            print(f"data drawn (NumPy, seed {args.seed}) in {time.perf_counter() - start:.1f} s, "
                  f"checksum {digest}", flush=True)
        if any("parquet" in c for c in cases):
            start = time.perf_counter()
            write_parquet(args, folder)
            print(f"written as {args.batches} Parquet files in "
                  f"{time.perf_counter() - start:.1f} s; limit of the parquet cases "
                  f"{raw_limit(args) / 2**20:.1f} MiB (raw / 3)", flush=True)
        for case in cases:
            result = run_case(case, args, folder)
            results[case] = result
            if out is not None:
                out.write(json.dumps({**result, "date": time.strftime("%Y-%m-%d %H:%M")},
                                     default=str) + "\n")
                out.flush()
    finally:
        if out is not None:
            out.close()
        shutil.rmtree(folder, ignore_errors=True)
    summary(results, args)
    summary_parquet(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
