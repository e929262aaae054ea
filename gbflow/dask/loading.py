"""A training task's partitions: read from the worker's memory, checked, joined into one part."""
from __future__ import annotations

import asyncio
import traceback

import numpy as np

from .. import categories, inputs, prepare, ranking
from ..evaluation import TRAINING
from .errors import CollectiveError
from .messages import PartitionRef, Spec, Table


def load_partition(frame, index: int, table: Table, spec: Spec) -> inputs.DataSet:
    """One partition (pandas/cuDF frame) -> a checked ``DataSet`` (its label and weight may be
    views of the partition's memory; ``JoinedPartitions`` copies them).

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
                            feature_names=list(spec.features), allow_empty=True,
                            missing=spec.params.missing, base_margin=spec.base_margin,
                            qid=spec.qid, feature_types=spec.params.feature_types)
    spec.params.loss.check_label(dataset.label, f"label column {spec.label!r} of {what}")
    return dataset


def partition_lengths(*frames) -> list[int]:
    """The row count of each partition (a task on the worker holding them all)."""
    return [len(frame) for frame in frames]


def raw_bytes(frame) -> int:
    """Memory held by one partition (pandas or cuDF), index included."""
    return int(frame.memory_usage(index=True).sum())


def fetch(worker, ref: PartitionRef, what: str):
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


class JoinedPartitions:
    """One collection's partitions on this process, checked and joined into one part.

    Partitions are read one at a time and copied into a single (rows, features) float32 matrix
    (on the backend's device, or in host memory when it would not fit there), so that only one
    raw partition's float32 copy exists at a time besides the joined matrix, and training sees
    one shard per worker (a shard per partition would cost a kernel call per partition and
    level). Nothing of a partition is kept once it is copied (its labels and weights are copied
    too: they would be views of the partition's memory), and
    ``released`` is told, so that the driver can let Dask drop it while the next ones load.
    errors: (sort key, exception) of partitions that failed their checks. lengths: {partition
    index: rows}. raw_bytes: the partitions' size.
    """

    def __init__(self, backend, spec: Spec, table: Table, key: int, items: list, released=None):
        """items: (partition index, rows, frame) triples, a frame as a pandas/cuDF partition or a
        callable returning one (called when its turn comes: the matrix is sized from ``rows``
        first); the list is emptied as the frames are converted. released(index): called once
        partition ``index`` is let go (converted, or failed its checks). The matrix is in host
        memory when the joined values would not fit the device beside their bins
        (``prepare.raw_fits``: a collection larger than the device; training and evaluation
        then read them a block of rows at a time), else on the device."""
        self.spec, self.errors, self.lengths, self.raw_bytes = spec, [], {}, 0
        total = sum(rows for _, rows, _ in items)
        n_features = len(spec.features)
        # joined on the device, unless the raw values would not fit there beside their bins:
        # then in host memory, and binning gets them a block at a time
        xp = backend.xp if prepare.raw_fits(backend, spec.params, total, total * n_features * 4,
                                            prepare.dense_binned_bytes(total, n_features)) else np
        X = xp.empty((total, n_features), dtype=np.float32)
        self.on_host = xp is np
        label = np.empty(total, dtype=np.float64)
        weight = None if spec.weight is None else np.empty(total, dtype=np.float64)
        margin = None if spec.base_margin is None else np.empty(total, dtype=np.float64)
        qid = None if spec.qid is None else np.empty(total, dtype=np.float64)
        self.runs, at = [], 0  # runs: (partition index, rows)
        by_value = ()
        blocks = []  # per partition (its rows of X, its categories): joined onto one list below
        items.reverse()  # popped from the end: the list holds only the partitions still to come
        while items:
            index, rows, frame = items.pop()
            try:
                frame = frame() if callable(frame) else frame
                self.raw_bytes += raw_bytes(frame)
                if len(frame) != rows:
                    raise CollectiveError(
                        f"{table.what} partition {index} has {len(frame)} rows where {rows} were "
                        f"counted when it was computed (was it recomputed differently?)")
                part = load_partition(frame, index, table, spec)
            except Exception as e:  # reported once every process agrees on the first error
                # The traceback's frames would keep the partition alive (a local of each).
                traceback.clear_frames(e.__traceback__)
                self.errors.append(((key, index), e))
                continue
            finally:
                del frame
                if released is not None:
                    released(index)
            X[at: at + part.n_rows] = backend.to_host(part.X) if self.on_host else \
                backend.asarray(part.X)
            blocks.append((slice(at, at + part.n_rows), part.categories))
            by_value = part.by_value  # (the same in every partition: the meta's dtypes)
            label[at: at + part.n_rows] = backend.to_host(part.label)
            if weight is not None:
                weight[at: at + part.n_rows] = backend.to_host(part.weight)
            if margin is not None:
                margin[at: at + part.n_rows] = backend.to_host(part.base_margin)
            if qid is not None:
                qid[at: at + part.n_rows] = backend.to_host(part.qid)
            self.lengths[index] = part.n_rows
            self.runs.append((index, part.n_rows))
            at += part.n_rows
            del part
        if qid is not None and len(self.runs) > 1:  # a query must not span two partitions
            try:
                bounds = np.cumsum([0] + [rows for _, rows in self.runs])
                ranking.check_apart([np.unique(qid[a:b]) for a, b in zip(bounds, bounds[1:])],
                                    table.what)
            except ValueError as e:
                self.errors.append(((key, self.runs[0][0]), e))
        self.part = inputs.DataSet(
            X=X[:at], label=label[:at], weight=None if weight is None else weight[:at],
            feature_names=list(spec.features), label_name=spec.label, weight_name=spec.weight,
            base_margin=None if margin is None else margin[:at], base_margin_name=spec.base_margin,
            qid=None if qid is None else qid[:at], qid_name=spec.qid, by_value=by_value)
        self._join_categories(blocks)

    def _join_categories(self, blocks: list) -> None:
        """Each partition's category codes moved onto the union of the partitions' lists (the
        training's union over workers comes later: ``categories.unify``)."""
        joined = categories.join_pieces(self.part.X, self.part.feature_names, blocks)
        if joined:
            self.part.categories = joined

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


def eval_parts(joined: list, spec: Spec) -> list[tuple]:
    """``boosting.fit``'s evals from each evaluation set's ``JoinedPartitions`` (None for the
    training data itself, which becomes ``evaluation.TRAINING``): (parts, name) pairs, no part
    where this process holds no row of the set."""
    return [(TRAINING if j is None else [j.part] if j.part.n_rows else [], name)
            for j, (name, _) in zip(joined, spec.evals)]
