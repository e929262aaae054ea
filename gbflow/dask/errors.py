"""The errors of training on Dask (a peer lost, hung or aborted, or the collective broken), how
they are worded, and which of several is raised."""
from __future__ import annotations


class CollectiveError(RuntimeError):
    """Training across workers could not go on (base class)."""


class CollectiveAborted(CollectiveError):
    """Another training task failed and asked this one to stop."""


class WorkerLostError(CollectiveError):
    """A training worker died or could not be reached during training."""


class CollectiveTimeout(CollectiveError):
    """A peer sent nothing for longer than the collective's timeout."""


class TrainingCancelled(CollectiveAborted):
    """The training task was cancelled (its client closed, or the driver cancelled it)."""


def worker_statuses(workers: list, alive: dict) -> str:
    """"['tcp://a' (paused), ...]": the workers with their status at the scheduler."""
    return "[" + ", ".join(f"{a!r} ({alive.get(a, {}).get('status', 'gone')})"
                           for a in workers) + "]"


def lost_error(gone: list, addresses: list) -> WorkerLostError:
    return WorkerLostError(f"training worker(s) {gone} left the cluster during training (of "
                           f"{len(addresses)} training workers); training was stopped on the "
                           f"others")


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
