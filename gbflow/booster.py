"""The trained model: prediction, transform, feature importances and the JSON model file."""
from __future__ import annotations

import json
import operator
import os

import numpy as np

from . import categories as categories_module
from . import explain, inputs, model_check, predictor, xgboost_format
from .atomic_file import write_whole
from .backend import backend_for, frames
from .booster_compat import XGBoostBoosterMethods, explain_kind
from .cuts import Cuts
from .params import RUN_TIME, Params, make_params
from .tree import Tree

FORMAT = "gbflow-model"
FORMAT_VERSION = 1
IMPORTANCE_TYPES = ("gain", "total_gain", "split", "cover", "total_cover")  # and "weight"


class Booster(XGBoostBoosterMethods):
    """A trained gradient-boosted tree ensemble.

    trees: in training order, ``n_groups`` trees per round (one per class for multi:softprob,
    per quantile for several quantiles).
    cuts: the training cut points. base_margin: (n_groups,) float64 starting margins.
    categories: {feature name: its categories' values, sorted} of the categorical features
    (``gbflow.categories``); prediction matches a frame's categories to them by value.
    """

    def __init__(self, trees: list[Tree] | None = None, cuts: Cuts | None = None,
                 feature_names: list[str] | None = None, params: Params | None = None,
                 base_margin: np.ndarray | None = None, label_name: str | None = None,
                 weight_name: str | None = None, best_iteration: int | None = None,
                 best_score: float | None = None, categories: dict | None = None,
                 by_value: tuple = (), attributes: dict | None = None,
                 made_up_names: bool = False, *, model_file=None):
        if trees is None or isinstance(trees, dict):
            # XGBoost's Booster(), Booster(params) or Booster(model_file=path) (its third
            # argument): a Booster of no model, which load_model fills
            if isinstance(feature_names, (str, os.PathLike)) and model_file is None:
                model_file = feature_names
            self.__init__([], None, [], make_params({}), np.zeros(1))
            if model_file is not None:
                self.load_model(model_file)
            return
        self.trees = trees
        # XGBoost's string attributes (``set_attr``), saved in the model file
        self.user_attributes: dict[str, str] = dict(attributes or {})
        self.categories = dict(categories or {})
        # the categorical features whose numeric values are their categories (feature_types
        # "c" on numeric columns): prediction takes them as numbers, exports write the values
        self.by_value = tuple(by_value)
        self.cuts = cuts
        self.feature_names = list(feature_names)
        self.params = params
        self.base_margin = np.asarray(base_margin, dtype=np.float64)
        self.label_name = label_name
        self.weight_name = weight_name
        self.best_iteration = best_iteration
        self.best_score = best_score
        self.evals_result: dict = {}
        self.eval_rounds: list = []  # the rounds of evals_result's values (set by training)
        # the feature names are gbflow's f0, f1, ... of an array (the XGBoost export leaves
        # them out, as XGBoost's own array models have none)
        self.made_up_names = bool(made_up_names)
        self.timings: dict = {}
        self.memory_report: dict | None = None  # set by training (``gbflow.memory_report``)
        self._objective = params.loss
        self._forests: dict = {}  # (first tree, end tree) -> predictor.FlatForest
        self._explanations: dict = {}  # (first tree, end tree) -> explain.ExplainedForest

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
        if self.cuts is None:
            return "<gbflow.Booster without a model (load_model fills it)>"
        return (f"<gbflow.Booster {self.params.objective}, {self.num_boosted_rounds()} rounds, "
                f"{self.num_features()} features>")

    # -- prediction ------------------------------------------------------------------------
    def _features(self, data, passengers_allowed: bool, margin_column: str | None = None):
        inputs.check_container(data, "prediction data",
                               self.feature_names if passengers_allowed else None)
        if frames.is_sparse_matrix(data) and data.shape[1] < len(self.feature_names):
            data = frames.widened_sparse(data, len(self.feature_names))  # as XGBoost: missing
        if frames.is_frame(data):
            allowed = set(frames.column_names(data)) if passengers_allowed else \
                {self.label_name, self.weight_name, margin_column} - {None}
            inputs.check_columns(data, self.feature_names, allowed, "prediction data")
            inputs.check_feature_dtypes(data, self.feature_names, "prediction data")
        else:
            inputs.check_columns(data, self.feature_names, (), "prediction data")
            # (as training's: strings, complex, timedelta or object values are not read as
            # numbers)
            inputs.check_feature_dtypes(data, self.feature_names, "prediction data")
        # features categorical by value come as numbers (an array, numeric columns) matched
        # with the model's categories (a category column for them is matched as in training)
        as_columns = set(frames.category_columns(data, self.by_value))
        by_value = [name for name in self.by_value if name not in as_columns]
        coded = {k: v for k, v in self.categories.items() if k not in by_value}
        inputs.check_categorical(data, self.feature_names, list(coded), "prediction data")
        X = frames.feature_matrix(data, self.feature_names, coded)
        X = frames.mark_missing(X, self.params.missing, [
            j for j, name in enumerate(self.feature_names) if name in coded])
        if by_value:
            inputs.check_container_of_typed(X, "prediction data")
            X = categories_module.encode_values(
                X, [self.feature_names.index(n) for n in by_value], by_value, "prediction data",
                self.categories, copy=not frames.is_frame(data))[0]
        inputs.check_features(X, self.feature_names, "prediction data")
        return X

    def _tree_range(self, iteration_range) -> tuple[int, int]:
        """The trees [first, end) of ``iteration_range`` (integer rounds, XGBoost's meaning: an
        end of 0 is the last round, so (0, 0) is every round, and (k, k) none); None: up to the
        best round when early stopping ran, else every round."""
        rounds = self.num_boosted_rounds()
        if iteration_range is None:
            begin, end = 0, rounds if self.best_iteration is None else self.best_iteration + 1
        else:
            try:
                begin, end = (operator.index(r) for r in iteration_range)
            except (TypeError, ValueError):
                raise TypeError(f"iteration_range must be a pair of round numbers (begin, end), "
                                f"got {iteration_range!r}") from None
            end = rounds if end == 0 else end  # XGBoost's: end 0 is the last round
            if not 0 <= begin <= end <= rounds:  # (begin == end: no tree, as XGBoost's)
                raise ValueError(f"iteration_range {tuple(iteration_range)} is outside the "
                                 f"model's rounds: it needs 0 <= begin <= end <= {rounds}")
        return begin * self.n_groups, end * self.n_groups

    def _forest(self, trees: tuple[int, int]) -> predictor.FlatForest:
        if trees not in self._forests:
            self._forests[trees] = predictor.FlatForest.from_trees(self.trees[slice(*trees)])
        return self._forests[trees]

    def _explained(self, trees: tuple[int, int]) -> explain.ExplainedForest:
        """The forest of ``trees`` with its cover, paths and node means (made once)."""
        if trees not in self._explanations:
            chosen = self.trees[slice(*trees)]
            cover = np.concatenate([t.cover for t in chosen]) if chosen else np.empty(0)
            self._explanations[trees] = explain.ExplainedForest(self._forest(trees), cover)
        return self._explanations[trees]

    def output_columns(self, name: str = "prediction", output_margin: bool = False,
                       kind: str = "value", iteration_range=None) -> list[str]:
        """The column names ``predict`` gives a frame for these options (kind: "value",
        "leaf", "contribs" or "approx_contribs")."""
        if kind == "leaf":
            first, end = self._tree_range(iteration_range)
            return [f"tree_{t}" for t in range(first, end)]
        if kind in ("contribs", "approx_contribs"):
            bias = "bias"
            while bias in self.feature_names:  # a feature named "bias": the column stays apart
                bias = f"_{bias}_"
            names = [*self.feature_names, bias]
            return names if self.n_groups == 1 else \
                [f"{c}_{k}" for k in range(self.n_groups) for c in names]
        width = self.output_width(output_margin)
        return [name] if width == 1 else [f"{name}_{k}" for k in range(width)]

    def load_model(self, path) -> None:
        """XGBoost's ``Booster().load_model(path)``: this Booster becomes the model of the gbflow
        model file ``path`` (``gbflow.load_model``'s checks; nothing changes on an error)."""
        loaded = load_model(path).__dict__
        self.__dict__.clear()  # (nothing of the model before stays: its training's records)
        self.__dict__.update(loaded)

    def _check_loaded(self) -> None:
        if getattr(self, "cuts", None) is None:
            raise ValueError("this Booster holds no model yet: load one with "
                             "booster.load_model(path) (or gbflow.load_model(path))")

    def _predict(self, data, output_margin: bool, name: str, passengers_allowed: bool,
                 kind: str = "value", iteration_range=None, base_margin=None):
        self._check_loaded()
        row_margin = None
        if base_margin is not None:
            if kind != "value":
                raise ValueError("base_margin goes with predictions and margins; explanations "
                                 "(pred_leaf, pred_contribs, pred_interactions) do not take "
                                 "it in this version")
            inputs.check_container(data, "prediction data")
            row_margin, _ = inputs.base_margin_values(data, base_margin, "prediction data",
                                                      frames.n_rows(data))
        X = self._features(data, passengers_allowed,
                           base_margin if isinstance(base_margin, str) else None)
        backend = backend_for(X)  # predict where the data lives
        trees = self._tree_range(iteration_range)
        forest = self._forest(trees)
        if kind == "value":
            margin = predictor.predict_margin(backend, X, forest, self.base_margin, row_margin)
            values = margin if self.n_groups > 1 else margin[:, 0]
            if not output_margin:
                values = self._objective.predictions(backend, margin)
            if values.ndim == 1:
                return frames.wrap_prediction(values, data, name)
            return frames.wrap_columns(values, data, self.output_columns(name, output_margin))
        X = frames.dense_rows(X)
        columns = self.output_columns(name, output_margin, kind, iteration_range)
        if kind == "leaf":
            return frames.wrap_columns(explain.leaf_indices(backend, X, forest), data, columns)
        explained = self._explained(trees)
        if kind == "interactions":
            values = explain.interactions(backend, X, explained, self.base_margin)
            return values[:, 0] if self.n_groups == 1 else values
        values = explain.contributions(backend, X, explained, self.base_margin,
                                       approximate=kind == "approx_contribs")
        if not frames.is_frame(data):
            return values[:, 0] if self.n_groups == 1 else values
        return frames.wrap_columns(values.reshape(len(values), len(columns)), data, columns)

    def predict(self, data, output_margin: bool = False, name: str = "prediction", *,
                pred_leaf: bool = False, pred_contribs: bool = False,
                approx_contribs: bool = False, pred_interactions: bool = False,
                iteration_range=None, base_margin=None, strict_shape: bool = False,
                validate_features: bool = True, training: bool = False):
        """Predictions for ``data``, or their explanations.

        data: pandas or cuDF DataFrame (its columns must be the training features; the training
        label and weight columns may be present too), a 2-D NumPy/CuPy array with the features in
        training order, or a scipy/CuPy sparse matrix. Computed on the data's device.

        Returns a Series with data's index (a DataFrame with one column per class for
        multi:softprob, per quantile for reg:quantileerror with several ``quantile_alpha``:
        ``prediction_0``, ...) for frames, an array (n,) or (n, n_outputs) for arrays. Values
        are probabilities for the classification objectives, or raw margins with
        ``output_margin``.
        A Dask DataFrame gives a lazy Dask Series/DataFrame with its index and divisions
        (``gbflow.dask.predict``).

        XGBoost's options (one at a time):

        - ``pred_contribs``: exact TreeSHAP values: an array (n, F + 1) ((n, n_groups, F + 1)
          for several classes), the last column the bias (base margin plus the trees' expected
          value), summing to the margin; a frame of columns ``<feature>``/``bias`` (``_bias_``
          when a feature is named "bias"; ``_<class>`` appended for several classes) for frame
          input. With ``approx_contribs``,
          Saabas's path attribution instead (faster, not consistent).
        - ``pred_interactions``: SHAP interaction values, an array (n, [n_groups,] F + 1, F + 1)
          on the data's device for any input (symmetric; [i, i] is feature i's value less its
          interactions; everything sums to the margin).
        - ``pred_leaf``: the leaf (node id within its tree, as in the model file) each row reaches
          in each tree: int32 (n, n_trees), or a frame of ``tree_<t>`` columns.

        iteration_range: (begin, end) rounds to use, half open; (0, 0) every round. Default: up
        to ``best_iteration`` when training stopped early (the model keeps the later rounds,
        reachable with an explicit range), else every round.

        base_margin: XGBoost's, each row's starting margin in place of the model's base score
        (as given to ``train``): a column name of ``data`` or an array ((n,), or (n, n_classes));
        a column name for a Dask DataFrame. strict_shape, validate_features, training: XGBoost's
        (``booster_compat.strict_shaped``; ``validate_features`` and ``training`` are taken and
        change nothing: frame columns are always matched by name, and no tree is dropped).
        """
        kind = explain_kind(output_margin, pred_leaf, pred_contribs, approx_contribs,
                             pred_interactions)
        if inputs.is_dask_collection(data):
            if strict_shape:
                raise TypeError("predict: strict_shape is for in-memory data (an array); a "
                                "Dask collection's predictions are a lazy Series or frame")
            from .dask import predict as dask_predict
            return dask_predict.predict(self, data, output_margin, name, kind, iteration_range,
                                        base_margin)
        out = self._predict(data, output_margin, name, passengers_allowed=False, kind=kind,
                            iteration_range=iteration_range, base_margin=base_margin)
        return self.strict_shaped(out, kind) if strict_shape else out

    def transform(self, data, name: str = "prediction", output_margin: bool = False, *,
                  iteration_range=None, base_margin=None):
        """``data`` with the prediction column(s) appended (a new frame; columns other than the
        features ride along untouched). For arrays, the prediction is appended as last column(s).
        A Dask DataFrame gives a lazy Dask DataFrame (``gbflow.dask.predict.transform``).
        iteration_range and base_margin as in ``predict``."""
        if inputs.is_dask_collection(data):
            from .dask import predict as dask_predict
            return dask_predict.transform(self, data, name, output_margin, iteration_range,
                                          base_margin)
        prediction = self._predict(data, output_margin, name, passengers_allowed=True,
                                   iteration_range=iteration_range, base_margin=base_margin)
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
        # The device and thread count trained with are run-time choices, not part of the model:
        # CPU and GPU training of the same data give the same file, byte for byte.
        self._check_loaded()
        params = {k: v for k, v in self.params.to_dict(bool(self.categories)).items()
                  if k not in RUN_TIME}
        extra = {"categories": categories_module.to_json(self.categories)} \
            if self.categories else {}
        if self.by_value:
            extra["by_value"] = list(self.by_value)
        if self.user_attributes:
            extra["attributes"] = dict(sorted(self.user_attributes.items()))
        if self.made_up_names:
            extra["made_up_names"] = True
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "params": params,
            "base_margin": [float(m) for m in self.base_margin],
            "feature_names": self.feature_names,
            "label_name": self.label_name,
            "weight_name": self.weight_name,
            "best_iteration": self.best_iteration,
            "best_score": model_check.best_score_to_json(self.best_score),
            "cuts": self.cuts.to_dict(),
            "trees": [t.to_dict() for t in self.trees],
            **extra,
        }

    def to_json(self) -> str:
        """The model file's text (deterministic: the same model gives the same bytes)."""
        return json.dumps(self.to_dict(), allow_nan=False, separators=(",", ":"))

    def to_xgboost(self):
        """The model as an ``xgboost.Booster`` (through XGBoost's JSON model format,
        ``gbflow.xgboost_format``): predictions agree to float32 rounding, ``pred_leaf``
        exactly. Needs the xgboost package."""
        self._check_loaded()
        try:
            import xgboost
        except ImportError as e:
            raise ImportError("Booster.to_xgboost needs the xgboost package (pip install "
                              "xgboost, or the gbflow[xgboost] extra)") from e
        model = xgboost.Booster()
        model.load_model(bytearray(xgboost_format.to_xgboost_json(self).encode()))
        return model

    def to_treelite(self):
        """The model as a ``treelite.Model`` (``gbflow.treelite_format``: float64 thresholds and
        leaves, the objective's link as postprocessor; every round), for Treelite's predictor,
        RAPIDS FIL/nvForest and Triton's FIL backend (``model.serialize(path)`` writes the
        checkpoint Triton loads). Needs the treelite package."""
        from . import treelite_format
        return treelite_format.to_treelite(self)

    def save_model(self, path, format: str | None = None) -> None:
        """Write the model to ``path``: gbflow's JSON model file (format None or "gbflow"), or
        XGBoost's model format (format="xgboost"): JSON, or UBJSON when the name ends with
        ``.ubj`` (that one written through the xgboost package). A ``.ubj`` name without
        format="xgboost" is an error (gbflow's own files are JSON).

        The model is checked as ``load_model`` checks a file first (a ValueError, nothing
        written). The file appears whole or not at all: the text is written to a temporary file
        in the same folder, flushed to disk, then renamed over ``path``; on any failure the
        temporary file is removed and an existing ``path`` is left as it was."""
        path = os.path.expanduser(os.fspath(path))  # "~/m.json", as XGBoost
        if format not in (None, "gbflow", "xgboost"):
            raise ValueError(f"save_model: format must be 'gbflow' or 'xgboost', got {format!r}")
        ubj = path.lower().endswith(".ubj")
        if ubj and format != "xgboost":
            raise ValueError(f"save_model: {path!r} asks for UBJSON, which gbflow's own model "
                             f"files are not (they are JSON): name it .json, or pass "
                             f"format='xgboost' for XGBoost's UBJSON model")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"save_model: folder {folder!r} does not exist "
                                    f"(saving to {path!r}); create it first")
        if os.path.isdir(path):
            raise IsADirectoryError(f"save_model: {path!r} is a folder; give a file name such "
                                    f"as {os.path.join(path, 'model.json')!r}")
        model = self.to_dict()
        try:  # what load_model would refuse is not written (attributes set by hand)
            model_check.check_model(model, self.n_groups)
        except model_check.ModelFileError as error:
            raise ValueError(f"save_model: this model would not load back: {error}") from None
        if format != "xgboost":
            content = json.dumps(model, allow_nan=False, separators=(",", ":")).encode("utf-8")
        elif ubj:
            content = bytes(self.to_xgboost().save_raw("ubj"))
        else:
            content = xgboost_format.to_xgboost_json(self).encode("utf-8")
        write_whole(path, folder, content)

    @classmethod
    def from_dict(cls, d: dict) -> "Booster":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError("not a gbflow model file (no 'format': 'gbflow-model' entry)")
        if d.get("version") != FORMAT_VERSION:
            raise ValueError(f"gbflow model file version {d.get('version')!r} is not supported "
                             f"by this gbflow (reads version {FORMAT_VERSION})")
        if not isinstance(d.get("params"), dict):
            raise model_check.ModelFileError("params is missing or not a mapping")
        given = {k: v for k, v in d["params"].items() if v is not None}
        if d.get("categories") and "cat_noise_penalty" not in given:
            given["cat_noise_penalty"] = 0.0  # written before the penalty: trained without it
        params = make_params(given)
        model_check.check_model(d, params.n_groups)
        return cls(trees=[Tree.from_dict(t) for t in d["trees"]], cuts=Cuts.from_dict(d["cuts"]),
                   feature_names=d["feature_names"], params=params,
                   base_margin=np.asarray(d["base_margin"]), label_name=d.get("label_name"),
                   weight_name=d.get("weight_name"), best_iteration=d.get("best_iteration"),
                   best_score=model_check.best_score_from_json(d.get("best_score")),
                   categories=categories_module.from_json(d.get("categories")),
                   by_value=tuple(d.get("by_value") or ()), attributes=d.get("attributes"),
                   made_up_names=d.get("made_up_names") is True)


def load_model(path) -> Booster:
    """Read a model written by ``Booster.save_model``.

    The file is untrusted input: its whole structure is checked (``gbflow.model_check``) before
    a Booster is made, and nothing in it is executed. Raises FileNotFoundError for a missing
    file and ValueError naming the file and the entry at fault for anything else: not JSON, an
    XGBoost or LightGBM model, another version, a missing, mistyped or inconsistent entry.
    """
    return read_model_file(path)[0]


def read_model_file(path) -> tuple[Booster, dict]:
    """``load_model``'s Booster, and the file's parsed JSON (for entries beside the model's,
    such as a checkpoint's training state)."""
    path = os.path.expanduser(os.fspath(path))
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        hint = " (XGBoost's UBJSON models load with xgboost.Booster)" \
            if path.lower().endswith(".ubj") else ""
        raise ValueError(f"load_model: {path!r} is not a gbflow model file (not UTF-8 text: "
                         f"{e.reason} at byte {e.start}){hint}") from e
    try:
        d = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, too-long integers, nesting
        hint = "it looks like a LightGBM text model (lightgbm.Booster(model_file=...) reads " \
               "it)" if text.startswith("tree\n") else \
            "is it a gbflow model file written by save_model?"
        raise ValueError(f"load_model: {path!r} is not valid JSON ({e}); {hint}") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        hint = "; it looks like an XGBoost model (xgboost.Booster().load_model reads it)" \
            if isinstance(d, dict) and "learner" in d else ""
        raise ValueError(f"load_model: {path!r} is JSON but not a gbflow model file (it has no "
                         f"'format': {FORMAT!r} entry){hint}")
    if d.get("version") != FORMAT_VERSION:
        raise ValueError(f"load_model: {path!r} is a gbflow model file of version "
                         f"{d.get('version')!r}, which this gbflow cannot read (it reads version "
                         f"{FORMAT_VERSION})")
    try:
        return Booster.from_dict(d), d
    except (TypeError, ValueError, OverflowError, LookupError) as e:  # model_check's, the
        # parameters', or (a backstop) any other a malformed entry raises on the way
        detail = str(e) if isinstance(e, (TypeError, ValueError)) else f"{type(e).__name__}: {e}"
        raise ValueError(f"load_model: {path!r} is not a valid gbflow model ({detail})") from e
