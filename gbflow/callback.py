"""Training callbacks, XGBoost's interface: ``TrainingCallback`` and the runner training uses."""
from __future__ import annotations


class TrainingCallback:
    """Hooks into training, as XGBoost's ``xgboost.callback.TrainingCallback`` (subclass it and
    override what you need; pass instances as ``train(..., callbacks=[...])``).

    ``model`` is a ``Booster`` of the trees so far (a snapshot: the trees of the continued
    model, then one round more per iteration); ``epoch`` the round's global index (counting a
    continued model's rounds); ``evals_log`` the metric values so far, ``{set: {metric:
    [values]}}``, XGBoost's layout (this round's included). Training runs the hooks in the
    order of the list, on the host; with callbacks the GPU evaluates each round as it ends
    rather than one round late (a wait for the device a round). On Dask every worker runs
    them (they must pickle) and they must decide alike (they see the same values)."""

    def before_training(self, model):
        """Called once before the first round; returns the model (ignored by gbflow)."""
        return model

    def after_training(self, model):
        """Called once with the final model; what it returns is the model ``train`` returns
        (return ``model`` to keep it)."""
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
        return any([bool(c.before_iteration(model, epoch, evals_log)) for c in self.callbacks])

    def after_iteration(self, snapshot, epoch: int, evals_log: dict) -> bool:
        if not self.callbacks:
            return False
        model = snapshot()  # every callback runs, even after one asked to stop (XGBoost's)
        return any([bool(c.after_iteration(model, epoch, evals_log)) for c in self.callbacks])

    def after_training(self, model):
        for c in self.callbacks:
            model = c.after_training(model)
        return model
