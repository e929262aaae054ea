"""The client side of training on Dask DataFrames: checks on the meta, then one training task per
worker where the partitions live (with a ``distributed.Client``), or in this process over the
partitions (without one); it watches the tasks and the workers and fails fast when one is lost.
"""
from __future__ import annotations

import dataclasses
import threading
import time
import uuid

from .. import _dtypes, inputs, resume
from ..backend import on_gpu
from ..evaluation import EvalOptions
from ..params import Params
from ..progress import Progress, log_line
from . import inputs as dask_inputs
from .collective import CollectivePlugin
from .errors import (
    CollectiveError,
    WorkerLostError,
    raise_first,
)
from .kept import KeptPartitions
from .loading import partition_lengths
from .local import check_client, current_client, partitions_of, train_in_process
from .memory import check_worker_memory, room_to_keep, training_bytes
from .messages import PartitionRef, Spec
from .placement import counting_groups, holder_owners, training_owners
from .relay import OrderedLines, Relay
from .rounds import KnownRounds
from .task import train_task
from .watch import LOSS_NOTICE, Watching, scheduler_workers

# How long a training task waits for a peer's message before giving up (dask config key
# "gbflow.collective-timeout", seconds or a duration such as "10 minutes"). Only a peer that
# hangs without dying needs it: lost workers are detected within about a second.
DEFAULT_TIMEOUT = "30 minutes"
MAX_RESTARTS = 3  # restarts after lost workers before train() gives up
_SUBMITTING = threading.Lock()  # a run's training tasks are submitted together


def _timeout() -> float:
    import dask
    from dask.utils import parse_timedelta
    return float(parse_timedelta(dask.config.get("gbflow.collective-timeout", DEFAULT_TIMEOUT),
                                 default="seconds"))


def _spec(params, num_boost_round, options, verbose, label, weight, features,
          train_table, evals, data_on_gpu: bool, session="", objective=None,
          init_model=None, callbacks=(), base_margin=None, qid=None) -> Spec:
    import dask
    return Spec(
        session=session, topic=f"gbflow-{session}", params=params,
        num_boost_round=num_boost_round, options=options,
        verbose=verbose, label=label, weight=weight, features=tuple(features), train=train_table,
        evals=tuple((name, table) for _, name, table in evals), timeout=_timeout(),
        sockets=bool(dask.config.get("gbflow.collective-sockets", True)),
        data_on_gpu=data_on_gpu, objective=objective, init_model=init_model,
        callbacks=callbacks, base_margin=base_margin, qid=qid)


def train(data, label, params: Params, num_boost_round: int, evals, options: EvalOptions,
          weight, verbose, client=None, objective=None, init_model=None,
          callbacks=(), checkpoint=None, on_worker_lost: str = "restart", base_margin=None,
          qid=None):
    """``gbflow.train`` for a Dask DataFrame (parameters as there, already checked).

    With a client (given, or the active one) training runs on its workers; without one, in this
    process over the partitions. Either way the model is the same bit for bit.
    """
    check_client(client)
    ddf, features, table, evals = dask_inputs.check(data, label, weight, evals, base_margin,
                                                    qid, params.feature_types)
    if not params.enable_categorical:
        inputs.check_categorical(ddf._meta, features, [], "training data", enabled=False)
    state = resume.read(checkpoint)
    if state is not None:  # (the row count is checked once the partitions are counted)
        resume.check_matches(state, checkpoint.path, params, features, num_boost_round,
                             [name for _, name, _ in evals], None, options)
        if state.finished:
            return resume.resumed_model(state)
    spec = _spec(params, num_boost_round, options, verbose, label, weight, features,
                 table, evals, data_on_gpu=on_gpu(ddf._meta), objective=objective,
                 init_model=init_model, callbacks=tuple(callbacks), base_margin=base_margin,
                 qid=qid)
    client = client if client is not None else current_client()
    known = KnownRounds(state, num_boost_round, checkpoint)
    if client is None:
        booster = train_in_process(ddf, evals, dataclasses.replace(spec, resume=state), known)
    elif client.asynchronous:
        raise TypeError("gbflow.train needs a synchronous distributed.Client (this one was "
                        "created with asynchronous=True)")
    else:
        # (not within client.as_current(): its dask.config.set is process-wide, and trainings
        # run from several threads at once left the default scheduler set to a closed client)
        booster = _train_on_cluster(client, ddf, evals, spec, known, on_worker_lost)
    if known.saver is not None:
        known.saver.finish(booster, num_boost_round, known.rows, options)
    return booster


def _train_on_cluster(client, ddf, evals, spec: Spec, known: KnownRounds, on_worker_lost: str):
    """Train on the cluster; after a lost worker, again from the last completed round on the
    workers left (and any the cluster adds), at most ``MAX_RESTARTS`` times."""
    restart = on_worker_lost == "restart" and spec.init_model is None
    kept = KeptPartitions() if restart else None
    try:
        return _runs(client, ddf, evals, spec, known, on_worker_lost, restart, kept)
    finally:
        if kept is not None:
            kept.release()


def _runs(client, ddf, evals, spec, known, on_worker_lost, restart, kept):
    """``_train_on_cluster``'s runs: the first, then one after each lost worker (``restart``), the
    partitions ``kept`` (None: not kept) between them."""
    for attempt in range(MAX_RESTARTS + 1):
        run = _Cluster(client, ddf, evals, spec, known, kept)
        run.spec = dataclasses.replace(run.spec, resume=known.begin(run.spec.session),
                                       report_rounds=restart or known.saver is not None)
        try:
            return run.run()
        except WorkerLostError as e:
            if not restart or attempt == MAX_RESTARTS:
                if restart:
                    e.add_note(f"gbflow restarted training {MAX_RESTARTS} times and gives up")
                elif on_worker_lost == "restart":
                    e.add_note("training that continues an xgb_model is not restarted")
                raise
            log_line(f"gbflow.dask: {e}; restarting from round {known.rounds} (restart "
                     f"{attempt + 1} of at most {MAX_RESTARTS})")
            try:
                client.wait_for_workers(1, timeout=spec.timeout)
            except TimeoutError:
                raise WorkerLostError(f"no worker left to restart training on (waited "
                                      f"{spec.timeout:g} s, gbflow.collective-timeout)") from e
    raise AssertionError("unreachable")


class _Cluster(Watching):
    """One training run on a cluster: compute, place, submit, watch, collect.

    Every future gbflow makes is in ``_futures`` and released (``Future.release``) when ``run``
    ends, however it ends: copies of the Python objects (in a traceback's frames, say) then
    hold nothing on the cluster. A placed partition's future is released earlier, as soon as
    every task reading its key has copied it, so that Dask frees it while training runs (one
    compute gives one future per key: an evaluation set may share the training data's keys),
    unless the training keeps the partitions for its restarts (``kept``: where the workers
    have room, the partitions a run computed are kept there, and a restart reuses them).
    """

    def __init__(self, client, ddf, evals, spec: Spec, known: KnownRounds,
                 kept: KeptPartitions | None = None):
        self.client, self.ddf, self.evals, self.known = client, ddf, evals, known
        self.kept = kept
        self._computed = None  # (partition futures, rows) this run computed (not reused)
        self._copied: list = []  # partitions copied to another training worker (originals)
        session = uuid.uuid4().hex
        self.spec = dataclasses.replace(spec, session=session, topic=f"gbflow-{session}")
        self.progress = Progress(spec.verbose, max(1, spec.num_boost_round))
        self.lines = OrderedLines(self.progress.relay)
        self.closed = False
        self._lock = threading.Lock()  # events arrive on the client's event loop thread
        self._futures: list = []  # every future of this run
        self._placed: dict[tuple[int, int, int], object] = {}  # (rank, set, index) -> key
        self._readers: dict[object, int] = {}  # key -> placements not yet copied
        self._held: dict[object, object] = {}  # key -> its future, while it has readers
        self.started: set[int] = set()  # ranks whose task has begun

    # -- gbflow's futures --------------------------------------------------------------------
    def _hold(self, place: tuple[int, int, int], future) -> None:
        """Partition ``place`` (rank, set, index; set 0 the training data) is read from
        ``future``'s key."""
        self._placed[place] = future.key
        self._readers[future.key] = self._readers.get(future.key, 0) + 1
        self._held[future.key] = future

    def _release(self, places=None) -> None:
        """The partitions at ``places`` ((rank, set, index) list) were copied (None: every one
        was): release each key's future once no placement still reads it. Releasing a future
        twice is harmless."""
        with self._lock:
            places = list(self._placed) if places is None else places
            futures = []
            for key in [self._placed.pop(p) for p in places if p in self._placed]:
                self._readers[key] -= 1
                if not self._readers[key]:
                    del self._readers[key]
                    futures.append(self._held.pop(key))
        for f in futures:
            if self.kept is None or not self.kept.owns(f):
                f.release()

    def _release_all(self) -> None:
        self._release()
        futures, self._futures = self._futures, []
        for f in futures:
            f.release()

    # -- the cluster's workers -------------------------------------------------------------------
    def _workers(self) -> dict:
        """The scheduler's workers now: {address: info (status, memory_limit, metrics, ...)}."""
        return scheduler_workers(self.client)

    # -- events from the tasks -------------------------------------------------------------------
    def _on_event(self, event) -> None:
        _, message = event
        if self.closed or not isinstance(message, dict):
            return
        stage = message.get("stage")
        if stage == "started":
            self.started.add(message["rank"])
        elif stage == "loaded":  # a task copied some of its partitions (task.CopiedNotices)
            self._release([(message["rank"], c, i) for c, i in message["places"]])
        elif stage == "quantized":  # every rank binned its data (and so loaded it)
            self._release()
        elif stage == "rounds":  # rank 0 completed rounds: their trees and values
            self.known.put(message)
        elif "line" in message:
            self.lines.put(message["seq"], message["line"])

    # -- the run ---------------------------------------------------------------------------------
    def run(self):
        client, spec = self.client, self.spec
        started = time.perf_counter()
        try:
            addresses, train_refs, eval_refs = self._place(*self._compute())
            self._keep_or_release(self._check_memory(
                {a: sum(r.rows for r in refs) for a, refs in zip(addresses, train_refs)},
                {a: sum(r.rows for refs in sets for r in refs)
                 for a, sets in zip(addresses, eval_refs)}))
            computed = time.perf_counter() - started
            self.progress.say(f"gbflow.dask: training on {len(addresses)} worker(s)")
            client.register_plugin(CollectivePlugin(), name=CollectivePlugin.name)
            relay = Relay(self._on_event)
            client.subscribe_topic(spec.topic, relay)
            # One run's tasks reach the scheduler together: two trainings submitting from two
            # threads at once, their ranks interleaved, could each wait on a worker whose one
            # thread runs the other's rank (until the collective timeout)
            with _SUBMITTING:
                tasks = [client.submit(train_task, spec, rank, addresses, train_refs[rank],
                                       eval_refs[rank], key=f"gbflow-train-{spec.session}-{rank}",
                                       workers=[address], allow_other_workers=False, pure=False)
                         for rank, address in enumerate(addresses)]
            self._futures.extend(tasks)  # their results (the booster) are released at the end
            finished = False
            try:
                self._watch(tasks, addresses)
                self._raise_stuck(tasks, addresses)
                raise_first(tasks)
                if any(t.status == "cancelled" for t in tasks):
                    raise CollectiveError("a gbflow training task was cancelled (by another "
                                          "client, or the cluster is closing)")
                results = self._results(tasks, [[a] for a in addresses],
                                        "fetching the trained model")
                finished = True
            finally:
                self.closed = True
                self.progress.close()
                relay.target = None
                client.unsubscribe_topic(spec.topic)
                _forget_topic(client, spec.topic)
                if not finished:
                    self._stop(tasks, addresses)
        finally:
            self._release_all()
        return self._collect(results, computed, started)

    def _compute(self):
        """Every partition computed on the cluster, with its row count (a restart: the kept
        ones, once Dask has recomputed a lost worker's). Returns ((training futures, their
        rows), [(evaluation futures, their rows)] per set, who holds each)."""
        delayed = list(self.ddf.to_delayed())
        eval_delayed = [partitions_of(frame) for frame, _, _ in self.evals]
        if self.kept is not None and self.kept.futures is not None:
            partitions = self.kept.futures
            self.progress.say("gbflow.dask: waiting for the lost partitions to be computed "
                              "again")
        else:
            self.progress.say(f"gbflow.dask: computing {len(delayed)} training partition(s)"
                              + (f" and {sum(map(len, eval_delayed))} evaluation partition(s)"
                                 if eval_delayed else "") + " on the cluster")
            # One compute for every partition: inputs shared by training and evaluation sets
            # (such as a random_split) are computed once. Already persisted partitions are not
            # recomputed.
            partitions = self.client.compute(delayed + [d for ds in eval_delayed for d in ds])
            self._futures.extend(partitions)
        self._wait_all(partitions, "computing the partitions")
        for f in partitions:
            if f.status == "error":
                f.result()  # the pipeline's own error (raises it with its traceback)
        reused = self.kept is not None and self.kept.futures is not None
        who_has = self._holders(partitions) if reused else self.client.who_has(partitions)
        # Each partition's length, counted where it is, while it is fresh (not spilled): a
        # task sizes its matrix from them, then reads its partitions one at a time. Pinned: an
        # unknown task's duration counts as 0.5 s, so Dask could move a partition to count it;
        # and after the compute, not in it (these tasks changed where Dask put the partitions).
        # (counted again on a restart: a pipeline may compute a lost partition differently)
        # A counting task counts a worker's partitions up to COUNT_GROUP_BYTES together (a task
        # a partition cost about 5 ms of the driver's and scheduler's time: 500 partitions,
        # 2.5 s), so a spilled worker never holds more than that in memory to count them.
        holders = [sorted(who_has.get(f.key, ())) or None for f in partitions]
        nbytes = self.client.nbytes(keys=[f.key for f in partitions], summary=False)
        groups = counting_groups(holders, [nbytes.get(f.key, 0) for f in partitions])
        counts = [self.client.submit(partition_lengths, *[partitions[j] for j in js],
                                     workers=None if w is None else [w], pure=False)
                  for w, js in groups]
        self._futures.extend(counts)
        counted = self._results(counts, [None if w is None else [w] for w, _ in groups],
                                "counting the partitions' rows")
        rows = [0] * len(partitions)
        for (_, js), lengths in zip(groups, counted):
            for j, n in zip(js, lengths):
                rows[j] = n
        for f in counts:
            f.release()
        if reused:
            self.kept.rows = rows
        else:
            self._computed = (partitions, rows)
        return self._split(partitions, rows, len(delayed), eval_delayed) + (who_has,)

    def _holders(self, partitions) -> dict:
        """``who_has`` of kept partitions, each held by some worker: a kept future may look
        finished before the scheduler's word of its lost copy has come (the key is then being
        computed again), so it waits for a holder (the word comes within milliseconds; at most
        ``LOSS_NOTICE`` s)."""
        deadline = time.monotonic() + LOSS_NOTICE
        while True:
            who_has = self.client.who_has(partitions)
            if all(who_has.get(f.key) for f in partitions) or time.monotonic() > deadline:
                return who_has  # (_place names a partition held by no worker)
            self._wait_all(partitions, "computing the lost partitions again")
            time.sleep(0.05)

    def _split(self, partitions, rows, n_train: int, eval_delayed) -> tuple:
        """((training futures, rows), [(evaluation futures, rows)] per set) of every set's
        computed partitions in ``_compute``'s order."""
        self.known.rows = sum(rows[:n_train])
        evals, at = [], n_train
        for ds in eval_delayed:
            evals.append((partitions[at: at + len(ds)], rows[at: at + len(ds)]))
            at += len(ds)
        return (partitions[:n_train], rows[:n_train]), evals

    def _place(self, train, evals, who_has):
        """Ranks: the workers holding training partitions, each partition trained on a holder
        or, where Dask left the workers' rows uneven, copied to another training worker
        (``placement.training_owners``). Evaluation partitions go to a training worker holding
        them, else are copied to the one with the fewest evaluation rows so far. train:
        (futures, rows); evals: one such pair per set; who_has: the partitions' holders.
        Returns (addresses, training refs per rank, evaluation refs per rank and set); the
        futures are held (``_hold``) until their tasks have copied them."""
        import dask
        train_futures, train_rows = train
        holders = []
        for f in train_futures:
            holders.append(sorted(who_has.get(f.key, ())))
            if not holders[-1]:
                raise CollectiveError(f"partition {f.key!r} is held by no worker after being "
                                      f"computed (was it released?)")
        owner = training_owners(holders, train_rows,
                                bool(dask.config.get("gbflow.balance-partitions", True)))
        if any(a not in held for a, held in zip(owner, holders)) and \
                not self._room_for(owner, train_rows):
            owner = holder_owners(holders, train_rows)  # (the check below then decides)
        addresses = sorted(set(owner))
        rank_of = {a: r for r, a in enumerate(addresses)}
        copied, copy_to = [], []  # (original, copy), the copy's worker

        def copy_to_worker(f, address: str):
            copy = self.client.submit(_same, f, workers=[address], allow_other_workers=False,
                                      pure=False)
            self._futures.append(copy)
            copied.append((f, copy))
            copy_to.append(address)
            return copy
        train_refs = [[] for _ in addresses]
        moved_rows = 0
        moved: dict = {}  # a moved partition's key -> (its copy, the copy's worker)
        for index, (f, rows, address) in enumerate(zip(train_futures, train_rows, owner)):
            if address not in holders[index]:  # moved to even out the workers' rows
                copy = moved[f.key][0] if f.key in moved else copy_to_worker(f, address)
                moved[f.key] = (copy, address)
                f = copy
                moved_rows += rows
            rank = rank_of[address]
            train_refs[rank].append(PartitionRef(index, f.key, rows))
            self._hold((rank, 0, index), f)
        if copied:
            self.progress.say(f"gbflow.dask: copying {len(copied)} training partition(s) "
                              f"({moved_rows:,} rows) to even out the workers' rows")
        eval_refs = [[[] for _ in evals] for _ in addresses]
        eval_load = {a: 0 for a in addresses}
        for j, (fs, counts) in enumerate(evals):
            for index, (f, rows) in enumerate(zip(fs, counts)):
                # a training partition's key that moved is read from its copy (the original
                # goes: see _keep_or_release)
                local = [moved[f.key][1]] if f.key in moved else \
                    [a for a in sorted(who_has.get(f.key, ())) if a in rank_of]
                chosen = min(local or addresses, key=lambda a: (eval_load[a], a))
                eval_load[chosen] += rows
                if f.key in moved:
                    f = moved[f.key][0]
                elif not local:  # held by a worker that does not train: copy it over, once
                    f = copy_to_worker(f, chosen)
                rank = rank_of[chosen]
                eval_refs[rank][j].append(PartitionRef(index, f.key, rows))
                self._hold((rank, 1 + j, index), f)
        if copied:
            copies = [copy for _, copy in copied]
            self._wait_all(copies, "copying partitions to their training workers",
                           pinned=[[a] for a in copy_to])
        # the copy is what training reads (a key held by no training worker is read by no
        # task): the original goes once the run knows whether it keeps its partitions
        self._copied = [original for original, _ in copied]
        return addresses, train_refs, eval_refs

    def _room_for(self, owner: list[str], rows: list[int]) -> bool:
        """Whether every CPU worker has room for the training rows ``owner`` gives it
        (``_check_memory`` without the evaluation rows)."""
        totals: dict[str, int] = {}
        for address, n in zip(owner, rows):
            totals[address] = totals.get(address, 0) + n
        try:
            self._check_memory(totals, {})
        except MemoryError:
            return False
        return True

    def _keep_or_release(self, needs: dict | None) -> None:
        """A run of a training that may restart keeps the partitions it computed when every
        worker has room for them beside training (``memory.room_to_keep``; never on GPUs:
        device memory), else lets each go once copied. A restart that reuses kept partitions
        lets them go once copied when the workers left have no room for them. ``needs``:
        ``_check_memory``'s."""
        import dask
        kept = self.kept
        if kept is not None:
            room = needs is not None and room_to_keep(
                needs, self._workers(), dask.config.get("distributed.worker.memory.pause", 0.8))
            if room and self._computed is not None:
                kept.keep(*self._computed)
                self._futures = [f for f in self._futures if not kept.owns(f)]
            elif not room and kept.futures is not None:  # this run's, released once copied
                self._futures.extend(kept.forget())
        for original in self._copied:
            if kept is None or not kept.owns(original):
                original.release()

    def _check_memory(self, rows: dict, eval_rows: dict) -> dict | None:
        """On CPU workers, MemoryError (``memory.check_worker_memory``) when a worker's task
        would need more than it has before Dask pauses it; rows, eval_rows: {address: rows}.
        Returns the needs ({address: (bytes, rows)}; None on GPUs: paged training)."""
        import dask
        spec = self.spec
        if spec.data_on_gpu or spec.params.device == "cuda":
            return None
        bin_bytes = _dtypes.bin_dtype(spec.params.max_bin).itemsize
        needs = {a: (training_bytes(n, eval_rows.get(a, 0), len(spec.features),
                                    spec.params.n_groups, bin_bytes), n) for a, n in rows.items()}
        check_worker_memory(needs, self._workers(),
                            dask.config.get("distributed.worker.memory.pause", 0.8))
        return needs

    def _collect(self, results, computed: float, started: float):
        fingerprints = {r["fingerprint"] for r in results}
        if len(fingerprints) != 1:  # every rank grows the same trees; anything else is a bug
            raise CollectiveError(f"the training workers built different models "
                                  f"({len(fingerprints)} distinct); please report this")
        lead = results[0]
        for seq, line in enumerate(lead["lines"]):  # lines whose events had not arrived
            self.lines.put(seq, line)
        booster = lead["booster"]
        booster.worker_report = [r["report"] for r in results]
        booster.timings["dask_compute"] = computed
        booster.timings["dask_total"] = time.perf_counter() - started
        return booster


def _forget_topic(client, topic: str) -> None:
    """Drop a run's event topic from the scheduler: distributed keeps every topic's last
    1,000 events for the scheduler's life (each round's trees, with restarts on: 1.2 MB for
    200 rounds of depth 6), and each run has its own topic. Best effort: the broker is
    distributed's internal."""
    def forget(dask_scheduler=None):
        topics = getattr(getattr(dask_scheduler, "_broker", None), "_topics", None)
        if topics is not None:
            topics.pop(topic, None)
    try:
        client.run_on_scheduler(forget)
    except Exception:  # the cluster is going away, or another distributed
        pass


def _same(frame):
    """Identity task: a copy of a partition on the worker it runs on."""
    return frame
