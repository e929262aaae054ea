"""Which worker trains each training partition: one holding it, with the rows evened out.

A Dask training advances level by level at the pace of its busiest worker, and Dask places
computed or persisted partitions without regard to their rows (eight equal partitions on two
workers often land five and three). ``training_owners`` first gives each partition to the
holder with the fewest rows so far, then moves whole partitions from the busiest training
worker to the idlest while that lowers the pair's larger share; the driver copies a moved
partition to its new worker once (``driver._Cluster._place``). The model does not depend on
where rows are trained (the sums are exact integers, and each row keeps its partition's global
row numbers).
"""
from __future__ import annotations

# The moves are made only when they lower the most rows any worker trains by at least this
# share of it: a move costs a partition's copy once, and a few percent of a training's time
# is below what this machine's noise lets one measure.
MIN_GAIN = 0.05


def training_owners(holders: list[list[str]], rows: list[int], balance: bool = True
                    ) -> list[str]:
    """The worker address each training partition trains on, in partition order. holders:
    per partition the workers holding it (none empty); rows: per partition its row count;
    balance: False keeps every partition on a holder (the least loaded by rows). Only workers
    holding some training partition train: the moves stay among them."""
    load: dict[str, int] = {}
    owner = []
    for held, n in zip(holders, rows, strict=True):
        chosen = min(sorted(held), key=lambda a: (load.get(a, 0), a))
        load[chosen] = load.get(chosen, 0) + n
        owner.append(chosen)
    if not balance or len(load) < 2:
        return owner
    planned, moved_load = list(owner), dict(load)
    for _ in range(4 * len(owner)):  # each move lowers the sum of squared loads: it ends
        heavy = max(moved_load, key=lambda a: (moved_load[a], a))
        light = min(moved_load, key=lambda a: (moved_load[a], a))
        movable = [i for i, a in enumerate(planned) if a == heavy and
                   0 < rows[i] and moved_load[light] + rows[i] < moved_load[heavy]]
        if not movable:
            break
        best = min(movable, key=lambda i: (max(moved_load[heavy] - rows[i],
                                               moved_load[light] + rows[i]), i))
        planned[best] = light
        moved_load[heavy] -= rows[best]
        moved_load[light] += rows[best]
    if max(moved_load.values()) > (1 - MIN_GAIN) * max(load.values()):
        return owner
    return planned
