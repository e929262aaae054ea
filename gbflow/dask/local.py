"""Training on a Dask collection without a client: every partition computed in this process
and trained here, as one worker of a cluster would."""
from __future__ import annotations

import time

from .. import boosting
from ..backend import get_backend
from ..collective import LOCAL
from .loading import JoinedPartitions, eval_parts, first_error, global_offsets
from .messages import Spec
from .rounds import KnownRounds


def current_client():
    """The active ``distributed.Client`` (``Client.as_current()`` or the default one), or None."""
    try:
        from distributed import default_client
        return default_client()
    except (ImportError, ValueError):
        return None


def check_client(client) -> None:
    """Raises TypeError unless ``client`` (``train``'s argument) is None or a
    ``distributed.Client``: a scheduler address or anything else fails here, before any work,
    rather than as an AttributeError deep in training."""
    if client is None:
        return
    try:
        from distributed import Client
    except ImportError:
        Client = None
    if Client is None or not isinstance(client, Client):
        hint = (f"; connect first: client=distributed.Client({client!r})"
                if isinstance(client, str) else "")
        raise TypeError(f"client must be a distributed.Client (or None for the active client, "
                        f"else training in this process), got {type(client).__name__}{hint}")


def partitions_of(frame) -> list:
    """A frame's partitions as delayed objects (none for the training data as an eval set)."""
    return [] if frame is None else list(frame.to_delayed())


def train_in_process(ddf, evals, spec: Spec, known: KnownRounds):
    """No client: compute every partition here (one dask.compute, so inputs shared by the
    training and evaluation sets are computed once), check and join them, and run
    ``boosting.fit`` on them, as one worker of a cluster would."""
    import dask
    started = time.perf_counter()
    delayed = list(ddf.to_delayed()) + [d for frame, _, _ in evals for d in partitions_of(frame)]
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
    known.rows = sum(train.lengths.values())  # lengths: {partition index: rows}
    with backend.limited_threads(spec.params.nthread), \
            backend.own_memory_pool(unless_chosen=True):  # as api's in-process training
        booster = boosting.fit(backend, [train.part], spec.params,
                               spec.num_boost_round - (spec.resume.rounds if spec.resume else 0),
                               eval_parts(evals_joined, spec), spec.options, spec.verbose,
                               row_offsets=[train.row_ids(offsets)], drop_features=True,
                               objective=spec.objective, init_model=spec.init_model,
                               callbacks=list(spec.callbacks), resume=spec.resume,
                               on_rounds=known.saver)
    booster.timings["dask_compute"] = computed
    booster.timings["dask_total"] = time.perf_counter() - started
    return booster
