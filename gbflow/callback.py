"""Training callbacks, XGBoost's interface: ``TrainingCallback``, XGBoost's ``EarlyStopping`` and
``EvaluationMonitor``, and the runner training uses."""
from __future__ import annotations

from .evaluation import maximized_by_name


class TrainingCallback:
    """Hooks into training, as XGBoost's ``xgboost.callback.TrainingCallback`` (subclass it and
    override what you need; pass instances as ``train(..., callbacks=[...])``).

    ``model`` is the one ``Booster`` of the trees so far, the same object at every call up to
    ``after_training``, which gets the final model (the trees of the continued model, then one
    round more per iteration; attributes set on it with ``set_attr`` stay: the final model
    keeps them; with early stopping its
    ``best_iteration`` and ``best_score`` are those of the rounds before, as XGBoost's
    ``EarlyStopping`` sets them after the other callbacks); ``epoch`` the round's global index
    (counting a continued model's rounds); ``evals_log`` the metric values so far, ``{set: {metric:
    [values]}}``, XGBoost's layout (this round's included). Training runs the hooks in the
    order of the list, on the host (the first callback asking to stop ends that round's calls,
    as in XGBoost; on the round where early stopping ends training they all run first); with
    callbacks the GPU evaluates each round as it ends
    rather than one round late (a wait for the device a round). On Dask every worker runs
    them (they must pickle) and they must decide alike (they see the same values)."""

    def before_training(self, model):
        """Called once before the first round; returns the model (ignored by gbflow)."""
        return model

    def after_training(self, model):
        """Called once with the final model; what it returns is the model ``train`` returns
        (return ``model`` to keep it). A returned model without an ``evals_result`` of its own
        (a copy or a slice) is given the training's, as XGBoost's ``evals_result`` is the
        training's history whatever the callbacks return."""
        return model

    def before_iteration(self, model, epoch: int, evals_log: dict) -> bool:
        """Called before each round; True stops training before it."""
        return False

    def after_iteration(self, model, epoch: int, evals_log: dict) -> bool:
        """Called after each round (and its evaluation); True stops training after it."""
        return False


class EarlyStopping(TrainingCallback):
    """XGBoost's ``xgboost.callback.EarlyStopping``: stop when the watched metric has not
    improved for ``rounds`` rounds in a row.

    metric_name: the watched metric (None: the last one of the set); data_name: the watched
    evaluation set (None: the last one); maximize: larger is better (None: XGBoost's rule by
    name: metrics starting with auc, aucpr, pre, map or ndcg, except mape); min_delta: how much
    a value must beat the best one to count as an improvement. Each improvement sets the
    model's ``best_iteration`` and ``best_score`` (``set_attr``, as XGBoost's). Only rounds with a
    new value count (``metric_period``), and rounds are counted from the best one, as
    ``early_stopping_rounds`` counts them; save_best: the
    model returned ends at the best round (a slice, keeping them). gbflow's own
    ``early_stopping_rounds`` does the same inside training (and is what the Dask driver and
    checkpoints know about); this callback is for scripts ported from XGBoost."""

    def __init__(self, rounds: int, metric_name: str | None = None,
                 data_name: str | None = None, maximize: bool | None = None,
                 save_best: bool = False, min_delta: float = 0.0):
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError(f"EarlyStopping: rounds must be a positive integer, got {rounds!r}")
        if not min_delta >= 0:
            raise ValueError(f"EarlyStopping: min_delta must be >= 0, got {min_delta!r}")
        self.rounds, self.metric_name, self.data_name = rounds, metric_name, data_name
        self.maximize, self.save_best, self.min_delta = maximize, save_best, float(min_delta)
        self.best = self.best_epoch = None  # the best value so far and its round
        self._seen = 0  # the watched values seen (new ones come every metric_period rounds)

    def before_training(self, model):
        self.best = self.best_epoch = None
        self._seen = 0
        return model

    def _watched(self, evals_log: dict) -> tuple[str, str]:
        if not evals_log:
            raise ValueError("EarlyStopping needs at least one evaluation set (evals)")
        data = self.data_name if self.data_name is not None else list(evals_log)[-1]
        if data not in evals_log:
            raise ValueError(f"EarlyStopping: no evaluation set named {data!r} (the sets: "
                             f"{list(evals_log)})")
        metric = self.metric_name if self.metric_name is not None else list(evals_log[data])[-1]
        if metric not in evals_log[data]:
            raise ValueError(f"EarlyStopping: no metric named {metric!r} on {data!r} (its "
                             f"metrics: {list(evals_log[data])})")
        return data, metric

    def after_iteration(self, model, epoch: int, evals_log: dict) -> bool:
        data, metric = self._watched(evals_log)
        values = evals_log[data][metric]
        if len(values) == self._seen:  # no new value this round (metric_period)
            return False
        self._seen = len(values)
        value = float(values[-1])
        larger = self.maximize if self.maximize is not None else maximized_by_name(metric)
        improved = self.best is None or (value - self.min_delta > self.best if larger
                                         else self.best - self.min_delta > value)
        if improved:
            self.best, self.best_epoch = value, epoch
            model.set_attr(best_iteration=str(epoch), best_score=repr(value))
            return False
        # rounds since the best one, as early_stopping_rounds counts them
        return epoch - self.best_epoch >= self.rounds

    def after_training(self, model):
        if not self.save_best or model.best_iteration is None:
            return model
        best, score = model.best_iteration, model.best_score
        kept = model[:best + 1]
        kept.set_attr(best_iteration=str(best), best_score=repr(float(score)))
        return kept


class EvaluationMonitor(TrainingCallback):
    """XGBoost's ``xgboost.callback.EvaluationMonitor``: every ``period`` rounds (and the last)
    one line ``[epoch]\tset-metric:value ...`` through ``logger`` (print unless given), for the
    rounds evaluated (``metric_period``); with
    gbflow's own progress lines off (``verbose_eval=False``), for scripts ported from
    XGBoost."""

    def __init__(self, rank: int = 0, period: int = 1, show_stdv: bool = False,
                 logger=print):
        if isinstance(period, bool) or not isinstance(period, int) or period < 1:
            raise ValueError(f"EvaluationMonitor: period must be a positive integer, got "
                             f"{period!r}")
        self.period, self.logger, self.rank = period, logger, rank
        self._last = None  # the last round's line, said at the end when the period skipped it
        self._seen = 0  # the values seen: a round without new ones (metric_period) says nothing

    def before_training(self, model):
        self._last, self._seen = None, 0  # (the same monitor may watch one training after another)
        return model

    def after_iteration(self, model, epoch: int, evals_log: dict) -> bool:
        seen = sum(len(values) for metrics in evals_log.values() for values in metrics.values())
        if seen == self._seen:
            return False
        self._seen = seen
        scores = "".join(f"\t{data}-{metric}:{values[-1]:.5f}"
                         for data, metrics in evals_log.items()
                         for metric, values in metrics.items() if values)
        line = f"[{epoch}]{scores}"
        if epoch % self.period == 0:
            self.logger(line)
            self._last = None
        else:
            self._last = line
        return False

    def after_training(self, model):
        if self._last is not None:
            self.logger(self._last)
        return model


def check_callbacks(callbacks) -> list:
    """The callbacks as a list, TypeError naming the first that is not a TrainingCallback."""
    if callbacks is None:
        return []
    if not isinstance(callbacks, (list, tuple)):
        raise TypeError(f"callbacks must be a list of TrainingCallback, got "
                        f"{type(callbacks).__name__}")
    for i, c in enumerate(callbacks):
        if not isinstance(c, TrainingCallback):
            ported = type(c).__name__ in ("EarlyStopping", "EvaluationMonitor") and \
                type(c).__module__.startswith("xgboost")
            raise TypeError(f"callbacks[{i}] is a {type(c).__name__}, not a "
                            f"gbflow.callback.TrainingCallback (subclass it)" +
                            (f"; use gbflow.callback.{type(c).__name__}, which takes XGBoost's "
                             f"arguments" if ported else ""))
    return list(callbacks)


class Callbacks:
    """The runner: every callback's hook in order; a stop from any of them stops training.
    ``snapshot`` arguments are functions making the model, called only when there are
    callbacks."""

    def __init__(self, callbacks: list):
        self.callbacks = list(callbacks)

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def before_training(self, snapshot) -> None:
        if self.callbacks:
            model = snapshot()
            for c in self.callbacks:
                c.before_training(model)

    def before_iteration(self, snapshot, epoch: int, evals_log: dict) -> bool:
        if not self.callbacks:
            return False
        model = snapshot()
        # the first callback asking to stop ends the round's calls, as XGBoost's any() does
        return any(bool(c.before_iteration(model, epoch, evals_log)) for c in self.callbacks)

    def after_iteration(self, snapshot, epoch: int, evals_log: dict) -> bool:
        if not self.callbacks:
            return False
        model = snapshot()
        return any(bool(c.after_iteration(model, epoch, evals_log)) for c in self.callbacks)

    def after_training(self, model):
        for c in self.callbacks:
            model = c.after_training(model)
        return model
