"""The Dask driver's waits: for partitions, for training tasks, for a stop; each with a deadline
and a reason (a lost, paused, hung or stopped worker is named), never an endless wait."""
from __future__ import annotations

import threading
import time

from .collective import abort_session
from .errors import (
    CollectiveError,
    CollectiveTimeout,
    WorkerLostError,
    lost_error,
    worker_statuses,
)

_POLL = 0.1  # the longest wait between looks at the tasks, workers and events
_LIVENESS_PERIOD = 0.5  # seconds between asking the scheduler which workers are alive
LOSS_NOTICE = 3.0  # seconds the scheduler gets to notice a dead worker (about 1 s after SIGKILL)
_STOP_WAIT = 5.0  # seconds to wait for the workers to take an abort
_BUSY = ("every thread of the worker ran other tasks all that time (a training task needs one "
         "on each training worker): give the workers more threads, or run fewer trainings or "
         "other work at once")
_PAUSED = ("a paused worker is above Dask's memory pause threshold (distributed.worker.memory."
           "pause) and runs no task: give the workers more memory, or the data more workers")


class Watching:
    """The waits of a training run (``driver._Cluster``), which provides ``client``, ``spec``
    (its ``timeout`` and ``session``), ``known`` (``rounds.KnownRounds``, saved while
    waiting), ``started`` (ranks whose task has begun) and ``_workers()``."""

    def _wait_all(self, futures, doing: str, pinned: list | None = None) -> None:
        """Wait until every future is done. A pipeline may take as long as it takes, but when
        none finished for the collective timeout and a worker is paused (Dask stops running
        tasks on a worker above its memory pause threshold), CollectiveTimeout naming it.
        pinned: per future the workers its task may run on (None: any); WorkerLostError when
        every one of a future's workers has left (Dask would wait for them forever)."""
        ended = _woken_when_done(futures)
        finished, progress = 0, time.monotonic()
        next_check = time.monotonic() + _LIVENESS_PERIOD
        pending = list(futures)  # looked at again until done (not every future every wake)
        while True:
            ended.clear()
            pending = [f for f in pending if not f.done()]
            if not pending:  # all at once again: a finished future may wait anew (lost key)
                pending = [f for f in futures if not f.done()]
                if not pending:
                    return
            now_done = len(futures) - len(pending)
            if pinned is not None and time.monotonic() >= next_check:
                self._raise_if_pinned_lost(futures, pinned, doing)
                next_check = time.monotonic() + _LIVENESS_PERIOD
            if now_done > finished:
                finished, progress = now_done, time.monotonic()
            elif time.monotonic() - progress > self.spec.timeout:
                workers = self._workers()
                paused = [a for a, w in workers.items() if w.get("status") == "paused"]
                if paused:
                    raise CollectiveTimeout(
                        f"{doing} made no progress for {self.spec.timeout:g} s "
                        f"(gbflow.collective-timeout) and worker(s) "
                        f"{worker_statuses(paused, workers)} hold what is left: {_PAUSED}")
            # (at most _POLL: a future whose key was lost, a restart's kept partition, ends
            # its done callback at once, so the wait is not woken when the key is computed
            # again; looking at the futures costs no message)
            ended.wait(_POLL)

    def _raise_if_pinned_lost(self, futures, pinned: list, doing: str) -> None:
        """WorkerLostError when a future waiting to run (or whose result went with its worker:
        Dask then runs it again where it was pinned) can run only on workers that left the
        cluster. Finished, failed and cancelled futures are not looked at."""
        waiting = [(f, w) for f, w in zip(futures, pinned) if w and f.status in ("pending", "lost")]
        if not waiting:
            return
        alive = self._workers()
        for future, workers in waiting:
            if not any(a in alive for a in workers):
                raise WorkerLostError(f"worker(s) {sorted(workers)} left the cluster while "
                                      f"{doing}")

    def _results(self, futures, pinned: list, doing: str) -> list:
        """The results of ``futures`` (each pinned to the workers in ``pinned``), fetched in one
        gather once all are done. The gather runs on a thread while this one looks for lost
        workers: a result lost with its worker before it arrived makes Dask run the task again
        where it can never run, so the futures are cancelled (ending the gather) and
        WorkerLostError raised, not an endless wait. (Not ``result(timeout=...)`` in a loop:
        a timeout cancels the transfer, and a result slower to arrive than it never came.)"""
        self._wait_all(futures, doing, pinned)
        outcome: dict = {}

        def fetch():
            try:
                outcome["results"] = self.client.gather(futures)
            except BaseException as e:  # handed to the waiting thread
                outcome["error"] = e

        fetching = threading.Thread(target=fetch, name="gbflow-fetch", daemon=True)
        fetching.start()
        while True:
            fetching.join(_LIVENESS_PERIOD)
            if not fetching.is_alive():
                break
            try:
                self._raise_if_pinned_lost(futures, pinned, doing)
            except WorkerLostError:
                self.client.cancel(futures)
                raise
        if "error" in outcome:
            raise outcome.pop("error")
        return outcome["results"]

    def _watch(self, tasks, addresses) -> None:
        """Wait for the tasks; stop at the first failed task or lost worker. Wakes when a task
        ends (not at the next poll), and at least every ``_POLL`` seconds to look at the
        workers.

        It waits on an event set by the tasks' done callbacks, not on ``distributed.wait`` with
        a timeout: each timeout raised a TimeoutError, whose traceback, caught here, kept this
        frame and ``run``'s alive until the garbage collector ran."""
        ended = _woken_when_done(tasks)
        next_check, submitted = 0.0, time.monotonic()
        while True:
            ended.clear()  # before looking: a task ending after the look wakes the wait below
            states = [t.status for t in tasks]
            if all(s == "finished" for s in states):
                return
            if any(s in ("error", "cancelled") for s in states):
                # The others stop within moments (aborted by the failing task); wait for them so
                # that raise_first can choose the original error over their echoes of it. A dead
                # worker's task never ends: stop waiting once the scheduler reports it gone.
                settle = time.monotonic() + 2.0
                while time.monotonic() < settle and not all(t.done() for t in tasks):
                    if _gone(addresses, self._workers()):
                        break
                    time.sleep(_POLL)
                return
            self.known.save()
            now = time.monotonic()
            if now >= next_check:
                alive = self._workers()
                if _gone(addresses, alive):
                    raise lost_error(_gone(addresses, alive), addresses)
                waiting = [a for r, a in enumerate(addresses) if r not in self.started]
                if waiting and now - submitted > self.spec.timeout:
                    paused = any(alive.get(a, {}).get("status") == "paused" for a in waiting)
                    raise CollectiveTimeout(
                        f"the training task did not start on worker(s) "
                        f"{worker_statuses(waiting, alive)} within {self.spec.timeout:g} s "
                        f"(gbflow.collective-timeout): {_PAUSED if paused else _BUSY}")
                next_check = now + _LIVENESS_PERIOD
            ended.wait(_POLL)

    def _raise_stuck(self, tasks, addresses) -> None:
        """After a task failed on a collective error while others still run: a worker that left
        the scheduler is lost (``WorkerLostError``, which a restart recovers from); one still
        there that stopped answering is hung, stopped or paused (``CollectiveTimeout`` naming
        it). Waits up to ``LOSS_NOTICE`` s for the scheduler to notice a death."""
        failed = [t.exception() for t in tasks if t.status == "error"]
        stuck = [a for a, t in zip(addresses, tasks) if not t.done()]
        if not stuck or not failed or not all(isinstance(e, CollectiveError) for e in failed):
            return
        deadline = time.monotonic() + LOSS_NOTICE
        while True:
            alive = self._workers()
            if _gone(addresses, alive):
                raise lost_error(_gone(addresses, alive), addresses)
            if time.monotonic() > deadline:
                break
            time.sleep(_POLL)
        raise CollectiveTimeout(
            f"training worker(s) {worker_statuses(stuck, alive)} stopped answering (hung, "
            f"stopped or paused) and the others gave up after {self.spec.timeout:g} s without a "
            f"message (gbflow.collective-timeout); training was stopped") from failed[0]

    def _stop(self, tasks, addresses) -> None:
        """After a failure: tell the tasks still running to stop (in the background, for at most
        ``_STOP_WAIT`` s: a hung worker never answers), and cancel them (each task then stops at
        its next reduction)."""
        reason = "training was stopped by the driver after a failure elsewhere"
        running = [a for a, t in zip(addresses, tasks) if not t.done()]

        def abort():
            try:
                self.client.run(abort_session, self.spec.session, reason, workers=running,
                                wait=False, on_error="ignore", callback_timeout=_STOP_WAIT)
            except Exception:  # a hung worker, or the cluster is going away
                pass

        if running:  # on a thread: a hung worker never answers, and cancelling matters more
            threading.Thread(target=abort, name="gbflow-abort", daemon=True).start()
        self.client.cancel(tasks, force=True)


def scheduler_workers(client) -> dict:
    """The scheduler's workers now, {address: info (status, memory_limit, metrics, ...)},
    asked of the scheduler itself. Not ``client.scheduler_info()``: it fetches into the
    client's cache and returns the cache, which the client's periodic update of cluster-wide
    totals may replace in between with one listing no worker (distributed 2026.8: about one
    call in 25,000), and then every training worker looked lost."""
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def _woken_when_done(futures) -> threading.Event:
    """An event each future sets when it ends: a wait on it wakes at once, not at a poll (clear
    it before looking at the futures, so that one ending after the look still wakes the wait)."""
    ended = threading.Event()
    for f in futures:
        f.add_done_callback(lambda _: ended.set())
    return ended


def _gone(addresses: list, alive: dict) -> list:
    """The training workers the scheduler no longer has."""
    return [a for a in addresses if a not in alive]
