"""Evaluation sets while training: margins kept up to date, metrics each round, early stopping."""
from __future__ import annotations

from . import metrics, predictor


class EvalSet:
    """A held-out table, as this process's parts (possibly none), whose margins are kept up to
    date tree by tree (on the backend's device)."""

    def __init__(self, backend, parts: list, name: str, base_margin):
        self.name, self.parts, self.backend = name, parts, backend
        self.X = [backend.asarray(p.X) for p in parts]
        empty = predictor.FlatForest.from_trees([])
        self.margin = [predictor.predict_margin(backend, X, empty, base_margin) for X in self.X]

    def add(self, trees) -> None:
        """Add one round's trees to the margins."""
        forest = predictor.FlatForest.from_trees(trees)
        for X, margin in zip(self.X, self.margin):
            predictor.add_trees(self.backend, X, forest, margin)

    def request(self, objective, metric_names) -> tuple[list[str], list[tuple]]:
        """What ``metrics.evaluate_many`` needs: the names and (label, prediction, weight) per
        part, host arrays."""
        xp, to_host = self.backend.xp, self.backend.to_host
        return metric_names, [(to_host(p.label), to_host(objective.transform(xp, m)),
                               None if p.weight is None else to_host(p.weight))
                              for p, m in zip(self.parts, self.margin)]


class Evaluation:
    """Every evaluation set of a run, the metrics of each round (``history``: name -> metric ->
    values, XGBoost's ``evals_result``) and early stopping on the last metric of the last set.
    Every process evaluates the same rounds and gets the same values (``metrics.evaluate_many``
    through ``collective``)."""

    def __init__(self, backend, sets: list, objective, metric_names: tuple, base_margin,
                 collective, early_stopping_rounds: int | None):
        self.sets = [EvalSet(backend, parts, name, base_margin) for parts, name in sets]
        self.objective, self.metric_names, self.collective = objective, metric_names, collective
        self.early_stopping_rounds = early_stopping_rounds
        self.history = {e.name: {m: [] for m in metric_names} for e in self.sets}
        self.maximize = metric_names[-1] in metrics.MAXIMIZE
        self.best_score = self.best_iteration = None

    def __bool__(self) -> bool:
        return bool(self.sets)

    def after_round(self, round_index: int, trees: list) -> list[tuple[str, str, float]]:
        """Add the round's trees to every set and compute the metrics: [(set, metric, value)]."""
        for e in self.sets:
            e.add(trees)
        values = metrics.evaluate_many([e.request(self.objective, self.metric_names)
                                        for e in self.sets], collective=self.collective)
        scores = [(e.name, m, v) for e, per_set in zip(self.sets, values)
                  for m, v in zip(self.metric_names, per_set)]
        for name, m, value in scores:
            self.history[name][m].append(value)
        watched = scores[-1][2]
        if self.best_score is None or (watched > self.best_score if self.maximize
                                       else watched < self.best_score):
            self.best_score, self.best_iteration = watched, round_index
        return scores

    def should_stop(self, round_index: int) -> bool:
        """Whether the watched metric has not improved for ``early_stopping_rounds`` rounds."""
        return bool(self.early_stopping_rounds) and \
            round_index - self.best_iteration >= self.early_stopping_rounds
