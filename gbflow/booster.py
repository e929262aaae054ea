"""The trained model: prediction, transform, feature importances and the JSON model file."""
from __future__ import annotations

import json
import os
import secrets

import numpy as np

from . import categories as categories_module
from . import inputs, predictor
from .backend import backend_for, frames
from .cuts import Cuts
from .params import Params, make_params
from .tree import Tree

FORMAT = "gbflow-model"
FORMAT_VERSION = 1
IMPORTANCE_TYPES = ("gain", "total_gain", "split", "cover", "total_cover")  # and "weight"


class Booster:
    """A trained gradient-boosted tree ensemble.

    trees: in training order, ``n_groups`` trees per round (one per class for multi:softprob).
    cuts: the training cut points. base_margin: (n_groups,) float64 starting margins.
    categories: {feature name: its categories' values, sorted} of the categorical features
    (``gbflow.categories``); prediction matches a frame's categories to them by value.
    """

    def __init__(self, trees: list[Tree], cuts: Cuts, feature_names: list[str], params: Params,
                 base_margin: np.ndarray, label_name: str | None = None,
                 weight_name: str | None = None, best_iteration: int | None = None,
                 best_score: float | None = None, categories: dict | None = None):
        self.trees = trees
        self.categories = dict(categories or {})
        self.cuts = cuts
        self.feature_names = list(feature_names)
        self.params = params
        self.base_margin = np.asarray(base_margin, dtype=np.float64)
        self.label_name = label_name
        self.weight_name = weight_name
        self.best_iteration = best_iteration
        self.best_score = best_score
        self.evals_result: dict = {}
        self.timings: dict = {}
        self._objective = params.loss
        self._forest = None

    # -- shape -----------------------------------------------------------------------------
    @property
    def n_groups(self) -> int:
        return self.params.n_groups

    def output_width(self, output_margin: bool = False) -> int:
        """Prediction columns: the margins' n_groups, or the objective's outputs (1 for
        multi:softmax's class, num_class for multi:softprob's probabilities)."""
        return self.n_groups if output_margin else self._objective.n_outputs

    def num_features(self) -> int:
        """Number of features (a method, as XGBoost's ``Booster.num_features()``)."""
        return len(self.feature_names)

    def num_boosted_rounds(self) -> int:
        """Number of boosting rounds (trees per output group)."""
        return len(self.trees) // self.n_groups

    def __repr__(self) -> str:
        return (f"<gbflow.Booster {self.params.objective}, {self.num_boosted_rounds()} rounds, "
                f"{self.num_features()} features>")

    # -- prediction ------------------------------------------------------------------------
    def _features(self, data, passengers_allowed: bool):
        inputs.check_container(data, "prediction data")
        if frames.is_frame(data):
            allowed = set(frames.column_names(data)) if passengers_allowed else \
                {self.label_name, self.weight_name} - {None}
            inputs.check_columns(data, self.feature_names, allowed, "prediction data")
            inputs.check_feature_dtypes(data, self.feature_names, "prediction data")
        else:
            inputs.check_columns(data, self.feature_names, (), "prediction data")
        inputs.check_categorical(data, self.feature_names, list(self.categories),
                                 "prediction data")
        X = frames.feature_matrix(data, self.feature_names, self.categories)
        inputs.check_features(X, self.feature_names, "prediction data")
        return X

    def _predict(self, data, output_margin: bool, name: str, passengers_allowed: bool):
        X = self._features(data, passengers_allowed)
        backend = backend_for(X)  # predict where the data lives
        if self._forest is None:
            self._forest = predictor.FlatForest.from_trees(self.trees)
        margin = predictor.predict_margin(backend, X, self._forest, self.base_margin)
        values = margin if self.n_groups > 1 else margin[:, 0]
        if not output_margin:
            values = self._objective.transform(backend.xp, margin)
        return frames.wrap_prediction(values, data, name)

    def predict(self, data, output_margin: bool = False, name: str = "prediction"):
        """Predictions for ``data``.

        data: pandas DataFrame (its columns must be the training features; the training label and
        weight columns may be present too) or a 2-D array with the features in training order.
        Returns a pandas Series with data's index (a DataFrame with one column per class for
        multi:softprob) for frames, a NumPy array (n,) or (n, n_classes) for arrays. Values are
        probabilities for the classification objectives, or raw margins with ``output_margin``.
        A Dask DataFrame gives a lazy Dask Series/DataFrame with its index and divisions
        (``gbflow.dask.predict``).
        """
        if inputs.is_dask_collection(data):
            from .dask import predict as dask_predict
            return dask_predict.predict(self, data, output_margin, name)
        return self._predict(data, output_margin, name, passengers_allowed=False)

    def transform(self, data, name: str = "prediction", output_margin: bool = False):
        """``data`` with the prediction column(s) appended (a new frame; columns other than the
        features ride along untouched). For arrays, the prediction is appended as last column(s).
        A Dask DataFrame gives a lazy Dask DataFrame (``gbflow.dask.predict.transform``)."""
        if inputs.is_dask_collection(data):
            from .dask import predict as dask_predict
            return dask_predict.transform(self, data, name, output_margin)
        prediction = self._predict(data, output_margin, name, passengers_allowed=True)
        return frames.append_prediction(data, prediction)

    # -- importances -----------------------------------------------------------------------
    def feature_importances(self, importance_type: str = "gain") -> dict[str, float]:
        """Importance per feature used in a split, as {name: value}.

        "gain": mean loss reduction of the feature's splits (XGBoost's "gain"); "total_gain": their
        sum; "split": how many splits use the feature (XGBoost's "weight", accepted too);
        "cover"/"total_cover": mean/total hessian of the nodes split on it.
        """
        importance_type = "split" if importance_type == "weight" else importance_type
        if importance_type not in IMPORTANCE_TYPES:
            raise ValueError(f"importance_type must be one of {IMPORTANCE_TYPES}, "
                             f"got {importance_type!r}")
        n = self.num_features()
        splits, gain, cover = np.zeros(n), np.zeros(n), np.zeros(n)
        for t in self.trees:
            inner = ~t.is_leaf
            np.add.at(splits, t.feature[inner], 1)
            np.add.at(gain, t.feature[inner], t.gain[inner])
            np.add.at(cover, t.feature[inner], t.cover[inner])
        used = splits > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            values = {"gain": gain / splits, "total_gain": gain, "split": splits,
                      "cover": cover / splits, "total_cover": cover}[importance_type]
        return {self.feature_names[j]: float(values[j]) for j in np.flatnonzero(used)}

    # -- model file ------------------------------------------------------------------------
    def to_dict(self) -> dict:
        # The device trained on is a run-time choice, not part of the model: CPU and GPU training
        # of the same data give the same file, byte for byte.
        params = {k: v for k, v in self.params.to_dict(bool(self.categories)).items()
                  if k not in ("device", "device_memory_limit")}
        extra = {"categories": categories_module.to_json(self.categories)} \
            if self.categories else {}
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "params": params,
            "base_margin": [float(m) for m in self.base_margin],
            "feature_names": self.feature_names,
            "label_name": self.label_name,
            "weight_name": self.weight_name,
            "best_iteration": self.best_iteration,
            "best_score": self.best_score,
            "cuts": self.cuts.to_dict(),
            "trees": [t.to_dict() for t in self.trees],
            **extra,
        }

    def to_json(self) -> str:
        """The model file's text (deterministic: the same model gives the same bytes)."""
        return json.dumps(self.to_dict(), allow_nan=False, separators=(",", ":"))

    def save_model(self, path) -> None:
        """Write the model as JSON to ``path``. The file appears whole or not at all: the text is
        written to a temporary file in the same folder, flushed to disk, then renamed over
        ``path``; on any failure the temporary file is removed and an existing ``path`` is left
        as it was."""
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"save_model: folder {folder!r} does not exist "
                                    f"(saving to {path!r}); create it first")
        if os.path.isdir(path):
            raise IsADirectoryError(f"save_model: {path!r} is a folder; give a file name such "
                                    f"as {os.path.join(path, 'model.json')!r}")
        text = self.to_json()
        # A fresh name opened with "x" (never an existing file), with the umask's permissions
        # (tempfile.mkstemp would make the model file private to its owner).
        tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}."
                                   f"{secrets.token_hex(4)}.tmp")
        try:
            with open(tmp, "x", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException as e:
            try:
                os.unlink(tmp)
            except OSError:  # never created, or already renamed
                pass
            if isinstance(e, Exception):
                e.add_note(f"save_model: {path!r} was not written (left as it was)")
            raise

    @classmethod
    def from_dict(cls, d: dict) -> "Booster":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError("not a gbflow model file (no 'format': 'gbflow-model' entry)")
        if d.get("version") != FORMAT_VERSION:
            raise ValueError(f"gbflow model file version {d.get('version')!r} is not supported "
                             f"by this gbflow (reads version {FORMAT_VERSION})")
        params = dict(d["params"])
        params = make_params({k: v for k, v in params.items() if v is not None})
        return cls(trees=[Tree.from_dict(t) for t in d["trees"]], cuts=Cuts.from_dict(d["cuts"]),
                   feature_names=d["feature_names"], params=params,
                   base_margin=np.asarray(d["base_margin"]), label_name=d.get("label_name"),
                   weight_name=d.get("weight_name"), best_iteration=d.get("best_iteration"),
                   best_score=d.get("best_score"),
                   categories=categories_module.from_json(d.get("categories")))


def load_model(path) -> Booster:
    """Read a model written by ``Booster.save_model``.

    Raises FileNotFoundError for a missing file and ValueError naming the file when it is not
    JSON or not a complete gbflow model.
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except UnicodeDecodeError as e:
        raise ValueError(f"load_model: {path!r} is not a gbflow model file (not UTF-8 text: "
                         f"{e.reason} at byte {e.start})") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"load_model: {path!r} is not valid JSON ({e}); is it a gbflow model "
                         f"file written by save_model?") from e
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ValueError(f"load_model: {path!r} is JSON but not a gbflow model file (it has no "
                         f"'format': {FORMAT!r} entry)")
    if d.get("version") != FORMAT_VERSION:
        raise ValueError(f"load_model: {path!r} is a gbflow model file of version "
                         f"{d.get('version')!r}, which this gbflow cannot read (it reads version "
                         f"{FORMAT_VERSION})")
    try:
        return Booster.from_dict(d)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        detail = f"missing entry {e}" if isinstance(e, KeyError) else str(e)
        raise ValueError(f"load_model: {path!r} is not a complete gbflow model ({detail})") \
            from e
