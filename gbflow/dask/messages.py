"""What the driver sends the training tasks: partition places, collections' columns, a spec."""
from __future__ import annotations

import dataclasses

from ..evaluation import EvalOptions
from ..params import Params


@dataclasses.dataclass(frozen=True)
class PartitionRef:
    """Partition ``index`` of a collection, held under Dask key ``key`` on the task's worker, with
    ``rows`` rows (counted when it was computed: the task sizes its matrix before reading any)."""

    index: int
    key: object
    rows: int


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
    options: EvalOptions  # evaluation and early stopping
    verbose: object
    label: str
    weight: str | None
    features: tuple[str, ...]
    train: Table
    # (name, table) per evaluation set; table None: the training data itself
    evals: tuple[tuple[str, Table | None], ...]
    timeout: float
    data_on_gpu: bool = False  # cuDF partitions: device="auto" then means the GPU
    objective: object = None  # obj='s custom_objective.Custom, or None for params.loss
    init_model: object = None  # xgb_model's Booster to continue, or None
    callbacks: tuple = ()  # callback.TrainingCallback instances, run on every worker
    resume: object = None  # resume.TrainingState of the rounds done before a restart, or None
    report_rounds: bool = False  # rank 0 sends each completed round's trees and values
    base_margin: str | None = None  # the column of each row's starting margin, or None
    qid: str | None = None  # the column of each row's query id (ranking), or None
    # the ranks may exchange over direct TCP links (the client's gbflow.collective-sockets)
    sockets: bool = True
