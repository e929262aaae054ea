"""What runs where the partitions live: loading partitions into checked shards, the ShardSet whose
reductions go through the collective, and the one training task each worker runs.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import resource
import sys
import threading
import time

import numpy as np

from .. import data as data_mod
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


def load_partition(frame, index: int, table: Table, spec: Spec) -> data_mod.DataSet:
    """One partition (pandas/cuDF frame) -> a checked ``DataSet`` that shares no memory with it.

    Raises ValueError/TypeError/KeyError naming the partition and the column at fault: columns
    other than the collection's, non-numeric values, labels the objective cannot take, NaN or
    infinite labels and weights, negative weights, infinite features. 0-row partitions are fine.
    """
    what = f"{table.what} partition {index}"
    columns = [str(c) for c in frame.columns]
    missing = [c for c in table.columns if c not in columns]
    extra = [c for c in columns if c not in table.columns]
    if missing or extra:  # (columns are picked by name: their order does not matter)
        problems = ([f"lacks column(s) {data_mod._names(missing)}"] if missing else []) + \
            ([f"has unexpected column(s) {data_mod._names(extra)}"] if extra else [])
        raise ValueError(f"{what} " + " and ".join(problems) + f", unlike the Dask DataFrame's "
                         f"columns (its meta: {data_mod._names(table.columns)}); every partition "
                         f"must have the same columns")
    dataset = data_mod.load(frame, spec.label, spec.weight, what,
                            feature_names=list(spec.features), allow_empty=True)
    objective = objectives.get_objective(spec.params.objective, spec.params.num_class)
    objective.check_label(dataset.label, f"label column {spec.label!r} of {what}")
    # Label and weight may be views of the partition's memory; copies let the partition go.
    return dataclasses.replace(
        dataset, label=np.array(dataset.label, copy=True),
        weight=None if dataset.weight is None else np.array(dataset.weight, copy=True))


def empty_part(spec: Spec) -> data_mod.DataSet:
    """A 0-row part: a process with no rows still takes part in every reduction."""
    return data_mod.DataSet(
        X=np.zeros((0, len(spec.features)), dtype=np.float32), label=np.zeros(0),
        weight=None if spec.weight is None else np.zeros(0), feature_names=list(spec.features),
        label_name=spec.label, weight_name=spec.weight)


def raw_bytes(frame) -> int:
    """Memory held by one partition (pandas or cuDF), index included."""
    return int(frame.memory_usage(index=True).sum())


class CollectiveShardSet(ShardSet):
    """A ShardSet whose reductions reach the other workers' training tasks.

    Host arrays go through the Dask collective. Device arrays (CuPy) go through NCCL when ``nccl``
    (a ``gbflow.backend.nccl.Communicator``) is given, else are copied to the host and back. With
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
                return self.collective.allreduce_sum(array)
            if self.nccl is not None:
                return self.nccl.allreduce_sum(array)
            host = self.collective.allreduce_sum(self.backend.to_host(array))
            return self.backend.xp.asarray(host)

    def allreduce_max(self, value):
        if self.collective.size == 1:
            return value
        with self.timers("communication"):
            return self.collective.allreduce_max(value)

    def allgather(self, value) -> list:
        if self.collective.size == 1:
            return [value]
        with self.timers("communication"):
            return self.collective.allgather(value)


class _MemoryWatch:
    """Resident memory of this process: now, and the peak while watching (sampled every 10 ms)."""

    def __init__(self):
        import psutil  # a dependency of distributed
        self._process = psutil.Process()
        self.start = self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="gbflow-memory")
        self._thread.start()

    def now(self) -> int:
        return int(self._process.memory_info().rss)

    def _run(self):
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self.now())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())


def _lifetime_peak_rss() -> int:
    # ru_maxrss is in KiB on Linux, bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _fetch(worker, ref: PartitionRef, what: str):
    """The partition's frame, from this worker's memory (the driver put it there)."""
    try:
        return worker.data[ref.key]
    except KeyError:
        raise CollectiveError(f"{what} partition {ref.index} is no longer on worker "
                              f"{worker.address}, where training expected it (did the cluster "
                              f"move or release it?); run train() again") from None


def _first_error(collective, errors: list[tuple[tuple, BaseException]]):
    """Agree on the input error to raise: the one of the first partition (in collection order)
    over all ranks, so that every rank, and the driver, reports the same problem."""
    local = min(errors, key=lambda e: e[0]) if errors else None
    found = [e for e in collective.allgather(local) if e is not None]
    if found:
        raise min(found, key=lambda e: e[0])[1]


def _nccl_communicator(backend, collective: DaskCollective, rank: int):
    """An NCCL communicator among the ranks when every rank runs on a GPU with NCCL, else None."""
    if collective.size == 1:
        return None
    from ..backend import nccl
    usable = backend.name != "cpu" and nccl.available()
    if not all(collective.allgather(usable)):
        return None
    unique_id = collective.allgather(nccl.unique_id() if rank == 0 else None)[0]
    return nccl.Communicator(collective.size, unique_id, rank)


def train_task(spec: Spec, rank: int, addresses: list[str], train_refs: list[PartitionRef],
               eval_refs: list[list[PartitionRef]]) -> dict:
    """The training task of one worker (rank ``rank`` of ``addresses``), over its partitions.

    Loads and checks the partitions (dropping each raw frame as soon as it is converted), agrees
    with the other ranks on errors and on global row offsets (partition lengths in partition
    order), then runs ``training.fit`` with a ``CollectiveShardSet``. Every rank builds the same
    model. Returns {"rank", "address", "fingerprint" (sha256 of the model file), "booster" (rank 0
    only), "lines" (progress lines, rank 0), "report" (memory and partition figures)}.
    Side effects: progress events on ``spec.topic`` (rank 0); on failure, the other ranks are
    told to abort.
    """
    from distributed import get_worker

    worker = get_worker()
    collective = DaskCollective(worker, spec.session, rank, addresses, spec.timeout)
    memory = _MemoryWatch()
    started = time.perf_counter()
    shardset = None
    try:
        train_parts, eval_parts, errors = [], [[] for _ in spec.evals], []
        lengths, raw = {}, 0
        wanted = [((0, r.index), r, spec.train) for r in train_refs] + \
            [((1 + j, r.index), r, table) for j, (_, table) in enumerate(spec.evals)
             for r in eval_refs[j]]
        for order, ref, table in wanted:
            try:
                frame = _fetch(worker, ref, table.what)
                raw += raw_bytes(frame)
                part = load_partition(frame, ref.index, table, spec)
                del frame
            except Exception as e:  # reported after the ranks agree on the first one
                errors.append((order, e))
                continue
            if order[0] == 0:
                lengths[ref.index] = part.n_rows
                train_parts.append((ref.index, part))
            elif part.n_rows:
                eval_parts[order[0] - 1].append(part)
        _first_error(collective, errors)
        rss_loaded = memory.now()
        # Global row numbers: partitions one after the other in partition order, whichever
        # worker holds them, so row sampling does not depend on placement.
        all_lengths = {}
        for d in collective.allgather(lengths):
            all_lengths.update(d)
        offsets = np.concatenate([[0], np.cumsum([all_lengths[i]
                                                  for i in range(len(all_lengths))])])
        kept = [(i, p) for i, p in sorted(train_parts, key=lambda t: t[0]) if p.n_rows]
        parts = [p for _, p in kept] or [empty_part(spec)]
        row_offsets = [int(offsets[i]) for i, _ in kept] or [0]
        del train_parts
        backend = get_backend(spec.params.device)
        shardset = CollectiveShardSet(backend, collective,
                                      _nccl_communicator(backend, collective, rank))
        lines, events = [], itertools.count()

        def emit(line: str) -> None:
            lines.append(line)
            worker.log_event(spec.topic, {"seq": next(events), "line": line})

        report = {"rank": rank, "address": worker.address,
                  "partitions": len(train_refs), "rows": int(sum(p.n_rows for p in parts)),
                  "raw_bytes": raw, "rss_start": memory.start, "rss_loaded": rss_loaded}

        def after_quantize() -> None:
            report["rss_quantized"] = memory.now()
            if rank == 0:
                worker.log_event(spec.topic, {"stage": "quantized"})

        booster = training.fit(
            backend, parts, spec.params, spec.num_boost_round,
            [(p, name) for p, (name, _) in zip(eval_parts, spec.evals)],
            spec.early_stopping_rounds, spec.verbose if rank == 0 else False,
            shardset=shardset, row_offsets=row_offsets, drop_features=True,
            emit=emit if rank == 0 else None, after_quantize=after_quantize)
        memory.stop()
        report.update(
            binned_bytes=int(sum(_nbytes(s.bins) + _nbytes(s.bins_by_feature) + _nbytes(s.label)
                                 + _nbytes(s.weight) + _nbytes(s.margin)
                                 for s in shardset.shards)),
            peak_rss=memory.peak, lifetime_peak_rss=_lifetime_peak_rss(),
            communication_seconds=collective.seconds, task_seconds=time.perf_counter() - started)
        return {"rank": rank, "address": worker.address,
                "fingerprint": hashlib.sha256(booster.to_json().encode()).hexdigest(),
                "booster": booster if rank == 0 else None, "lines": lines if rank == 0 else [],
                "report": report}
    except BaseException as e:
        if not isinstance(e, CollectiveAborted):
            collective.abort_peers(f"training worker {worker.address} (rank {rank}) failed: "
                                   f"{type(e).__name__}: {e}")
        raise
    finally:
        memory.stop()
        if shardset is not None and shardset.nccl is not None:
            shardset.nccl.close()
        collective.close()


def _nbytes(array) -> int:
    if array is None:
        return 0
    base = getattr(array, "base", None)  # the binned matrix is a view of padded storage
    return int(base.nbytes if base is not None and hasattr(base, "nbytes") else array.nbytes)
