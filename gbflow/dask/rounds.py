"""The Dask driver's copy of a training's completed rounds, from rank 0's reports: what it writes
to a checkpoint and what a restart after a lost worker resumes from."""
from __future__ import annotations

import copy
import json
import threading

from ..booster import Booster
from ..resume import Checkpoint, Saver, TrainingState


class KnownRounds:
    """The completed rounds the driver knows of: the model file's entries (``head``), the trees
    as model-file dicts, the evaluation history; from a checkpoint's state at first, then from
    rank 0's ``"rounds"`` events (``task.RoundReports``: each holds the trees and values since
    the one before, numbered by their first tree, as events may arrive out of order).

    ``put`` runs on the client's event thread; ``state`` and ``save`` on the driver's."""

    def __init__(self, state: TrainingState | None, num_boost_round: int,
                 checkpoint: Checkpoint | None):
        self._lock = threading.Lock()
        self.num_boost_round = num_boost_round
        self.head, self.trees, self.history, self.eval_rounds = None, [], {}, []
        self.rows, self.rounds, self.options, self.session = None, 0, {}, None
        self._ahead: dict[int, dict] = {}  # reports that arrived before an earlier one
        if state is not None:
            d = state.model.to_dict()
            self.trees = d.pop("trees")
            self.head, self.rows, self.rounds = d, state.rows, state.rounds
            self.options = dict(state.options)
            self.history, self.eval_rounds = copy.deepcopy(state.history), list(state.eval_rounds)
        self.saver = None if checkpoint is None else Saver(checkpoint, self.rounds)

    def put(self, message: dict) -> None:
        # Dask's events come back with tuples for lists: the model file's own JSON types again
        message = json.loads(json.dumps(message))
        with self._lock:
            if message.get("session") != self.session:  # a report of a run given up
                return
            self._ahead[message["first_tree"]] = message
            while len(self.trees) in self._ahead:
                m = self._ahead.pop(len(self.trees))
                self.head = m.get("head", self.head)
                self.trees.extend(m["trees"])
                self.eval_rounds.extend(m["eval_rounds"])
                for s, per in m["history"].items():
                    for metric, values in per.items():
                        self.history.setdefault(s, {}).setdefault(metric, []).extend(values)
                self.rows, self.rounds, self.options = m["rows"], m["rounds"], m["options"]

    def begin(self, session: str) -> TrainingState | None:
        """Start taking the reports of the run ``session`` (and no other: a report of an
        earlier run may still be on its way); the state that run resumes from."""
        with self._lock:
            self.session = session
            self._ahead.clear()
            return self._state()

    def state(self) -> TrainingState | None:
        """The state of the rounds known, or None before the first report."""
        with self._lock:
            return self._state()

    def _state(self) -> TrainingState | None:
        if self.head is None or not self.rounds:
            return None
        model = Booster.from_dict({**self.head, "trees": list(self.trees)})
        return TrainingState(model, copy.deepcopy(self.history), list(self.eval_rounds),
                             self.num_boost_round, self.rows, options=dict(self.options))

    def save(self) -> None:
        """Write the checkpoint when a period's rounds have been completed since the last."""
        if self.saver is not None and self.saver.due(self.rounds):
            state = self.state()
            if state is not None:
                self.saver(state)
