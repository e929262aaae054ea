"""gbflow: gradient-boosted trees for Dask/cuDF pipelines, on GPUs and CPUs (the public names)."""
from . import callback  # gbflow.callback.TrainingCallback, for train(callbacks=)
from .api import train
from .booster import Booster, load_model
from .params import Params
from .plotting import plot_importance, plot_metric, plot_tree  # matplotlib imported when called
from .resume import Checkpoint

__version__ = "0.1.0"
# The estimators are reached lazily (they need scikit-learn), so `import *` leaves them out.
__all__ = ["Booster", "Checkpoint", "Params", "callback", "load_model", "plot_importance",
           "plot_metric", "plot_tree", "train", "__version__"]


def __getattr__(name):
    # scikit-learn is a test/optional dependency: import the estimators only when asked for.
    if name in ("GBFlowRegressor", "GBFlowClassifier", "GBFlowRanker"):
        try:
            from . import sklearn, sklearn_ranker
        except ModuleNotFoundError as e:
            if e.name is None or not e.name.startswith("sklearn"):
                raise
            raise ImportError(f"gbflow.{name} needs scikit-learn, which is not installed: "
                              f"pip install 'gbflow[sklearn]' (or scikit-learn)") from e
        return getattr(sklearn_ranker if name == "GBFlowRanker" else sklearn, name)
    raise AttributeError(f"module 'gbflow' has no attribute {name!r}")
