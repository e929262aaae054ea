"""What runs where the partitions live: loading partitions into checked shards, the ShardSet whose
reductions go through the collective, and the one training task each worker runs.
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import hashlib
import itertools
import os
import platform
import resource
import sys
import threading
import time

import numpy as np

from .. import inputs
from .. import objectives, training
from ..backend import get_backend
from ..grower import ShardSet
from ..params import Params
from .collective import CollectiveAborted, CollectiveError, DaskCollective


@dataclasses.dataclass(frozen=True)
class PartitionRef:
    """Partition ``index`` of a collection, held under Dask key ``key`` (on the task's worker,
    unless the driver could not place it there)."""

    index: int
    key: object


@dataclasses.dataclass(frozen=True)
class Table:
    """What every partition of one collection must look like: its columns (the meta's, as
    strings) and a name for errors ("training data", "evals[0] ('valid')")."""

    what: str
    columns: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Spec:
    """Everything a training task needs besides its partitions (the same for every rank)."""

    session: str
    topic: str
    params: Params
    num_boost_round: int
    early_stopping_rounds: int | None
    verbose: object
    label: str
    weight: str | None
    features: tuple[str, ...]
    train: Table
    evals: tuple[tuple[str, Table], ...]  # (name, table) per evaluation set
    timeout: float
    data_on_gpu: bool = False  # cuDF partitions: device="auto" then means the GPU


def load_partition(frame, index: int, table: Table, spec: Spec) -> inputs.DataSet:
    """One partition (pandas/cuDF frame) -> a checked ``DataSet`` (its label and weight may be
    views of the partition's memory; ``Joined`` copies them).

    Raises ValueError/TypeError/KeyError naming the partition and the column at fault: columns
    other than the collection's, non-numeric values, labels the objective cannot take, NaN or
    infinite labels and weights, negative weights, infinite features. 0-row partitions are fine.
    """
    what = f"{table.what} partition {index}"
    columns = [str(c) for c in frame.columns]
    missing = [c for c in table.columns if c not in columns]
    extra = [c for c in columns if c not in table.columns]
    if missing or extra:  # (columns are picked by name: their order does not matter)
        problems = ([f"lacks column(s) {inputs._names(missing)}"] if missing else []) + \
            ([f"has unexpected column(s) {inputs._names(extra)}"] if extra else [])
        raise ValueError(f"{what} " + " and ".join(problems) + f", unlike the Dask DataFrame's "
                         f"columns (its meta: {inputs._names(table.columns)}); every partition "
                         f"must have the same columns")
    dataset = inputs.load(frame, spec.label, spec.weight, what,
                            feature_names=list(spec.features), allow_empty=True)
    objective = objectives.get_objective(spec.params.objective, spec.params.num_class)
    objective.check_label(dataset.label, f"label column {spec.label!r} of {what}")
    return dataset


def raw_bytes(frame) -> int:
    """Memory held by one partition (pandas or cuDF), index included."""
    return int(frame.memory_usage(index=True).sum())


class CollectiveShardSet(ShardSet):
    """A ShardSet whose reductions reach the other workers' training tasks.

    With ``nccl`` (a ``gbflow.backend.nccl.Communicator``) everything goes through it: device
    arrays in place, host integer arrays and ``allgather``'s objects through a copy to the GPU
    (a Dask round trip costs 10 ms and more; fitting makes about twenty before the first tree).
    Without it, host arrays go through the Dask collective, and device arrays are copied to the
    host and back. With
    one worker every reduction returns its input, so Dask adds nothing per level. The time spent
    in reductions is ``timers.seconds["communication"]`` (also counted in the stage that called).
    """

    def __init__(self, backend, collective: DaskCollective, nccl=None):
        super().__init__(backend, [])
        self.collective, self.nccl = collective, nccl

    def allreduce_sum(self, array):
        if self.collective.size == 1:
            return array
        with self.timers("communication"):
            if isinstance(array, np.ndarray):
                if self.nccl is not None and array.dtype in (np.int64, np.int32):
                    # a new C-ordered device array: summed in place
                    on_device = self.backend.xp.array(array, order="C")
                    self.nccl.allreduce_sum_inplace([on_device])
                    return self.backend.to_host(on_device)
                return self.collective.allreduce_sum(array)
            if self.nccl is not None:
                return self.nccl.allreduce_sum(array)
            host = self.collective.allreduce_sum(self.backend.to_host(array))
            return self.backend.asarray(host)

    def allreduce_sum_inplace(self, arrays: list) -> None:
        if self.collective.size == 1:
            return
        with self.timers("communication"):
            if self.nccl is not None:  # NCCL's in-place reduction: no copies
                self.nccl.allreduce_sum_inplace(arrays)
                return
            xp = self.backend.xp  # one host round trip for all of them
            host = self.backend.to_host(xp.concatenate([a.reshape(-1) for a in arrays]))
            total = self.backend.asarray(self.collective.allreduce_sum(host))
            offset = 0
            for a in arrays:
                a[...] = total[offset: offset + a.size].reshape(a.shape)
                offset += a.size

    def allreduce_max(self, value):
        if self.collective.size == 1:
            return value
        with self.timers("communication"):
            if self.nccl is not None:
                return self.nccl.allreduce_max(value)
            return self.collective.allreduce_max(value)

    def allgather(self, value) -> list:
        if self.collective.size == 1:
            return [value]
        with self.timers("communication"):
            if self.nccl is not None:
                return self.nccl.allgather(value)
            return self.collective.allgather(value)


class _MemoryWatch:
    """Resident memory of this process: now, and the peak while watching (sampled every 25 ms:
    often enough to see the sketch's short peak, rarely enough not to disturb the kernels'
    threads on a busy machine)."""

    def __init__(self):
        import psutil  # a dependency of distributed
        self._process = psutil.Process()
        self._lock = threading.Lock()
        self.peak = 0
        self.start = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="gbflow-memory")
        self._thread.start()

    def now(self) -> int:
        """The resident memory now; every reading counts towards the peak (under a lock: the
        sampling thread and the training thread both read)."""
        rss = int(self._process.memory_info().rss)
        with self._lock:
            self.peak = max(self.peak, rss)
        return rss

    def _run(self):
        while not self._stop.wait(0.025):
            self.now()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.now()


def _lifetime_peak_rss() -> int:
    # ru_maxrss is in KiB on Linux, bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _fetch(worker, ref: PartitionRef, what: str):
    """The partition's frame, from this worker's memory (the driver put it there).

    Read on the worker's event loop, which owns ``worker.data`` (it may be spilling or storing
    other keys meanwhile), not from this task's thread.
    """
    async def read():
        return worker.data[ref.key]

    try:
        return asyncio.run_coroutine_threadsafe(read(), worker.loop.asyncio_loop).result()
    except KeyError:
        raise CollectiveError(f"{what} partition {ref.index} is no longer on worker "
                              f"{worker.address}, where training expected it (did the cluster "
                              f"move or release it?); run train() again") from None


def first_error(collective, errors: list[tuple[tuple, BaseException]]):
    """Agree on the input error to raise: the one of the first partition (in collection order)
    over all ranks, so that every rank, and the driver, reports the same problem."""
    local = min(errors, key=lambda e: e[0]) if errors else None
    found = [e for e in collective.allgather(local) if e is not None]
    if found:
        raise min(found, key=lambda e: e[0])[1]


def _open_nccl(backend, collective: DaskCollective, rank: int):
    """Start opening an NCCL communicator among the ranks when every rank runs on a GPU with
    NCCL: a future of it (``nccl.open_in_background``), else None. The ranks agree through the
    Dask collective here; opening and connecting go on in the background."""
    if collective.size == 1:
        return None
    from ..backend import nccl
    usable = backend.name != "cpu" and nccl.available()
    if not all(collective.allgather(usable)):
        return None
    unique_id = collective.allgather(nccl.unique_id() if rank == 0 else None)[0]
    return nccl.open_in_background(collective.size, unique_id, rank)


def _opened_nccl(opening, timeout: float):
    """The communicator of ``_open_nccl``'s future (None for None), once open: raises
    CollectiveError after ``timeout`` seconds (a rank that never joined)."""
    import concurrent.futures
    if opening is None:
        return None
    try:
        return opening.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise CollectiveError(f"the NCCL communicator among the GPU workers did not open within "
                              f"{timeout:g} s (did a worker die?)") from None


class Joined:
    """One collection's partitions on this process, checked and joined into one part.

    Partitions are loaded one at a time and copied into a single (rows, features) float32 matrix
    (on the backend's device), so that only one raw partition's float32 copy exists at a time besides
    the joined matrix, and training sees one shard per worker (a shard per partition would cost a
    kernel call per partition and level). errors: (sort key, exception) of partitions that failed
    their checks. lengths: {partition index: rows}. raw_bytes: the partitions' size.
    """

    def __init__(self, backend, spec: Spec, table: Table, key: int, items: list):
        """items: (partition index, frame) pairs, frames as pandas/cuDF partitions or callables
        returning one; the list is emptied (the frames are let go as they are converted)."""
        self.spec, self.errors, self.lengths, self.raw_bytes = spec, [], {}, 0
        frames = [(i, f() if callable(f) else f) for i, f in items]
        items.clear()
        total = sum(len(f) for _, f in frames)
        xp = backend.xp
        X = xp.empty((total, len(spec.features)), dtype=np.float32)
        labels, weights, self.runs, at = [], [], [], 0  # runs: (partition index, rows)
        for position in range(len(frames)):
            index, frame = frames[position]
            frames[position] = None  # the loop holds the only reference: let it go when done
            try:
                self.raw_bytes += raw_bytes(frame)
                part = load_partition(frame, index, table, spec)
            except Exception as e:  # reported once every process agrees on the first error
                self.errors.append(((key, index), e))
                continue
            finally:
                del frame
            X[at: at + part.n_rows] = backend.asarray(part.X)
            # Host copies (np.concatenate below copies): nothing keeps the partition alive.
            labels.append(backend.to_host(part.label))
            if part.weight is not None:
                weights.append(backend.to_host(part.weight))
            self.lengths[index] = part.n_rows
            self.runs.append((index, part.n_rows))
            at += part.n_rows
            del part
        self.part = inputs.DataSet(
            X=X[:at], label=np.concatenate(labels) if labels else np.zeros(0),
            weight=None if spec.weight is None else (
                np.concatenate(weights) if weights else np.zeros(0)),
            feature_names=list(spec.features), label_name=spec.label, weight_name=spec.weight)

    def row_ids(self, offsets: dict[int, int]):
        """The joined part's global row numbers, given every partition's first global row: an
        int when its partitions follow each other in the global order, else a uint64 array."""
        runs = [(offsets[i], n) for i, n in self.runs if n]
        if not runs:
            return 0
        if all(a + n == b for (a, n), (b, _) in zip(runs[:-1], runs[1:])):
            return int(runs[0][0])
        return np.concatenate([np.arange(a, a + n, dtype=np.uint64) for a, n in runs])


def global_offsets(collective, lengths: dict[int, int]) -> dict[int, int]:
    """First global row of every training partition: partitions one after the other in partition
    order, whichever process holds them, so that row sampling does not depend on placement."""
    every = {}
    for d in collective.allgather(lengths):
        every.update(d)
    starts = np.concatenate([[0], np.cumsum([every[i] for i in range(len(every))])])
    return {i: int(starts[i]) for i in range(len(every))}


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_GLIBC_DEFAULT_MMAP_THRESHOLD = 128 * 1024


@contextlib.contextmanager
def _malloc_for_training():
    """Let glibc keep freed memory for reuse while training, in a Dask worker process.

    Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which also freezes glibc's mmap
    threshold at 128 KiB: every temporary array above that (gradients, histograms, the kernels'
    per-thread buffers) is then mapped and unmapped on each use, and its pages faulted in again,
    which doubled training time in a worker (benchmarks/cpu_dask.py). While the task runs, glibc
    gets thresholds like the ones it would reach by itself (32 MiB mmap, 64 MiB trim); afterwards
    Dask's settings come back and the free memory is returned to the system (malloc_trim).
    Nothing happens outside glibc or when MALLOC_TRIM_THRESHOLD_ is not set.
    """
    trim = os.environ.get("MALLOC_TRIM_THRESHOLD_")
    libc = None
    if trim is not None and platform.libc_ver()[0] == "glibc":
        try:
            libc = ctypes.CDLL("libc.so.6")
        except OSError:
            libc = None
    if libc is None:
        yield
        return
    libc.mallopt(_M_MMAP_THRESHOLD, 32 * 2**20)
    libc.mallopt(_M_TRIM_THRESHOLD, 64 * 2**20)
    try:
        yield
    finally:
        libc.mallopt(_M_TRIM_THRESHOLD, int(trim))
        libc.mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT_MMAP_THRESHOLD)
        libc.malloc_trim(0)


def train_task(spec: Spec, rank: int, addresses: list[str], train_refs: list[PartitionRef],
               eval_refs: list[list[PartitionRef]]) -> dict:
    """The training task of one worker (rank ``rank`` of ``addresses``), over its partitions.

    Loads, checks and joins its partitions (dropping each raw frame as soon as it is converted),
    agrees with the other ranks on errors and on global row numbers (partition lengths in
    partition order), then runs ``training.fit`` with a ``CollectiveShardSet``. Every rank builds
    the same model. Returns {"rank", "address", "fingerprint" (``model_digest``),
    "booster" (rank 0 only), "lines" (progress lines, rank 0), "report" (memory and partition
    figures)}. Side effects: progress events on ``spec.topic`` (rank 0); on failure, the other
    ranks are told to abort; glibc malloc settings while it runs (``_malloc_for_training``);
    on the CPU, this thread's kernels use the worker's thread count (``limited_threads``).
    """
    from distributed import get_worker

    worker = get_worker()
    collective = DaskCollective(worker, spec.session, rank, addresses, spec.timeout)
    memory = _MemoryWatch()
    started = time.perf_counter()
    stages = _Stages()
    shardset = opening = None
    try:
        backend = get_backend(spec.params.device, data_on_gpu=spec.data_on_gpu)
        with _malloc_for_training(), backend.own_memory_pool(), \
                backend.limited_threads(worker.state.nthreads) as threads:
            opening = _open_nccl(backend, collective, rank)  # opens while partitions load
            stages.done("start communicator")

            def supply(ref, what):
                return lambda: _fetch(worker, ref, what)

            train = Joined(backend, spec, spec.train, 0,
                           [(r.index, supply(r, spec.train.what)) for r in train_refs])
            evals = [Joined(backend, spec, table, 1 + j,
                            [(r.index, supply(r, table.what)) for r in eval_refs[j]])
                     for j, (_, table) in enumerate(spec.evals)]
            stages.done("load partitions")
            first_error(collective, train.errors + [e for j in evals for e in j.errors])
            rss_loaded = memory.now()
            row_ids = train.row_ids(global_offsets(collective, train.lengths))
            stages.done("agree on errors and rows")
            shardset = CollectiveShardSet(backend, collective,
                                          _opened_nccl(opening, spec.timeout))
            opening = None  # the shardset owns it now
            stages.done("communicator setup")
            lines, events = [], itertools.count()

            def emit(line: str) -> None:
                lines.append(line)
                worker.log_event(spec.topic, {"seq": next(events), "line": line})

            report = {"rank": rank, "address": worker.address, "threads": threads,
                      "partitions": len(train_refs),
                      "rows": train.part.n_rows,
                      "raw_bytes": train.raw_bytes + sum(j.raw_bytes for j in evals),
                      "rss_start": memory.start, "rss_loaded": rss_loaded,
                      "load_seconds": time.perf_counter() - started}

            def after_quantize() -> None:
                report["rss_quantized"] = memory.now()
                if rank == 0:
                    worker.log_event(spec.topic, {"stage": "quantized"})

            parts = [train.part]
            del train
            booster = training.fit(
                backend, parts, spec.params, spec.num_boost_round,
                [([j.part] if j.part.n_rows else [], name)
                 for j, (name, _) in zip(evals, spec.evals)],
                spec.early_stopping_rounds, spec.verbose if rank == 0 else False,
                shardset=shardset, row_offsets=[row_ids], drop_features=True,
                emit=emit if rank == 0 else None, after_quantize=after_quantize)
            stages.done("fit")
        stages.done("free memory")
        memory.stop()
        booster.timings["load"] = report["load_seconds"]
        report.update(
            binned_bytes=int(sum(_nbytes(s.bins) + _nbytes(s.bins_by_feature) + _nbytes(s.label)
                                 + _nbytes(s.weight) + _nbytes(s.margin)
                                 + (s.sparse.nbytes if s.sparse is not None else 0)
                                 for s in shardset.shards)),
            peak_rss=memory.peak, lifetime_peak_rss=_lifetime_peak_rss(),
            communication_seconds=collective.seconds,
            transport="nccl" if shardset.nccl is not None else "dask")
        fingerprint = model_digest(booster)
        stages.done("fingerprint")
        if shardset.nccl is not None:  # the model is on the host: every reduction is done
            shardset.nccl.close_later()
            shardset.nccl = None
        report.update(stages=stages.seconds, task_seconds=time.perf_counter() - started)
        return {"rank": rank, "address": worker.address, "fingerprint": fingerprint,
                "booster": booster if rank == 0 else None, "lines": lines if rank == 0 else [],
                "report": report}
    except BaseException as e:
        if not isinstance(e, CollectiveAborted):
            collective.abort_peers(f"training worker {worker.address} (rank {rank}) failed: "
                                   f"{type(e).__name__}: {e}")
        raise
    finally:
        memory.stop()
        if opening is not None:  # failed before the communicator was needed
            from ..backend import nccl
            nccl.discard(opening)
        if shardset is not None and shardset.nccl is not None:
            shardset.nccl.close()
        collective.close()


class _Stages:
    """Seconds of a task's stages, each from the end of the one before."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def done(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = now - self._last
        self._last = now


def model_digest(booster) -> str:
    """sha256 of everything the model file holds that training computes (every tree's node
    arrays and group, the base margin, the cut points, the best iteration and score): equal
    digests mean equal model files for the same parameters and feature names. Cheaper than
    hashing ``to_json()`` (0.2 s for 500 trees of depth 8)."""
    digest = hashlib.sha256()
    for array in (booster.base_margin, booster.cuts.values, booster.cuts.offsets):
        digest.update(np.ascontiguousarray(array).tobytes())
    digest.update(repr((booster.best_iteration, booster.best_score)).encode())
    for tree in booster.trees:
        digest.update(np.int64(tree.group).tobytes())
        for array in tree.node_arrays():
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _nbytes(array) -> int:
    if array is None:
        return 0
    base = getattr(array, "base", None)  # the binned matrix is a view of padded storage
    return int(base.nbytes if base is not None and hasattr(base, "nbytes") else array.nbytes)
