"""gbflow.train: validate inputs, quantize, run the boosting loop over shards, evaluate, stop early."""
from __future__ import annotations

import sys
import time

import numpy as np

from . import inputs
from . import fixed_point, metrics, objectives, predictor, routing, sketch
from .backend import get_backend, on_gpu
from .booster import Booster
from .grower import Shard, ShardSet, grow_tree, resolve
from .params import Params, make_params


def _mix64(x):
    # splitmix64 finaliser on uint64 arrays (wrapping arithmetic): a counter-based random stream.
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def row_sample_mask(xp, n_rows: int, row_offset, seed: int, round_index: int, rate: float):
    """(n_rows,) bool: rows kept by ``subsample`` in this round.

    Each row's draw depends only on (seed, round, global row number), never on how rows are split
    into shards, so sharded and unsharded training sample the same rows. row_offset: the global
    number of the shard's first row (its rows follow each other), or an (n_rows,) uint64 array of
    every row's global number (a shard joining partitions that are not adjacent).
    """
    key = _mix64(xp.asarray([seed % 2**64], dtype=xp.uint64)
                 ^ _mix64(xp.asarray([round_index + 1], dtype=xp.uint64)))
    if isinstance(row_offset, (int, np.integer)):
        rows = xp.arange(row_offset, row_offset + n_rows, dtype=xp.uint64)
    else:
        rows = xp.asarray(row_offset, dtype=xp.uint64)
    u = (_mix64(rows ^ key) >> xp.uint64(11)).astype(xp.float64) * (1.0 / 2**53)
    return u < rate


def feature_sample(n_features: int, seed: int, round_index: int, group: int, rate: float):
    """(n_features,) bool: features a tree may split on (``colsample_bytree``), the same everywhere."""
    allowed = np.ones(n_features, dtype=bool)
    if rate >= 1.0:
        return allowed
    k = max(1, int(np.floor(rate * n_features + 1e-9)))
    rng = np.random.default_rng([seed % 2**63, round_index, group])
    allowed[:] = False
    allowed[rng.choice(n_features, size=k, replace=False)] = True
    return allowed


class _Progress:
    """Per-round log lines: every ``period`` rounds, the first and the last.

    Lines go to stderr, or to ``emit`` (a callable taking one line) when given: on a Dask worker
    they are sent to the client, which prints them.
    """

    def __init__(self, verbose, n_rounds: int, emit=None):
        if verbose is True:
            period = max(1, n_rounds // 20)
        else:
            period = int(verbose) if verbose else 0
        self.period, self.n_rounds, self.start = period, n_rounds, time.perf_counter()
        self.emit = emit or (lambda line: print(line, file=sys.stderr, flush=True))

    def round(self, i: int, scores: list[tuple[str, str, float]]) -> None:
        if not self.period or not (i == 0 or (i + 1) % self.period == 0 or i + 1 == self.n_rounds):
            return
        text = "  ".join(f"{name}-{metric}:{value:.6f}" for name, metric, value in scores)
        elapsed = time.perf_counter() - self.start
        width = len(str(self.n_rounds))
        self.emit(f"[{i + 1:>{width}}/{self.n_rounds}] " + (f"{text}  " if text else "")
                  + f"({elapsed:.1f}s)")

    def say(self, text: str) -> None:
        if self.period:
            self.emit(text)


class _EvalSet:
    """A held-out table, as this process's parts, whose margins are kept up to date tree by tree."""

    def __init__(self, backend, parts: list[inputs.DataSet], name: str, base_margin):
        self.name, self.parts, self.backend = name, parts, backend
        self.X = [backend.asarray(p.X) for p in parts]
        empty = predictor.FlatForest.from_trees([])
        self.margin = [predictor.predict_margin(backend, X, empty, base_margin) for X in self.X]

    def add(self, trees) -> None:
        forest = predictor.FlatForest.from_trees(trees)
        for X, margin in zip(self.X, self.margin):
            predictor.add_trees(self.backend, X, forest, margin)

    def request(self, objective, metric_names) -> tuple[list[str], list[tuple]]:
        """What ``metrics.evaluate_many`` needs: the names and (label, prediction, weight) per part."""
        xp, to_host = self.backend.xp, self.backend.to_host
        return metric_names, [(to_host(p.label), to_host(objective.transform(xp, m)),
                               None if p.weight is None else to_host(p.weight))
                              for p, m in zip(self.parts, self.margin)]


def _row_offset(offset):
    return int(offset) if isinstance(offset, (int, np.integer)) else np.asarray(offset, np.uint64)


def _as_parts(entry) -> list[inputs.DataSet]:
    return list(entry) if isinstance(entry, (list, tuple)) else [entry]


def _check_global_inputs(shardset: ShardSet, parts, eval_sets, params) -> tuple[int, float]:
    """Checks that need every process's data; every process raises the same error. Returns the
    training rows and the largest training weight over every process (1.0 without weights)."""
    n_rows = shardset.allreduce_sum(np.array([sum(p.n_rows for p in parts)], dtype=np.int64))
    if int(n_rows[0]) == 0:
        raise ValueError("training data has no rows")
    largest = 1.0
    if parts[0].weight is not None:
        largest = shardset.allreduce_max(max((float(p.weight.max()) for p in parts
                                              if p.n_rows), default=0.0))
        if not largest > 0:
            raise ValueError("weight: all training weights are zero")
    if not eval_sets:
        return int(n_rows[0]), float(largest)
    # Per evaluation set: row count, and the label range (auc needs two classes).
    counts = shardset.allreduce_sum(np.array([sum(p.n_rows for p in e) for e, _ in eval_sets],
                                             dtype=np.int64))
    ranges = shardset.allreduce_max(np.array(
        [[max((float(p.label.max()) for p in e if p.n_rows), default=-np.inf),
          max((-float(p.label.min()) for p in e if p.n_rows), default=-np.inf)]
         for e, _ in eval_sets], dtype=np.float64))
    for (_, name), count, (high, minus_low) in zip(eval_sets, counts, ranges):
        if count == 0:
            raise ValueError(f"evaluation set {name!r} has no rows")
        if "auc" in params.metrics and high == -minus_low:
            raise ValueError(f"evaluation set {name!r} holds only one class: auc is undefined "
                             f"there (early stopping could never see it improve)")
    return int(n_rows[0]), float(largest)


def fit(backend, parts: list[inputs.DataSet], params: Params, num_boost_round: int,
        evals: list[tuple] = (), early_stopping_rounds: int | None = None,
        verbose=True, keep_training_margins: bool = False, *, shardset: ShardSet | None = None,
        row_offsets: list[int] | None = None, drop_features: bool = False,
        emit=None, after_quantize=None) -> Booster:
    """The boosting loop over this process's parts, with every cross-part reduction done by
    ``shardset``'s collective. Inputs are already validated (each part on its own).

    parts: non-empty list of ``DataSet`` (one shard each; 0-row parts are allowed), the same
    feature names and label/weight presence everywhere. evals: (DataSet or list of DataSet,
    name) pairs; a list holds this process's parts of the set (possibly none). shardset: an empty
    ``ShardSet`` whose ``allreduce_*``/``allgather`` reach the other processes (default: this
    process only). row_offsets: global row number of each part's first row (default: the parts
    one after the other from 0), or for a part whose rows are not numbered consecutively an
    (n_i,) uint64 array of its rows' global numbers; row sampling follows them. drop_features: set each part's X to
    None once binned, so the raw float32 matrix can be freed. emit: where progress lines go
    (default stderr). after_quantize: called without arguments once every process has binned its
    parts (the Dask driver then lets the raw partitions go). Every process must call ``fit`` with the same params, round count and
    evaluation set names, and gets the same model.

    The model depends only on the rows of the concatenated parts (over all processes), not on how
    they are split into parts or processes, nor (without ``subsample``, whose draws follow the
    global row number) on their order. With ``keep_training_margins`` the booster gets
    ``training_margins``: per part the (n_i, n_groups) float64 margins reached in training (for
    tests; not when early stopping cut trees off). Side effect: progress lines unless ``verbose``
    is False.
    """
    xp = backend.xp
    start = time.perf_counter()
    objective = objectives.get_objective(params.objective, params.num_class)
    n_groups = params.n_groups
    feature_names = parts[0].feature_names
    shardset = ShardSet(backend, []) if shardset is None else shardset
    if row_offsets is None:
        row_offsets = np.concatenate([[0], np.cumsum([p.n_rows for p in parts])[:-1]]).tolist()
    timers = shardset.timers
    eval_sets = [(_as_parts(d), name) for d, name in evals]
    with timers("quantize"):
        n_rows, max_weight = _check_global_inputs(shardset, parts, eval_sets, params)
        device_X = [backend.asarray(p.X) for p in parts]
        weights = None if parts[0].weight is None else [backend.asarray(p.weight) for p in parts]
        cuts = sketch.compute_cuts(xp, device_X, weights, params.max_bin, collective=shardset,
                                     block_values=backend.sketch_block_values, n_rows=n_rows,
                                     max_weight=max_weight)
        backend.free_cached_memory()  # the sketch's temporaries
        binned = [routing.bin_part(backend, X, cuts) for X in device_X]
        del device_X  # only the binned shards stay
        route = routing.Routing.all_dense(cuts.n_features)
        if params.sparse_threshold < 1.0:  # rows per (feature, bin), over every process
            counts = shardset.allreduce_sum(
                np.sum([routing.bin_counts(backend, b, cuts) for b in binned], axis=0))
            route = routing.decide(counts, cuts, params.sparse_threshold)
        for i, p in enumerate(parts):
            dense, dense_by_feature, sparse = routing.build_stores(backend, binned[i], cuts, route)
            binned[i] = None
            shardset.shards.append(Shard(
                bins=dense, bins_by_feature=dense_by_feature, label=backend.asarray(p.label),
                weight=None if weights is None else weights[i], margin=None,
                row_offset=_row_offset(row_offsets[i]), sparse=sparse))
        shardset.set_routing(routing.DeviceRouting.build(backend, route, cuts))
        backend.free_cached_memory()  # the full binned matrix and routing's temporaries
        if drop_features:
            for p in parts:
                p.X = None
    base_margin = objective.base_margin(xp, [s.label for s in shardset.shards], weights,
                                        params.base_score, collective=shardset)
    if after_quantize is not None:  # the reductions above passed: every process has binned
        after_quantize()
    for shard in shardset.shards:
        shard.margin = xp.empty((shard.n_rows, n_groups), dtype=np.float64)
        shard.margin[:] = xp.asarray(base_margin)[None, :]
    n_total = shardset.n_rows_total
    eval_sets = [_EvalSet(backend, e, name, base_margin) for e, name in eval_sets]
    metric_names = params.metrics
    progress = _Progress(verbose, num_boost_round, emit)
    trees, evals_result = [], {e.name: {m: [] for m in metric_names} for e in eval_sets}
    best_score, best_iteration = None, None
    maximize = metric_names[-1] in metrics.MAXIMIZE
    # Fixed-point scales from the loss's bounds on |g| and |h| where it has them (no per-round
    # reduction), else from the round's global max |g| and |h|.
    bounds = objective.gradient_bounds(max_weight)
    for round_index in range(num_boost_round):
        with timers("gradients"):
            grad_hess = []
            for shard in shardset.shards:
                g, h = objective.gradients(xp, shard.margin, shard.label, shard.weight)
                if params.subsample < 1.0:
                    keep = row_sample_mask(xp, shard.n_rows, shard.row_offset, params.seed,
                                           round_index, params.subsample)
                    g, h = g * keep[:, None], h * keep[:, None]
                grad_hess.append((g, h))
            if bounds is not None:
                largest = bounds
            else:
                # Global max |g| and |h| of every class in one reduction: (n_groups, 2), read
                # from the device in one copy. Whole-column reductions: CuPy's max(axis=0) over
                # a tall (n, n_groups) array was one slow segmented reduction (9 ms at 10M rows
                # on an H200).
                local = backend.to_host_all([xp.stack([xp.stack([xp.abs(g[:, k]).max(),
                                                                 xp.abs(h[:, k]).max()])
                                                       for k in range(n_groups)])
                                             for g, h in grad_hess if len(g)])
                largest = shardset.allreduce_max(np.max(local, axis=0) if local else
                                                 np.zeros((n_groups, 2), dtype=np.float64))
        round_trees = []
        for k in range(n_groups):
            with timers("gradients"):
                scale_g = fixed_point.fixed_point_scale(float(largest[k, 0]), n_total)
                scale_h = fixed_point.fixed_point_scale(float(largest[k, 1]), n_total)
                gh = [backend.kernels.quantise_gradients(g[:, k], h[:, k], scale_g, scale_h)
                      for g, h in grad_hess]
            allowed = feature_sample(len(feature_names), params.seed, round_index, k,
                                     params.colsample_bytree)
            tree, leaf_rows = grow_tree(shardset, gh, scale_g, scale_h, cuts, params, allowed, k)
            with timers("margins"):
                for shard, rows in zip(shardset.shards, leaf_rows):
                    rows.add_to(backend.kernels, shard.bins_by_feature, shard.margin[:, k])
            round_trees.append(tree)
        # A tree may still be on its way from the device (``PendingTree``): the previous
        # round's are built now, while the device grows this round's (evaluation needs this
        # round's at once).
        for i in range(max(len(trees) - n_groups, 0), len(trees)):
            trees[i] = resolve(trees[i])
        trees.extend(round_trees)
        if not eval_sets:
            progress.round(round_index, [])
            continue
        round_trees = [resolve(t) for t in round_trees]
        trees[-len(round_trees):] = round_trees
        with timers("evaluation"):
            for e in eval_sets:
                e.add(round_trees)
            values = metrics.evaluate_many([e.request(objective, metric_names)
                                            for e in eval_sets], collective=shardset)
            scores = [(e.name, m, v) for e, per_set in zip(eval_sets, values)
                      for m, v in zip(metric_names, per_set)]
        for name, m, value in scores:
            evals_result[name][m].append(value)
        progress.round(round_index, scores)
        watched = scores[-1][2]
        if best_score is None or (watched > best_score if maximize else watched < best_score):
            best_score, best_iteration = watched, round_index
        if early_stopping_rounds and round_index - best_iteration >= early_stopping_rounds:
            progress.say(f"early stopping at round {round_index + 1}: best round "
                         f"{best_iteration + 1}, {scores[-1][0]}-{scores[-1][1]}={best_score:.6f}")
            break
    trees = [resolve(t) for t in trees]
    truncated = bool(early_stopping_rounds) and len(trees) > (best_iteration + 1) * n_groups
    if early_stopping_rounds:  # the model ends at its best round, whether or not it stopped early
        trees = trees[: (best_iteration + 1) * n_groups]
    booster = Booster(trees, cuts, feature_names, params, base_margin,
                      label_name=parts[0].label_name, weight_name=parts[0].weight_name,
                      best_iteration=best_iteration if early_stopping_rounds else None,
                      best_score=best_score if early_stopping_rounds else None)
    booster.evals_result = evals_result
    booster.timings = dict(timers.seconds, total=time.perf_counter() - start)
    if keep_training_margins and not truncated:
        booster.training_margins = [backend.to_host(s.margin) for s in shardset.shards]
    return booster


def _eval_dataset(entry, label, weight, train: inputs.DataSet, index: int):
    data, name, what = inputs.eval_pair(entry, index)
    if isinstance(data, tuple):
        if len(data) not in (2, 3):
            raise TypeError(f"{what}: give (X, y) or (X, y, weight) as data")
        X, y, w = data if len(data) == 3 else (*data, None)
        return inputs.load(X, y, w, what, feature_names=train.feature_names), name
    if not isinstance(label, str):
        raise TypeError(f"{what}: the training label was an array, so give this evaluation set "
                        f"as ((X, y), {name!r}) or ((X, y, weight), {name!r})")
    return inputs.load(data, label, weight if isinstance(weight, str) else None, what,
                         feature_names=train.feature_names), name


def train(data, label=None, params: dict | None = None, num_boost_round: int = 100,
          evals=None, early_stopping_rounds: int | None = None, weight=None,
          verbose=True) -> Booster:
    """Train a gradient-boosted tree model.

    data: pandas DataFrame or 2-D NumPy array (features; float32 is used internally, NaN and
    nulls are missing values), or a Dask DataFrame (then label/weight name columns, evals hold
    Dask DataFrames, and training runs on the workers of the active ``distributed.Client``, or in
    this process over the partitions without one: see ``gbflow.dask``). label: column name of ``data`` (then not a feature) or an array with
    one value per row. weight: likewise, optional, non-negative. params: XGBoost-style parameters
    (see ``gbflow.params.Params``); an unknown name is an error. evals: list of (data, name) pairs
    evaluated after every round (frames holding the label column, or (X, y[, w]) tuples);
    with early_stopping_rounds, training stops when the last metric of the last pair has not
    improved for that many rounds and the model keeps the trees up to the best round.
    verbose: True for about 20 progress lines on stderr, an int for a line every that many rounds,
    False for none. Returns a ``Booster``; nothing is computed before every input has been checked.
    """
    params = make_params(params)
    if isinstance(num_boost_round, bool) or not isinstance(num_boost_round, (int, np.integer)) \
            or num_boost_round < 0:
        raise ValueError(f"num_boost_round must be a non-negative integer, got {num_boost_round!r}")
    if early_stopping_rounds is not None and (
            isinstance(early_stopping_rounds, bool)
            or not isinstance(early_stopping_rounds, (int, np.integer)) or early_stopping_rounds < 1):
        raise ValueError(f"early_stopping_rounds must be a positive integer, "
                         f"got {early_stopping_rounds!r}")
    if evals is not None and not isinstance(evals, list):
        raise TypeError(f"evals must be a list of (data, name) pairs, got {type(evals).__name__}"
                        + ("; wrap a single pair in a list" if isinstance(evals, tuple) else ""))
    if early_stopping_rounds and not evals:
        raise ValueError("early_stopping_rounds needs at least one evaluation set in evals")
    if label is None:
        raise ValueError("train needs a label: a column name of data or an array")
    if inputs.is_dask_collection(data):  # trained where its partitions live: gbflow.dask
        from .dask import driver
        return driver.train(data, label, params, int(num_boost_round), evals,
                            early_stopping_rounds, weight, verbose)
    dataset = inputs.load(data, label, weight, "training data")
    objective = objectives.get_objective(params.objective, params.num_class)
    objective.check_label(dataset.label, f"label column {dataset.label_name!r}"
                          if dataset.label_name else "the training label")
    if dataset.weight is not None and not dataset.weight.sum() > 0:
        raise ValueError("weight: all training weights are zero")
    eval_sets = [_eval_dataset(e, label, weight, dataset, i) for i, e in enumerate(evals or [])]
    for d, name in eval_sets:
        objective.check_label(d.label, f"evaluation set {name!r}")
        if "auc" in params.metrics and len(np.unique(d.label)) < 2:
            raise ValueError(f"evaluation set {name!r} holds only one class: auc is undefined "
                             f"there (early stopping could never see it improve)")
    backend = get_backend(params.device, data_on_gpu=on_gpu(dataset.X))
    return fit(backend, [dataset], params, int(num_boost_round), eval_sets,
               early_stopping_rounds, verbose, drop_features=True)
