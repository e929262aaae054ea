"""Where partitions are read: which worker trains each (a holder, rows evened out), and counts.

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

import bisect

# The moves are made only when they lower the most rows any worker trains by at least this
# share of it: a move costs a partition's copy once, and a few percent of a training's time
# is below what this machine's noise lets one measure.
MIN_GAIN = 0.05


def holder_owners(holders: list[list[str]], rows: list[int]) -> list[str]:
    """Each partition's holder with the fewest rows given so far (address order on ties), in
    partition order. holders: per partition the workers holding it (none empty)."""
    load: dict[str, int] = {}
    owner = []
    for held, n in zip(holders, rows, strict=True):
        chosen = min(sorted(held), key=lambda a: (load.get(a, 0), a))
        load[chosen] = load.get(chosen, 0) + n
        owner.append(chosen)
    return owner


def training_owners(holders: list[list[str]], rows: list[int], balance: bool = True
                    ) -> list[str]:
    """The worker address each training partition trains on, in partition order. holders:
    per partition the workers holding it (none empty); rows: per partition its row count;
    balance: False keeps every partition on a holder (``holder_owners``). Only workers holding
    some training partition train: the moves stay among them. Each move takes the busiest
    worker's partition whose rows are nearest half the gap to the idlest (never one of 0 rows);
    at most as many moves as partitions (a partition may move again: only its last place is
    copied), each O(log n) plus a look at every worker."""
    owner = holder_owners(holders, rows)
    load: dict[str, int] = {}
    for a, n in zip(owner, rows):
        load[a] = load.get(a, 0) + n
    if not balance or len(load) < 2:
        return owner
    planned, moved_load = list(owner), dict(load)
    movable = {a: [] for a in load}  # per worker, (rows, partition) sorted
    for i, (a, n) in enumerate(zip(owner, rows)):
        if n > 0:
            movable[a].append((n, i))
    for a in movable:
        movable[a].sort()
    for _ in range(len(owner)):  # each move lowers the sum of squared loads: it ends
        heavy = max(moved_load, key=lambda a: (moved_load[a], a))
        light = min(moved_load, key=lambda a: (moved_load[a], a))
        gap = moved_load[heavy] - moved_load[light]
        choices = movable[heavy]
        at = bisect.bisect_left(choices, (gap / 2, -1))
        near = [k for k in (at - 1, at) if 0 <= k < len(choices) and choices[k][0] < gap]
        if not near:
            break
        k = min(near, key=lambda k: (abs(2 * choices[k][0] - gap), choices[k][1]))
        n, i = choices.pop(k)
        bisect.insort(movable[light], (n, i))
        planned[i] = light
        moved_load[heavy] -= n
        moved_load[light] += n
    if max(moved_load.values()) > (1 - MIN_GAIN) * max(load.values()):
        return owner
    return planned


# The most bytes of partitions (Dask's sizes) one row-counting task reads together.
COUNT_GROUP_BYTES = 64 << 20


def counting_groups(holders: list, nbytes: list) -> list[tuple]:
    """The driver's row-counting tasks: [(worker or None, [partition positions])], each
    worker's partitions (by their first holder; None: no holder known, counted anywhere) in
    runs of at most ``COUNT_GROUP_BYTES`` (one partition at least)."""
    groups, open_group = [], {}  # worker -> (its group being filled, its bytes so far)
    for j, (workers, size) in enumerate(zip(holders, nbytes)):
        w = workers[0] if workers else None
        group, total = open_group.get(w, (None, 0))
        if group is None or total + size > COUNT_GROUP_BYTES:
            group, total = [], 0
            groups.append((w, group))
        group.append(j)
        open_group[w] = (group, total + size)
    return groups
