"""Resuming a training: the state of its completed rounds, checkpoint files that keep it, and
the check that a checkpoint belongs to the training resuming it.

A training resumed from the state of its first K rounds (the trees, with the model's cuts, base
margin and categories, and the evaluation history of those rounds) grows the same rounds K, K+1,
... as one that never stopped: margins are rebuilt from the trees exactly as training made them,
row and feature sampling follow the round number, and early stopping replays the history. So a
checkpointed job that is killed and run again, or a Dask training that restarts after losing a
worker, ends with the model file of an uninterrupted run.
"""
from __future__ import annotations

import dataclasses
import json
import numbers
import os

from .atomic_file import write_whole
from .booster import Booster, read_model_file
from .params import RUN_TIME

STATE_KEY = "training_state"  # the checkpoint's entry beside the model file's own


@dataclasses.dataclass
class TrainingState:
    """The completed rounds of a training of ``num_boost_round`` rounds.

    model: a Booster of the completed rounds' trees (its cuts, base margin and categories are
    the training's). history: {set: {metric: [value per evaluated round]}} of those rounds;
    eval_rounds: the (global, 0-based) rounds evaluated. rows: the training data's row count
    (a checkpoint is refused for other data). finished: the training ended (every round, or
    early stopping); the model is its result. Host objects only.
    """

    model: Booster
    history: dict
    eval_rounds: list
    num_boost_round: int
    rows: int
    finished: bool = False  # training ended (all rounds, or early stopping): model is final
    options: dict = dataclasses.field(default_factory=dict)  # options_of(the EvalOptions)

    @property
    def rounds(self) -> int:
        return self.model.num_boosted_rounds()

    def to_dict(self) -> dict:
        return {**self.model.to_dict(), STATE_KEY: {
            "num_boost_round": int(self.num_boost_round), "rows": int(self.rows),
            "finished": bool(self.finished), "options": dict(self.options),
            "eval_rounds": [int(r) for r in self.eval_rounds],
            "evals_result": {s: {m: [float(v) for v in values] for m, values in per.items()}
                             for s, per in self.history.items()}}}


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """Write the training's state to ``path`` every ``period`` completed rounds (and when it
    ends); a training given a checkpoint whose file exists resumes from it."""

    path: str
    period: int = 10


def as_checkpoint(value) -> Checkpoint | None:
    """``train``'s checkpoint argument (a path, a (path, period) pair or a Checkpoint) checked:
    TypeError/ValueError naming what is wrong, FileNotFoundError for a missing folder."""
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        value = Checkpoint(os.fspath(value))
    elif isinstance(value, tuple) and len(value) == 2:
        value = Checkpoint(os.fspath(value[0]), value[1])
    if not isinstance(value, Checkpoint):
        raise TypeError(f"checkpoint must be a file path, a (path, period in rounds) pair or a "
                        f"gbflow.Checkpoint, got {type(value).__name__}")
    # "~" expanded once: writing, the existence check and reading use one path (as model files)
    value = Checkpoint(os.path.expanduser(os.fspath(value.path)), value.period)
    if isinstance(value.period, bool) or not isinstance(value.period, numbers.Integral) \
            or value.period < 1:
        raise ValueError(f"checkpoint period must be a whole number of rounds >= 1, got "
                         f"{value.period!r}")
    folder = os.path.dirname(os.path.abspath(value.path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"checkpoint: folder {folder!r} does not exist (for "
                                f"{value.path!r}); create it first")
    if os.path.isdir(value.path):
        raise IsADirectoryError(f"checkpoint: {value.path!r} is a folder; give a file name")
    return Checkpoint(os.fspath(value.path), int(value.period))


def write(checkpoint: Checkpoint, state: TrainingState) -> None:
    """The state written to the checkpoint's file, whole or not at all."""
    # (a metric may be NaN or infinite: Python's JSON reads them back)
    text = json.dumps(state.to_dict(), separators=(",", ":"))
    path = checkpoint.path
    write_whole(path, os.path.dirname(os.path.abspath(path)), text.encode("utf-8"))


def read(checkpoint: Checkpoint | None) -> TrainingState | None:
    """The state in the checkpoint's file, or None when there is none yet. ValueError naming
    the file when it is not a gbflow checkpoint (a model file without training state, say)."""
    if checkpoint is None or not os.path.exists(checkpoint.path):
        return None
    model, d = read_model_file(checkpoint.path)  # the model file's checks
    state = d.get(STATE_KEY)
    try:
        result = TrainingState(model, _history(state["evals_result"]),
                               _rounds(state["eval_rounds"]), _count(state["num_boost_round"]),
                               _count(state["rows"]), state["finished"], state["options"])
        if not isinstance(result.finished, bool) or not isinstance(result.options, dict):
            raise TypeError("finished is not true/false, or options not a mapping")
        if any(len(v) != len(result.eval_rounds) for per in result.history.values()
               for v in per.values()):
            raise ValueError("evals_result and eval_rounds have different lengths")
    except (TypeError, KeyError, ValueError) as e:
        raise ValueError(f"checkpoint {checkpoint.path!r} is a gbflow model but not a "
                         f"checkpoint (its training state is missing or broken: {e}); move it "
                         f"away or choose another path") from None
    if result.rounds > result.num_boost_round:
        raise ValueError(f"checkpoint {checkpoint.path!r} holds {result.rounds} rounds of a "
                         f"training of {result.num_boost_round}")
    return result


class Saver:
    """``boosting.fit``'s on_rounds for a checkpoint: the state written every ``period``
    completed rounds; ``finish`` writes the final model as a finished state."""

    def __init__(self, checkpoint: Checkpoint, done: int = 0):
        self.checkpoint, self.written = checkpoint, done

    def due(self, rounds: int) -> bool:
        """Whether ``rounds`` completed rounds cross a period since the last state written."""
        return rounds // self.checkpoint.period > self.written // self.checkpoint.period

    def __call__(self, state: TrainingState) -> None:
        if self.due(state.rounds):
            write(self.checkpoint, state)
            self.written = state.rounds

    def finish(self, booster: Booster, num_boost_round: int, rows: int, options) -> None:
        write(self.checkpoint, TrainingState(booster, booster.evals_result,
                                             list(getattr(booster, "eval_rounds", [])),
                                             num_boost_round, rows, finished=True,
                                             options=options_of(options)))


def resumed_model(state: TrainingState) -> Booster:
    """A finished checkpoint's model, with its evaluation history, as training returns it."""
    booster = state.model
    booster.evals_result, booster.eval_rounds = state.history, list(state.eval_rounds)
    return booster


def _count(v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{v!r} is not a count")
    return v


def _rounds(v) -> list:
    if not isinstance(v, list):
        raise TypeError("eval_rounds is not a list")
    return [_count(r) for r in v]


def _history(v) -> dict:
    if not isinstance(v, dict) or not all(isinstance(per, dict) for per in v.values()):
        raise TypeError("evals_result is not a mapping of mappings")
    return {s: {m: [float(x) for x in values] for m, values in per.items()}
            for s, per in v.items()}


def options_of(options) -> dict:
    """What of ``evaluation.EvalOptions`` changes a model (a custom metric by its presence)."""
    return {"early_stopping_rounds": options.early_stopping_rounds,
            "early_stopping_metric": options.early_stopping_metric,
            "maximize": options.maximize, "metric_period": options.metric_period,
            "custom_metric": options.custom_metric is not None}


def check_matches(state: TrainingState, path: str, params, feature_names: list,
                  num_boost_round: int, eval_names: list, rows: int | None, options) -> None:
    """ValueError, before any training, when the checkpoint at ``path`` was written by another
    training: other parameters, evaluation options, features, round count, evaluation sets or
    row count (None: not known yet; checked again once it is)."""
    ours = {k: v for k, v in params.to_dict(bool(state.model.categories)).items()
            if k not in RUN_TIME}
    theirs = {k: v for k, v in state.model.params.to_dict(bool(state.model.categories)).items()
              if k not in RUN_TIME}
    ours.update(options_of(options))
    theirs.update(state.options)
    problems = [f"parameter {k}={theirs.get(k)!r} there, {ours.get(k)!r} here"
                for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)]
    if list(state.model.feature_names) != list(feature_names):
        problems.append("other feature columns")
    if state.num_boost_round != num_boost_round:
        problems.append(f"num_boost_round={state.num_boost_round} there, {num_boost_round} here")
    if list(state.history) != list(eval_names):
        problems.append(f"evaluation sets {list(state.history)} there, {list(eval_names)} here")
    if rows is not None and rows != state.rows:
        problems.append(f"{state.rows} training rows there, {rows} here")
    if problems:
        raise ValueError(f"checkpoint {path!r} was written by another training ("
                         + "; ".join(problems[:4]) + "); delete it to start afresh, or give "
                         "this training another checkpoint path")
