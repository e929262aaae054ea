"""Evaluation sets while training: their margins, the metrics of a round, early stopping."""
from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from . import binning, metrics, predictor
from .csr import CSR

# XGBoost's rule for the direction of a metric it does not define (a custom metric's name):
# larger is better when the name starts with one of these, except "mape" (an error, which
# starts with "map").
_MAXIMIZE_PREFIXES = ("auc", "aucpr", "pre", "map", "ndcg")


def maximized_by_name(name: str) -> bool:
    """Whether larger is better for a metric called ``name`` that gbflow does not define."""
    return name != "mape" and name.startswith(_MAXIMIZE_PREFIXES)


class _Training:
    def __repr__(self) -> str:
        return "TRAINING"


TRAINING = _Training()
"""Stands for the training data in ``boosting.fit``'s ``evals``: that set's margins, labels and
weights are training's own (no second copy, no second prediction)."""


@dataclasses.dataclass(frozen=True)
class EvalOptions:
    """How the evaluation sets are evaluated and when training stops (``gbflow.train``'s
    arguments of the same names, checked by ``eval_options``).

    early_stopping_rounds: stop when the watched metric has not improved for that many rounds
    (None or 0: never, as XGBoost). early_stopping_metric: the watched metric's name (None: the
    last metric, the custom metric's last one when there is one), always on the last
    evaluation set. maximize:
    whether larger is better for it (None: the metric's own direction). custom_metric: XGBoost's
    signature ``f(predictions, data) -> (name, value)`` or a list of such pairs, or None.
    metric_period: evaluate every that many rounds (and at the last round).
    """

    early_stopping_rounds: int | None = None
    early_stopping_metric: str | None = None
    maximize: bool | None = None
    custom_metric: object = None
    metric_period: int = 1


def _positive_int(value, name: str, allow_none: bool) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def eval_options(params, has_evals: bool, early_stopping_rounds=None,
                 early_stopping_metric=None, maximize=None, custom_metric=None,
                 metric_period=1) -> EvalOptions:
    """Check ``gbflow.train``'s evaluation arguments against ``params`` (validated ``Params``)
    before any work; errors name the argument."""
    # 0 is off, as in XGBoost (its train adds early stopping for a true value only)
    rounds = _positive_int(early_stopping_rounds or None, "early_stopping_rounds", True)
    period = _positive_int(metric_period, "metric_period", False)
    if rounds and not has_evals:
        raise ValueError("early_stopping_rounds needs at least one evaluation set in evals")
    if maximize is not None and not isinstance(maximize, (bool, np.bool_)):
        raise TypeError(f"maximize must be True, False or None, got {maximize!r}")
    if custom_metric is not None and not callable(custom_metric):
        raise TypeError(f"custom_metric must be a callable f(predictions, data) -> (name, value), "
                        f"got {type(custom_metric).__name__}")
    if rounds and not params.metrics and custom_metric is None:
        raise ValueError("early_stopping_rounds needs a metric, but disable_default_eval_metric "
                         "leaves none: set eval_metric or custom_metric")
    if early_stopping_metric is not None:
        if not isinstance(early_stopping_metric, str):
            raise TypeError(f"early_stopping_metric must be a metric name, got "
                            f"{early_stopping_metric!r}")
        if custom_metric is None and early_stopping_metric not in params.metrics:
            raise ValueError(f"early_stopping_metric {early_stopping_metric!r} is not evaluated: "
                             f"the metrics are {list(params.metrics)} (set eval_metric)")
    return EvalOptions(rounds, early_stopping_metric,
                       None if maximize is None else bool(maximize), custom_metric, period)


class EvalMatrix:
    """What a custom metric gets besides the predictions, as XGBoost's ``DMatrix`` offers it:
    host NumPy copies of one evaluation set's labels, weights and query ids (every process's
    rows)."""

    def __init__(self, label: np.ndarray, weight: np.ndarray | None,
                 qid: np.ndarray | None = None):
        self._label, self._weight, self._qid = label, weight, qid

    def get_qid(self) -> np.ndarray:
        """(n,) int64 each row's query id where the set has them (a training that ranks by
        query), else an empty array. (gbflow's; XGBoost's DMatrix gives group pointers of
        rows sorted by query, which gbflow's sets need not be.)"""
        return np.empty(0, np.int64) if self._qid is None else self._qid

    def get_label(self) -> np.ndarray:
        """(n,) float32 labels, as XGBoost returns them."""
        return self._label.astype(np.float32)

    def get_weight(self) -> np.ndarray:
        """(n,) float32 weights, or an empty array without weights (as XGBoost)."""
        return np.empty(0, np.float32) if self._weight is None else \
            self._weight.astype(np.float32)

    def num_row(self) -> int:
        return len(self._label)


def cost_metric(*functions):
    """scikit-learn style metrics ``function(y_true, y_pred[, sample_weight=...])`` as one
    custom_metric, each value named after its function (XGBoost's scikit-learn wrapper takes
    callables so; early stopping's direction then follows the last one's name, as there):
    y_true ``get_label()``, y_pred the predictions, sample_weight only when the set has
    weights."""
    names = [getattr(f, "__name__", type(f).__name__) for f in functions]

    def custom_metric(prediction, data):
        weight = data.get_weight()
        kwargs = {"sample_weight": weight} if weight.size else {}
        return [(name, float(f(data.get_label(), prediction, **kwargs)))
                for name, f in zip(names, functions)]
    return custom_metric


def _binned(backend, X, cuts, block_rows: int | None = None):
    """A dense part as ``predictor.BinnedRows`` of ``cuts`` (host values copied to the device
    ``block_rows`` at a time when given); a CSR as it is, on the device."""
    if isinstance(X, CSR):
        return backend.asarray(X)
    return predictor.BinnedRows(binning.quantize(backend, X, cuts, block_rows))


class EvalSet:
    """An evaluation set as this process holds it (possibly no part), its margins up to date.

    Either held-out ``parts`` (``inputs.DataSet``: X, label, weight), whose margins are
    predicted here tree by tree (dense ones kept binned with the training ``cuts``; margins
    starting from ``forest``'s, a continued model's, when given), or the
    training ``shards`` (``shards.Shard``), whose margins training keeps. labels, weights: per
    part (n_i,) float64 on the backend's device; weights None for a set without weights (the
    same on every process).
    """

    def __init__(self, backend, name: str, base_margin, weighted: bool, parts=None,
                 shards=None, cuts=None, forest=None, block_rows: int | None = None):
        self.name, self.backend = name, backend
        self.queries = None  # per part its ``ranking.QueryGroups`` (set for ranking metrics)
        if shards is not None:
            self.X = None
            self.queries = [s.queries for s in shards] if shards[0].queries else None
            self.margin = [s.margin for s in shards]
            self.labels = [s.label for s in shards]
            self.weights = [s.weight for s in shards] if weighted else None
            return
        xp = backend.xp
        # Dense parts are kept binned with the training cuts: a quarter of the memory, and read
        # round after round (a 200,000 x 28 float32 set, 22 MB, crowded training's data out of
        # the CPU's cache: training itself ran 10-30% slower beside it).
        # (block_rows: a set whose raw values would not fit the device beside their bins
        # reaches it a block of rows at a time, for the margins and the binning)
        raw = [p.X if block_rows else backend.asarray(p.X) for p in parts]
        start = predictor.FlatForest.from_trees([]) if forest is None else forest
        self.margin = [predictor.predict_margin(backend, X, start, base_margin, p.base_margin,
                                                block_rows)
                       for X, p in zip(raw, parts)]
        self.X = [_binned(backend, X, cuts, block_rows) for X in raw]
        del raw
        self.labels = [xp.asarray(backend.asarray(p.label), dtype=xp.float64) for p in parts]
        self.weights = [xp.asarray(backend.asarray(p.weight), dtype=xp.float64)
                        for p in parts] if weighted else None

    def add(self, trees: list) -> None:
        """Add trees to the margins (training adds them to its own)."""
        if self.X is None or not trees:
            return
        self.add_forest(predictor.FlatForest.from_trees(trees))

    def add_forest(self, forest) -> None:
        """Add a ``predictor.FlatForest``'s trees to the margins (device work only)."""
        if self.X is None:
            return
        for X, margin in zip(self.X, self.margin):
            predictor.add_trees(self.backend, X, forest, margin)


class Evaluation:
    """Every evaluation set of a run, the metrics of the evaluated rounds (``history``: set ->
    metric -> values, XGBoost's ``evals_result``; ``rounds``: which rounds they are) and early
    stopping. Every process evaluates the same rounds and gets the same values: built-in
    metrics from exact sums and tallies (``metrics.Evaluator``), a custom metric from every
    process's rows gathered in process order.

    sets: ``EvalSet``s with their global row counts and largest weights (``n_rows``,
    ``max_weight`` lists, from ``prepare.check_global_inputs``); query_auc: per set whether its
    auc and aucpr are per query (``GlobalSizes.eval_query_auc``; None: none is).
    """

    def __init__(self, backend, sets: list, n_rows: list, max_weights: list, objective,
                 metric_list: list, options: EvalOptions, collective, n_rounds: int,
                 offset: int = 0, recorder=None, query_auc: list | None = None):
        self.backend, self.sets, self.objective = backend, sets, objective
        self.options, self.collective, self.n_rounds = options, collective, n_rounds
        self.offset = offset  # a resumed training's rounds done before: metric_period counts them
        data = [metrics.EvalData(s.name, s.labels, s.weights, n, w, objective.n_groups,
                                 s.queries, by_query)
                for s, n, w, by_query in zip(sets, n_rows, max_weights,
                                             query_auc or [False] * len(sets))]
        self.names = [m.name for m in metric_list]
        self._maximizes = {m.name: m.maximize for m in metric_list}
        self.evaluator = metrics.Evaluator(backend, metric_list, data, collective) \
            if sets and metric_list else None
        self.history: dict = {s.name: {m: [] for m in self.names} for s in sets}
        self.rounds: list[int] = []
        self.watched = options.early_stopping_metric
        self.maximize = options.maximize
        self.best_score = self.best_iteration = None
        self._trees: list = []  # trees not yet in the sets' margins
        self._queue: list = []  # (round, Pending or None, custom scores) not yet returned
        self._host_labels = None  # per set (label, weight) of every process, for custom_metric
        # Where the device queues work ahead of the host, a round's values are read a round
        # later (the copies are long done by then; reading at once would wait for the device).
        self.delay = 1 if backend.queues_ahead else 0
        self.stopped = False  # early stopping said stop
        # A round's transform and metric kernels (some thirty launches a set) replayed from
        # one record where the evaluator allows (``Backend.recorder``; None: launched each round)
        self._recorder = recorder if recorder is not None and recorder.records and \
            self.evaluator is not None and self.evaluator.recordable else None
        # the round's trees written into the same device arrays every round (the recorded
        # walk reads them there)
        self._staged = predictor.StagedForest(backend) \
            if any(s.X is not None for s in sets) else None

    def __bool__(self) -> bool:
        return bool(self.sets)

    def due(self, round_index: int) -> bool:
        """Whether ``round_index`` is evaluated: every ``metric_period`` rounds and the last."""
        done = self.offset + round_index + 1
        return done % self.options.metric_period == 0 or done == self.offset + self.n_rounds

    def restore(self, history: dict, eval_rounds: list) -> None:
        """Take the values of the rounds before ``offset`` (a resumed training's: ``history``
        and the global ``eval_rounds`` they belong to), and early stopping's state replayed
        from them. Their rounds are numbered from the resumed one (negative)."""
        for j, round_index in enumerate(eval_rounds):
            scores = [(s, m, values[j]) for s, per in history.items() for m, values in per.items()]
            for set_name, name, value in scores:
                self.history[set_name].setdefault(name, []).append(value)
            self.rounds.append(round_index - self.offset)
            self._track_best(round_index - self.offset, scores)

    def submit(self, round_index: int, trees: list) -> list[tuple[int, list]]:
        """Take a round's (built) trees; on an evaluated round add every tree not yet added to
        the sets' margins and start computing the metrics. Returns the rounds whose results are
        now in, in order: [(round, [(set, metric, value)])] (no value for a round not
        evaluated). With ``delay`` 1 a round's results are read when the next round is
        submitted, so that the host does not wait for the device in between."""
        self._trees.extend(trees)
        if not self.due(round_index):
            self._queue.append((round_index, None, None))
        else:
            trees, self._trees = self._trees, []
            _, queued = self._device_work(trees)  # (a recording keeps its predictions alive)
            pending = self.evaluator.fetch(queued) if self.evaluator else None
            custom = self._custom_scores() if self.options.custom_metric is not None else []
            self._queue.append((round_index, pending, custom))
        return self._drain(self.delay)

    def _device_work(self, trees: list) -> tuple[list, tuple | None]:
        """Add ``trees`` to the held-out sets' margins; return the sets' predictions for the
        built-in metrics (per set, per part) and the evaluator's queued work
        (``Evaluator.queue``; None without built-in metrics). Where a recorder serves, the
        walk (of a staged forest: the same device arrays every round), the transform and the
        metrics are recorded once and replayed (the same arrays, written again: the margins
        are updated in place, so their addresses and the staged arrays' name the work)."""
        forest = self._staged.write(trees) if self._staged is not None and \
            self._staged.can_stage(trees) else None
        if forest is None:
            for s in self.sets:
                s.add(trees)

        def queue():
            if forest is not None:
                for s in self.sets:
                    s.add_forest(forest)
            predictions = [[self.objective.predictions(self.backend, m, for_metrics=True)
                            for m in s.margin] for s in self.sets]
            return predictions, self.evaluator.queue(predictions) if self.evaluator else None
        if self._recorder is None:
            return queue()
        walked = () if forest is None else \
            (self._recorder.address(forest.feature), self._recorder.address(forest.tree_root))
        key = ("evaluation", walked) + tuple(self._recorder.address(m) for s in self.sets
                                             for m in s.margin)
        return self._recorder.run(key, queue)

    def flush(self) -> list[tuple[int, list]]:
        """The results of every round submitted and not yet returned (at the end of training:
        each process calls it, or none does)."""
        return self._drain(0)

    def _drain(self, keep: int) -> list[tuple[int, list]]:
        """Finish queued rounds, oldest first, until ``keep`` are left or early stopping says
        stop (``stopped``: the rounds after that one are dropped, as XGBoost never evaluates
        them)."""
        done = []
        while len(self._queue) > keep and not self.stopped:
            done.append(self._finish(*self._queue.pop(0)))
            if done[-1][1] and self.should_stop(done[-1][0]):
                self.stopped = True
        if self.stopped:
            self._queue = []
        return done

    def _finish(self, round_index: int, pending, custom) -> tuple[int, list]:
        if custom is None:  # not evaluated
            return round_index, []
        values = pending.values() if pending is not None else [[] for _ in self.sets]
        scores = [(s.name, name, v) for s, per_set in zip(self.sets, values)
                  for name, v in zip(self.names, per_set)] + custom
        for set_name, name, value in scores:
            self.history[set_name].setdefault(name, []).append(value)
        self.rounds.append(round_index)
        self._track_best(round_index, scores)
        return round_index, scores

    def _track_best(self, round_index: int, scores: list) -> None:
        last_set = self.sets[-1].name
        if self.watched is None:
            self.watched = [name for set_name, name, _ in scores if set_name == last_set][-1]
        found = [v for set_name, name, v in scores if set_name == last_set and name == self.watched]
        if not found:
            raise ValueError(f"early_stopping_metric {self.watched!r} is not among the metrics "
                             f"evaluated: {sorted(self.history[last_set])}")
        if self.maximize is None:
            self.maximize = self._maximizes.get(self.watched,
                                                maximized_by_name(self.watched))
        score = found[0]
        # strictly better, as XGBoost's EarlyStopping (NaN never is)
        if self.best_score is None or (score > self.best_score if self.maximize
                                       else score < self.best_score):
            self.best_score, self.best_iteration = score, round_index

    def should_stop(self, round_index: int) -> bool:
        """Whether the watched metric has not improved for ``early_stopping_rounds`` rounds."""
        rounds = self.options.early_stopping_rounds
        return bool(rounds) and self.best_iteration is not None and \
            round_index - self.best_iteration >= rounds

    def _custom_input(self, margin):
        return _custom_input_of(self.backend, self.objective, margin)

    def _custom_scores(self) -> list[tuple[str, str, float]]:
        """The custom metric of every set on host copies of every process's rows (a wait for
        the device, and a gather of the predictions on several processes)."""
        to_host, gather = self.backend.to_host, self.collective.allgather
        if self._host_labels is None:
            self._host_labels = []
            for s in self.sets:
                mine = (np.concatenate([to_host(y) for y in s.labels]) if s.labels
                        else np.empty(0),
                        None if s.weights is None else
                        np.concatenate([to_host(w) for w in s.weights]) if s.weights
                        else np.empty(0),
                        None if s.queries is None else
                        np.concatenate([q.row_ids() for q in s.queries]) if s.queries
                        else np.empty(0, np.int64))
                every = gather(mine)
                self._host_labels.append(EvalMatrix(
                    np.concatenate([y for y, _, _ in every]),
                    None if s.weights is None else np.concatenate([w for _, w, _ in every]),
                    None if s.queries is None else np.concatenate([q for _, _, q in every])))
        scores = []
        for s, data in zip(self.sets, self._host_labels):
            preds = [self._custom_input(m) for m in s.margin]
            # (a process without rows of the set: an empty array of the others' shape)
            mine = np.concatenate([to_host(p) for p in preds]) if preds else to_host(
                self._custom_input(self.backend.xp.zeros((0, self.objective.n_groups))))
            prediction = np.concatenate(gather(mine)) if self.collective.size > 1 else mine
            for name, value in _pairs(self.options.custom_metric(prediction, data)):
                if name in self.names:
                    raise ValueError(f"custom_metric returned {name!r}, the name of an "
                                     f"eval_metric; give it another name")
                scores.append((s.name, name, value))
        return scores


def _custom_input_of(backend, objective, margin):
    """What XGBoost's ``train`` gives custom_metric of (n, k) float64 margins on the device:
    the raw margins where a custom objective trains (XGBoost's ``output_margin=callable(obj)``),
    else ``predict``'s values (multi:softmax: the class ids, (n,)); (n,) for one output."""
    values = margin if getattr(objective, "function", None) is not None else \
        objective.predictions(backend, margin)
    return values[:, 0] if values.ndim == 2 and values.shape[1] == 1 else values


def _pairs(result) -> list[tuple[str, float]]:
    """custom_metric's result as (name, value) pairs; TypeError for anything else."""
    pairs = [result] if isinstance(result, tuple) else result
    try:
        out = [(name, float(value)) for name, value in pairs]
    except (TypeError, ValueError):
        out = None
    if not out or not all(isinstance(name, str) for name, _ in out):
        raise TypeError(f"custom_metric must return (name, value) or a list of (name, value) "
                        f"pairs with a string name and a number, got {result!r}")
    return out
