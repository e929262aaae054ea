"""The client side of training on Dask DataFrames: checks on the meta, then one training task per
worker where the partitions live (with a ``distributed.Client``), or in this process over the
partitions (without one); it watches the tasks and the workers and fails fast when one is lost.
"""
from __future__ import annotations

import threading
import time
import uuid

from .. import boosting, inputs
from ..backend import get_backend, on_gpu
from ..evaluation import EvalOptions
from ..params import Params
from ..progress import Progress, log_line
from . import inputs as dask_inputs
from .collective import CollectivePlugin, abort_session
from .errors import CollectiveAborted, CollectiveError, WorkerLostError
from .loading import JoinedPartitions, eval_parts, first_error, global_offsets
from .messages import PartitionRef, Spec
from .task import train_task

# How long a training task waits for a peer's message before giving up (dask config key
# "gbflow.collective-timeout", seconds or a duration such as "10 minutes"). Only a peer that
# hangs without dying needs it: lost workers are detected within about a second.
DEFAULT_TIMEOUT = "30 minutes"
_POLL = 0.1  # the longest wait between looks at the tasks, workers and events
_LIVENESS_PERIOD = 0.5  # seconds between asking the scheduler which workers are alive


def _timeout() -> float:
    import dask
    from dask.utils import parse_timedelta
    return float(parse_timedelta(dask.config.get("gbflow.collective-timeout", DEFAULT_TIMEOUT),
                                 default="seconds"))


def _spec(params, num_boost_round, options, verbose, label, weight, features,
          train_table, evals, data_on_gpu: bool, session="", objective=None,
          init_model=None, callbacks=()) -> Spec:
    return Spec(
        session=session, topic=f"gbflow-{session}", params=params,
        num_boost_round=num_boost_round, options=options,
        verbose=verbose, label=label, weight=weight, features=tuple(features), train=train_table,
        evals=tuple((name, table) for _, name, table in evals), timeout=_timeout(),
        data_on_gpu=data_on_gpu, objective=objective, init_model=init_model,
        callbacks=callbacks)


def _delayed(frame) -> list:
    """A frame's partitions as delayed objects (none for the training data as an eval set)."""
    return [] if frame is None else list(frame.to_delayed())


def current_client():
    """The active ``distributed.Client`` (``Client.as_current()`` or the default one), or None."""
    try:
        from distributed import default_client
        return default_client()
    except (ImportError, ValueError):
        return None


def train(data, label, params: Params, num_boost_round: int, evals, options: EvalOptions,
          weight, verbose, client=None, objective=None, init_model=None,
          callbacks=(), checkpoint=None, on_worker_lost: str = "restart"):
    """``gbflow.train`` for a Dask DataFrame (parameters as there, already checked).

    With a client (given, or the active one) training runs on its workers; without one, in this
    process over the partitions. Either way the model is the same bit for bit.
    """
    ddf, features, table, evals = dask_inputs.check(data, label, weight, evals)
    if not params.enable_categorical:
        inputs.check_categorical(ddf._meta, features, [], "training data", enabled=False)
    spec = _spec(params, num_boost_round, options, verbose, label, weight, features,
                 table, evals, data_on_gpu=on_gpu(ddf._meta), objective=objective,
                 init_model=init_model, callbacks=tuple(callbacks))
    client = client if client is not None else current_client()
    if client is None:
        return _train_in_process(ddf, evals, spec)
    if client.asynchronous:
        raise TypeError("gbflow.train needs a synchronous distributed.Client (this one was "
                        "created with asynchronous=True)")
    with client.as_current():  # the collections' own Dask calls use it too
        return _Cluster(client, ddf, evals, spec).run()


def _train_in_process(ddf, evals, spec: Spec):
    """No client: compute every partition here (one dask.compute, so inputs shared by the
    training and evaluation sets are computed once), check and join them, and run
    ``boosting.fit`` on them, as one worker of a cluster would."""
    import dask

    from ..collective import LOCAL
    started = time.perf_counter()
    delayed = list(ddf.to_delayed()) + [d for frame, _, _ in evals for d in _delayed(frame)]
    frames = list(dask.compute(*delayed))
    computed = time.perf_counter() - started
    backend = get_backend(spec.params.device, data_on_gpu=spec.data_on_gpu)
    items, at = [], 0
    for count in [ddf.npartitions] + [0 if frame is None else frame.npartitions
                                      for frame, _, _ in evals]:
        items.append([(i, len(f), f) for i, f in enumerate(frames[at: at + count])])
        at += count
    del frames
    tables = [spec.train] + [table for _, table in spec.evals]
    joined = [JoinedPartitions(backend, spec, table, key, part_items) if table is not None
              else None for key, (table, part_items) in enumerate(zip(tables, items))]
    first_error(LOCAL, [e for j in joined if j is not None for e in j.errors])
    train, evals_joined = joined[0], joined[1:]
    offsets = global_offsets(LOCAL, train.lengths)
    with backend.limited_threads(spec.params.nthread):
        booster = boosting.fit(backend, [train.part], spec.params, spec.num_boost_round,
                               eval_parts(evals_joined, spec), spec.options, spec.verbose,
                               row_offsets=[train.row_ids(offsets)], drop_features=True,
                               objective=spec.objective, init_model=spec.init_model,
                               callbacks=list(spec.callbacks))
    booster.timings["dask_compute"] = computed
    booster.timings["dask_total"] = time.perf_counter() - started
    return booster


class OrderedLines:
    """Rank 0's progress lines logged (``progress.log_line``) in its order, each once, whether
    its event or its result brings a line first: events may arrive out of order, and the
    result's copy of the lines may come while events are still being delivered (on another
    thread)."""

    def __init__(self, sink=log_line):
        self._lock = threading.Lock()
        self.sink = sink  # takes each line, in order
        self.printed = -1  # sequence number of the last line printed
        self._ahead: dict[int, str] = {}  # lines that arrived before an earlier one

    def put(self, seq: int, line: str) -> None:
        """Line number ``seq`` (0, 1, ...): printed now if every earlier one has been."""
        with self._lock:
            if seq <= self.printed:
                return
            self._ahead[seq] = line
            while self.printed + 1 in self._ahead:
                self.printed += 1
                self.sink(self._ahead.pop(self.printed))


class _Cluster:
    """One training run on a cluster: compute, place, submit, watch, collect.

    Every future gbflow makes is in ``_futures`` and released (``Future.release``) when ``run``
    ends, however it ends: copies of the Python objects (in a traceback's frames, say) then
    hold nothing on the cluster. A placed partition's future is released earlier, as soon as
    every task reading its key has copied it, so that Dask frees it while training runs (one
    compute gives one future per key: an evaluation set may share the training data's keys).
    """

    def __init__(self, client, ddf, evals, spec: Spec):
        self.client, self.ddf, self.evals = client, ddf, evals
        session = uuid.uuid4().hex
        import dataclasses
        self.spec = dataclasses.replace(spec, session=session, topic=f"gbflow-{session}")
        self.progress = Progress(spec.verbose, max(1, spec.num_boost_round))
        self.lines = OrderedLines(self.progress.relay)
        self.closed = False
        self._lock = threading.Lock()  # events arrive on the client's event loop thread
        self._futures: list = []  # every future of this run
        self._placed: dict[tuple[int, int, int], object] = {}  # (rank, set, index) -> key
        self._readers: dict[object, int] = {}  # key -> placements not yet copied
        self._held: dict[object, object] = {}  # key -> its future, while it has readers

    # -- gbflow's futures --------------------------------------------------------------------
    def _hold(self, place: tuple[int, int, int], future) -> None:
        """Partition ``place`` (rank, set, index; set 0 the training data) is read from
        ``future``'s key."""
        self._placed[place] = future.key
        self._readers[future.key] = self._readers.get(future.key, 0) + 1
        self._held[future.key] = future

    def _release(self, place=None) -> None:
        """Partition ``place`` was copied (None: every one was): release its key's future once
        no placement still reads it. Releasing a future twice is harmless."""
        with self._lock:
            places = list(self._placed) if place is None else [place]
            futures = []
            for key in [self._placed.pop(p) for p in places if p in self._placed]:
                self._readers[key] -= 1
                if not self._readers[key]:
                    del self._readers[key]
                    futures.append(self._held.pop(key))
        for f in futures:
            f.release()

    def _release_all(self) -> None:
        self._release()
        futures, self._futures = self._futures, []
        for f in futures:
            f.release()

    # -- events from the tasks -------------------------------------------------------------------
    def _on_event(self, event) -> None:
        _, message = event
        if self.closed or not isinstance(message, dict):
            return
        stage = message.get("stage")
        if stage == "loaded":  # a task copied one of its partitions
            self._release((message["rank"], message["set"], message["index"]))
        elif stage == "quantized":  # every rank binned its data (and so loaded it)
            self._release()
        elif "line" in message:
            self.lines.put(message["seq"], message["line"])

    # -- the run ---------------------------------------------------------------------------------
    def run(self):
        client, spec = self.client, self.spec
        started = time.perf_counter()
        try:
            addresses, train_refs, eval_refs = self._place(*self._compute())
            computed = time.perf_counter() - started
            self.progress.say(f"gbflow.dask: training on {len(addresses)} worker(s)")
            client.register_plugin(CollectivePlugin(), name=CollectivePlugin.name)
            relay = _Relay(self._on_event)
            client.subscribe_topic(spec.topic, relay)
            tasks = [client.submit(train_task, spec, rank, addresses, train_refs[rank],
                                   eval_refs[rank], key=f"gbflow-train-{spec.session}-{rank}",
                                   workers=[address], allow_other_workers=False, pure=False)
                     for rank, address in enumerate(addresses)]
            self._futures.extend(tasks)  # their results (the booster) are released at the end
            finished = False
            try:
                self._watch(tasks, addresses)
                raise_first(tasks)
                if any(t.status == "cancelled" for t in tasks):
                    raise CollectiveError("a gbflow training task was cancelled (by another "
                                          "client, or the cluster is closing)")
                results = [t.result() for t in tasks]
                finished = True
            finally:
                self.closed = True
                self.progress.close()
                relay.target = None
                client.unsubscribe_topic(spec.topic)
                if not finished:
                    self._stop(tasks, addresses)
        finally:
            self._release_all()
        return self._collect(results, computed, started)

    def _compute(self):
        """Every partition computed on the cluster, with its row count. Returns ((training
        futures, their rows), [(evaluation futures, their rows)] per set, who holds each)."""
        from distributed import wait
        delayed = list(self.ddf.to_delayed())
        eval_delayed = [_delayed(frame) for frame, _, _ in self.evals]
        self.progress.say(f"gbflow.dask: computing {len(delayed)} training partition(s)"
                          + (f" and {sum(map(len, eval_delayed))} evaluation partition(s)"
                             if eval_delayed else "") + " on the cluster")
        # One compute for every partition: inputs shared by training and evaluation sets (such
        # as a random_split) are computed once. Already persisted partitions are not recomputed.
        partitions = self.client.compute(delayed + [d for ds in eval_delayed for d in ds])
        self._futures.extend(partitions)
        wait(partitions)
        for f in partitions:
            if f.status == "error":
                f.result()  # the pipeline's own error (raises it with its traceback)
        # Each partition's length, counted where it is, while it is fresh (not spilled): a
        # task sizes its matrix from them, then reads its partitions one at a time. Pinned: an
        # unknown task's duration counts as 0.5 s, so Dask could move a partition to count it;
        # and after the compute, not in it (these tasks changed where Dask put the partitions).
        who_has = self.client.who_has(partitions)
        counts = [self.client.submit(len, f, workers=sorted(who_has.get(f.key, ())) or None,
                                     allow_other_workers=False) for f in partitions]
        self._futures.extend(counts)
        rows = self.client.gather(counts)
        for f in counts:
            f.release()
        train = (partitions[: len(delayed)], rows[: len(delayed)])
        evals, at = [], len(delayed)
        for ds in eval_delayed:
            evals.append((partitions[at: at + len(ds)], rows[at: at + len(ds)]))
            at += len(ds)
        return train, evals, who_has

    def _place(self, train, evals, who_has):
        """Ranks: the workers holding training partitions (each partition trained where it is).
        Evaluation partitions go to a training worker holding them, else are copied to the one
        with the fewest so far. train: (futures, rows); evals: one such pair per set; who_has:
        the partitions' holders. Returns (addresses, training refs per rank, evaluation refs per
        rank and set); the futures are held (``_hold``) until their tasks have copied them."""
        from distributed import wait
        train_futures, train_rows = train
        load: dict[str, int] = {}
        owner = []
        for f in train_futures:
            holders = sorted(who_has.get(f.key, ()))
            if not holders:
                raise CollectiveError(f"partition {f.key!r} is held by no worker after being "
                                      f"computed (was it released?)")
            chosen = min(holders, key=lambda a: (load.get(a, 0), a))
            load[chosen] = load.get(chosen, 0) + 1
            owner.append(chosen)
        addresses = sorted(load)
        rank_of = {a: r for r, a in enumerate(addresses)}
        train_refs = [[] for _ in addresses]
        for index, (f, rows, address) in enumerate(zip(train_futures, train_rows, owner)):
            rank = rank_of[address]
            train_refs[rank].append(PartitionRef(index, f.key, rows))
            self._hold((rank, 0, index), f)
        eval_refs = [[[] for _ in evals] for _ in addresses]
        eval_load = {a: 0 for a in addresses}
        copied = []  # (original, copy)
        for j, (fs, counts) in enumerate(evals):
            for index, (f, rows) in enumerate(zip(fs, counts)):
                local = [a for a in sorted(who_has.get(f.key, ())) if a in rank_of]
                chosen = min(local or addresses, key=lambda a: (eval_load[a], a))
                eval_load[chosen] += 1
                if not local:  # held by a worker that does not train: copy it over, once
                    copy = self.client.submit(_same, f, workers=[chosen],
                                              allow_other_workers=False, pure=False)
                    self._futures.append(copy)
                    copied.append((f, copy))
                    f = copy
                rank = rank_of[chosen]
                eval_refs[rank][j].append(PartitionRef(index, f.key, rows))
                self._hold((rank, 1 + j, index), f)
        if copied:
            wait([copy for _, copy in copied])
            for original, _ in copied:  # the copy is what training reads (and a key held by
                original.release()      # no training worker is read by no task)
        return addresses, train_refs, eval_refs

    def _watch(self, tasks, addresses) -> None:
        """Wait for the tasks; stop at the first failed task or lost worker. Wakes when a task
        ends (not at the next poll), and at least every ``_POLL`` seconds to look at the
        workers.

        It waits on an event set by the tasks' done callbacks, not on ``distributed.wait`` with
        a timeout: each timeout raised a TimeoutError, whose traceback, caught here, kept this
        frame and ``run``'s alive until the garbage collector ran."""
        ended = threading.Event()
        for t in tasks:
            t.add_done_callback(lambda _: ended.set())
        next_check = 0.0
        while True:
            ended.clear()  # before looking: a task ending after the look wakes the wait below
            states = [t.status for t in tasks]
            if all(s == "finished" for s in states):
                return
            if any(s in ("error", "cancelled") for s in states):
                # The others stop within moments (aborted by the failing task); wait for them so
                # that raise_first can choose the original error over their echoes of it.
                settle = time.monotonic() + 2.0
                while time.monotonic() < settle and not all(t.done() for t in tasks):
                    time.sleep(_POLL)
                return
            now = time.monotonic()
            if now >= next_check:
                alive = self.client.scheduler_info(n_workers=-1)["workers"]
                gone = [a for a in addresses if a not in alive]
                if gone:
                    raise WorkerLostError(
                        f"training worker(s) {gone} left the cluster during training (of "
                        f"{len(addresses)} training workers); gbflow cannot recover from a lost "
                        f"worker yet, so training was stopped on the others. Run train() again: "
                        f"Dask recomputes the lost partitions")
                next_check = now + _LIVENESS_PERIOD
            ended.wait(_POLL)

    def _stop(self, tasks, addresses) -> None:
        """After a failure: tell the surviving tasks to stop, then cancel them."""
        reason = "training was stopped by the driver after a failure elsewhere"
        try:
            alive = self.client.scheduler_info(n_workers=-1)["workers"]
            self.client.run(abort_session, self.spec.session, reason,
                            workers=[a for a in addresses if a in alive], wait=False,
                            on_error="ignore")
        except Exception:  # the cluster may be going away; cancelling is what matters
            pass
        self.client.cancel(tasks, force=True)

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


class _Relay:
    """A run's event handler: passes the events on to ``target`` until the run sets it to None.
    distributed keeps a topic's handler after ``unsubscribe_topic`` (2026.8 only tells the
    scheduler), so the handler must not hold the run, and through it the user's collections (a
    persisted frame's futures, a ``from_pandas`` frame's data), for the client's lifetime."""

    def __init__(self, target):
        self.target = target

    def __call__(self, event) -> None:
        target = self.target
        if target is not None:
            target(event)


def _same(frame):
    """Identity task: a copy of a partition on the worker it runs on."""
    return frame


def raise_first(tasks):
    """Raise the most telling error of failed tasks: an input or program error before a lost
    worker, before an abort (which only echoes another task's failure)."""
    failed = [(t, t.exception()) for t in tasks if t.status == "error"]
    if not failed:
        return

    def rank(item):
        e = item[1]
        return 2 if isinstance(e, CollectiveAborted) else 1 if isinstance(e, CollectiveError) else 0
    failed.sort(key=rank)
    failed[0][0].result()
