"""The training task each worker runs: partitions loaded, ranks agreed, ``boosting.fit`` run."""
from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import time

import numpy as np

from .. import boosting
from ..backend import get_backend
from ..shards import ShardSet
from ..stores import nbytes_of
from .collective import DaskCollective
from .errors import CollectiveAborted, TrainingCancelled
from .loading import JoinedPartitions, eval_parts, fetch, first_error, global_offsets
from .memory import MemoryWatch, lifetime_peak_rss, malloc_for_training
from .messages import PartitionRef, Spec
from .transport import WorkerCollective, open_nccl, opened_nccl


class CopiedNotices:
    """Tells the driver which partitions a task has copied, so that it lets go of their futures
    and Dask frees the raw partitions (unless the user holds them) while others load. One
    event per ``PERIOD`` seconds at most, listing the partitions copied since the last: an
    event a partition cost about 3 ms of a worker's time (500 partitions: 1.5 s)."""

    PERIOD = 0.05

    def __init__(self, worker, topic: str, rank: int):
        self.worker, self.topic, self.rank = worker, topic, rank
        self.places: list = []  # (collection, partition index) not yet told
        self.sent = time.monotonic()

    def add(self, collection: int, index: int) -> None:
        self.places.append((collection, index))
        if time.monotonic() - self.sent >= self.PERIOD:
            self.flush()

    def flush(self) -> None:
        if self.places:
            self.worker.log_event(self.topic, {"stage": "loaded", "rank": self.rank,
                                               "places": self.places})
            self.places = []
        self.sent = time.monotonic()


def train_task(spec: Spec, rank: int, addresses: list[str], train_refs: list[PartitionRef],
               eval_refs: list[list[PartitionRef]]) -> dict:
    """The training task of one worker (rank ``rank`` of ``addresses``), over its partitions.

    Loads, checks and joins its partitions (dropping each raw frame as soon as it is converted),
    agrees with the other ranks on errors and on global row numbers (partition lengths in
    partition order), then runs ``boosting.fit`` with a ``WorkerCollective``. Every rank builds
    the same model. Returns {"rank", "address", "fingerprint" (``model_digest``),
    "booster" (rank 0 only), "lines" (progress lines, rank 0), "report" (memory and partition
    figures)}. Side effects: progress events on ``spec.topic`` (rank 0); on failure, the other
    ranks are told to abort; glibc malloc settings while it runs (``malloc_for_training``);
    on a GPU, CuPy's memory pool unless the worker's RMM has a pool or other resource of its
    own (``Backend.own_memory_pool(unless_chosen=True)``);
    on the CPU, this thread's kernels use the worker's thread count, or ``nthread`` when set
    (``limited_threads``).
    """
    from distributed import get_worker

    worker = get_worker()
    collective = DaskCollective(worker, spec.session, rank, addresses, spec.timeout,
                                key=worker.get_current_task())
    worker.log_event(spec.topic, {"stage": "started", "rank": rank})
    memory = MemoryWatch()
    started = time.perf_counter()
    stages = _Stages()
    shardset = opening = None
    try:
        backend = get_backend(spec.params.device, data_on_gpu=spec.data_on_gpu)
        # CuPy's pool instead of RMM's allocator over its default resource (a cudaMalloc and a
        # synchronising cudaFree per array: what a Dask-CUDA worker has after importing cuDF;
        # training ran 3.5x slower); an RMM pool, async or managed memory the cluster was
        # started with is kept
        with malloc_for_training(), backend.own_memory_pool(unless_chosen=True), \
                backend.limited_threads(spec.params.nthread or worker.state.nthreads) \
                as threads:
            if spec.sockets:  # (Dask's RPC stays for aborts and fallbacks)
                collective.connect_directly()
            opening = open_nccl(backend, collective, rank)  # opens while partitions load
            stages.done("start communicator")

            def items(refs, what) -> list:
                return [(r.index, r.rows, functools.partial(fetch, worker, r, what))
                        for r in refs]

            copied = CopiedNotices(worker, spec.topic, rank)

            def released(collection: int):
                return lambda index: copied.add(collection, index)

            train = JoinedPartitions(backend, spec, spec.train, 0,
                                     items(train_refs, spec.train.what), released(0))
            evals = [JoinedPartitions(backend, spec, table, 1 + j,
                                      items(eval_refs[j], table.what), released(1 + j))
                     if table is not None else None
                     for j, (_, table) in enumerate(spec.evals)]
            copied.flush()
            stages.done("load partitions")
            first_error(collective, train.errors + [e for j in evals if j is not None
                                                    for e in j.errors])
            rss_loaded = memory.now()
            row_ids = train.row_ids(global_offsets(collective, train.lengths))
            stages.done("agree on errors and rows")
            shardset = ShardSet(backend)
            shardset.collective = WorkerCollective(backend, collective,
                                                   opened_nccl(opening, spec.timeout),
                                                   shardset.timers)
            opening = None  # the shard set's collective owns it now
            stages.done("communicator setup")
            lines, events = [], itertools.count()

            def emit(line: str) -> None:
                lines.append(line)
                worker.log_event(spec.topic, {"seq": next(events), "line": line})

            report = {"rank": rank, "address": worker.address, "threads": threads,
                      "partitions": len(train_refs),
                      "rows": train.part.n_rows,
                      "raw_bytes": train.raw_bytes + sum(j.raw_bytes for j in evals
                                                         if j is not None),
                      "rss_start": memory.start, "rss_loaded": rss_loaded,
                      "load_seconds": time.perf_counter() - started}

            def after_quantize() -> None:
                report["rss_quantized"] = memory.now()
                if rank == 0:
                    worker.log_event(spec.topic, {"stage": "quantized"})

            parts = [train.part]
            del train
            done = spec.resume.rounds if spec.resume is not None else 0
            booster = boosting.fit(
                backend, parts, spec.params, spec.num_boost_round - done,
                eval_parts(evals, spec), spec.options, spec.verbose if rank == 0 else False,
                shardset=shardset, row_offsets=[row_ids], drop_features=True,
                emit=emit if rank == 0 else None, after_quantize=after_quantize,
                objective=spec.objective, init_model=spec.init_model,
                callbacks=list(spec.callbacks), resume=spec.resume,
                on_rounds=RoundReports(worker, spec) if rank == 0 and spec.report_rounds
                else None)
            stages.done("fit")
        stages.done("free memory")
        memory.stop()
        booster.timings["load"] = report["load_seconds"]
        report.update(
            binned_bytes=_binned_bytes(shardset),
            peak_rss=memory.peak, lifetime_peak_rss=lifetime_peak_rss(),
            communication_seconds=collective.seconds,
            transport="nccl" if shardset.collective.nccl is not None else
            collective.transport)
        fingerprint = model_digest(booster)
        stages.done("fingerprint")
        if shardset.collective.nccl is not None:  # the model is on the host: every reduction
            shardset.collective.nccl.close_later()  # is done
            shardset.collective.nccl = None
        report.update(stages=stages.seconds, task_seconds=time.perf_counter() - started)
        return {"rank": rank, "address": worker.address, "fingerprint": fingerprint,
                "booster": booster if rank == 0 else None, "lines": lines if rank == 0 else [],
                "report": report}
    except BaseException as e:
        if not isinstance(e, CollectiveAborted) or isinstance(e, TrainingCancelled):
            collective.abort_peers(f"training worker {worker.address} (rank {rank}) failed: "
                                   f"{type(e).__name__}: {e}")
        raise
    finally:
        memory.stop()
        if opening is not None:  # failed before the communicator was needed
            from ..backend import nccl
            nccl.discard(opening)
        if shardset is not None and getattr(shardset.collective, "nccl", None) is not None:
            shardset.collective.nccl.close()
        collective.close()


class RoundReports:
    """Rank 0's ``on_rounds``: each time rounds are completed, their new trees and evaluation
    values are sent to the driver as an event (the first one also the model's other entries),
    so that it can write checkpoints and restart training from the last completed round."""

    def __init__(self, worker, spec: Spec):
        self.worker, self.topic, self.session = worker, spec.topic, spec.session
        state = spec.resume
        self.trees = 0 if state is None else len(state.model.trees)  # known to the driver
        self.evaluated = 0 if state is None else len(state.eval_rounds)
        self.head_sent = state is not None

    def __call__(self, state) -> None:
        model, n = state.model, self.evaluated
        message = {"stage": "rounds", "session": self.session, "rounds": state.rounds,
                   "rows": state.rows, "options": state.options,
                   "first_tree": self.trees,
                   "trees": [t.to_dict() for t in model.trees[self.trees:]],
                   "eval_rounds": list(state.eval_rounds[n:]),
                   "history": {s: {m: list(v[n:]) for m, v in per.items()}
                               for s, per in state.history.items()}}
        if not self.head_sent:  # the model file's entries other than the trees, once
            treeless = copy.copy(model)
            treeless.trees = []
            message["head"] = {k: v for k, v in treeless.to_dict().items() if k != "trees"}
            self.head_sent = True
        self.worker.log_event(self.topic, message)
        self.trees, self.evaluated = len(model.trees), len(state.eval_rounds)


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


def _binned_bytes(shardset) -> int:
    """Device bytes of the shards: every store's data, labels, weights and margins."""
    total = sum(store.nbytes(s) for store in shardset.stores for s in range(len(shardset.shards)))
    for shard in shardset.shards:
        total += sum(nbytes_of(a) for a in (shard.label, shard.weight, shard.margin)
                     if a is not None)
    return int(total)
