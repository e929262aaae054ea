"""The errors of training on Dask: a peer lost, hung or aborted, or the collective broken."""
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
