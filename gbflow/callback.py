"""Training callbacks, XGBoost's interface: ``TrainingCallback`` and the runner training uses."""
from __future__ import annotations


class TrainingCallback:
    """Hooks into training, as XGBoost's ``xgboost.callback.TrainingCallback`` (subclass it and
    override what you need; pass instances as ``train(..., callbacks=[...])``).

    ``model`` is the one ``Booster`` of the trees so far, the same object at every call (the
    trees of the continued model, then one round more per iteration; attributes set on it
    with ``set_attr`` stay, and the model ``train`` returns keeps them; with early stopping its
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


def check_callbacks(callbacks) -> list:
    """The callbacks as a list, TypeError naming the first that is not a TrainingCallback."""
    if callbacks is None:
        return []
    if not isinstance(callbacks, (list, tuple)):
        raise TypeError(f"callbacks must be a list of TrainingCallback, got "
                        f"{type(callbacks).__name__}")
    for i, c in enumerate(callbacks):
        if not isinstance(c, TrainingCallback):
            raise TypeError(f"callbacks[{i}] is a {type(c).__name__}, not a "
                            f"gbflow.callback.TrainingCallback (subclass it)")
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
