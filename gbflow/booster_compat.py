"""XGBoost's ``Booster`` methods that ported scripts call: inplace_predict, strict shapes,
slicing, copy, attributes, importances and dumps by XGBoost's signatures."""
from __future__ import annotations

import math
import operator

from . import inputs, model_tables
from .backend import frames

PREDICT_TYPES = ("value", "margin")


class XGBoostBoosterMethods:
    """Mixed into ``gbflow.Booster``: XGBoost's names over gbflow's prediction and model."""

    def inplace_predict(self, data, iteration_range=None, predict_type: str = "value",
                        missing: float = math.nan, validate_features: bool = True,
                        base_margin=None, strict_shape: bool = False):
        """XGBoost's ``Booster.inplace_predict``: ``predict`` returning the bare array on the
        data's device (NumPy for NumPy, pandas and scipy input; CuPy for CuPy and cuDF), never
        a Series or frame. Shape (n,), or (n, n_outputs) for several outputs; (n, 1) too with
        ``strict_shape``. predict_type: "value" (transformed) or "margin" (raw margins).
        missing: the value read as missing, which must be the model's own (NaN, or the
        training's ``missing`` parameter): gbflow bins with the training's rule. iteration_range
        and base_margin as ``predict``'s (the default, None, stops at ``best_iteration`` when
        training stopped early; XGBoost's default (0, 0) is every round, given explicitly).
        validate_features: accepted; gbflow always matches a frame's columns to the training
        features by name. Nothing on the device is copied to the host."""
        if inputs.is_dask_collection(data):
            raise TypeError("inplace_predict takes in-memory data; a Dask collection's "
                            "predictions are predict()'s (a lazy Dask Series or frame)")
        if predict_type not in PREDICT_TYPES:
            raise ValueError(f"inplace_predict: predict_type must be 'value' or 'margin', got "
                             f"{predict_type!r}")
        own = self.params.missing
        if not (_is_nan(missing) or (own is not None and missing == own)):
            own_text = "NaN" if own is None else repr(own)
            raise ValueError(f"inplace_predict: missing={missing!r} is not this model's missing "
                             f"value ({own_text}, the training's): gbflow bins prediction data "
                             f"with the training's rule")
        values = frames.bare_values(self._predict(
            data, predict_type == "margin", "prediction", passengers_allowed=False,
            iteration_range=iteration_range, base_margin=base_margin))
        return values[:, None] if strict_shape and values.ndim == 1 else values

    def strict_shaped(self, out, kind: str):
        """``predict``'s output (an array, Series or frame) as the bare array in XGBoost's
        ``strict_shape`` layout: values (n, n_outputs); pred_leaf (n, rounds, n_groups, 1);
        pred_contribs (n, n_groups, F + 1); pred_interactions (n, n_groups, F + 1, F + 1)."""
        values = frames.bare_values(out)
        if kind == "value":
            return values[:, None] if values.ndim == 1 else values
        n, groups = values.shape[0], self.n_groups
        if kind == "leaf":
            return values.reshape(n, values.shape[1] // groups, groups, 1)
        width = self.num_features() + 1
        if kind in ("contribs", "approx_contribs"):
            return values.reshape(n, groups, width)
        return values.reshape(n, groups, width, width)

    @property
    def feature_types(self) -> list[str] | None:
        """XGBoost's ``Booster.feature_types``: "c" for each categorical feature and "q" for the
        others where the model has categorical ones, else None (XGBoost's for numeric data
        given without types)."""
        categorical = set(self.categories) | set(self.by_value)
        if not categorical:
            return None
        return ["c" if name in categorical else "q" for name in self.feature_names]

    def get_fscore(self, fmap: str = "") -> dict[str, float]:
        """XGBoost's ``Booster.get_fscore``: the number of splits on each feature used
        (``get_score("weight")``). fmap (a feature map file) is not taken: gbflow's models carry
        their feature names."""
        return self.get_score(fmap, importance_type="weight")

    def attributes(self) -> dict[str, str]:
        """XGBoost's ``Booster.attributes``: the model's string attributes (``set_attr``'s,
        saved in the model file), with ``best_iteration`` and ``best_score`` as text when
        training stopped early, as XGBoost keeps them."""
        out = dict(self.user_attributes)
        if self.best_iteration is not None:
            out["best_iteration"] = str(self.best_iteration)
        if self.best_score is not None:
            out["best_score"] = repr(float(self.best_score))
        return out

    def attr(self, key: str) -> str | None:
        """XGBoost's ``Booster.attr``: the attribute ``key`` as text, or None."""
        return self.attributes().get(key)

    def set_attr(self, **kwargs) -> None:
        """XGBoost's ``Booster.set_attr``: each keyword sets a string attribute (None deletes
        it); ``best_iteration`` and ``best_score`` set the model's own (a round of the model,
        a number), as XGBoost's scikit-learn wrapper uses them. Every value is checked before
        any is set."""
        for key, value in kwargs.items():
            if value is not None and not isinstance(value, str):
                raise ValueError(f"set_attr: the value of {key!r} must be a string (or None to "
                                 f"delete it), got {type(value).__name__}")
        best = kwargs.get("best_iteration")
        if best is not None and not (best.isdigit() and int(best) < self.num_boosted_rounds()):
            raise ValueError(f"set_attr: best_iteration {best!r} is not a round of the model's "
                             f"{self.num_boosted_rounds()}")
        score = kwargs.get("best_score")
        if score is not None:
            try:
                float(score)  # inf and nan included: a metric may give them
            except ValueError:
                raise ValueError(f"set_attr: best_score {score!r} is not a number") from None
        for key, value in kwargs.items():
            if key == "best_iteration":
                self.best_iteration = None if value is None else int(value)
            elif key == "best_score":
                self.best_score = None if value is None else float(value)
            elif value is None:
                self.user_attributes.pop(key, None)
            else:
                self.user_attributes[key] = value

    def copy(self):
        """A new Booster of the same model (its model file read back: no array shared),
        ``best_iteration`` and ``best_score`` included; ``evals_result`` and timings are a
        training's record, not copied."""
        return type(self).from_dict(self.to_dict())

    # (copy.copy stays Python's shallow copy: the Dask task copies a model that way to send
    # its entries without the trees)
    def __deepcopy__(self, memo):
        return self.copy()

    def __getitem__(self, rounds):
        """XGBoost's slicing: ``booster[a:b]`` (or ``[a:b:step]``, or one round ``[i]``) is a
        Booster of those boosting rounds (all of a round's trees: one per class or quantile), in
        order, with the same cuts, features and base margin; its ``best_iteration`` is None
        (the rounds it counted no longer line up). Python's rules for the bounds (XGBoost
        refuses negative ones and ones past the end); a step must be positive."""
        n_rounds = self.num_boosted_rounds()
        if isinstance(rounds, slice):
            if rounds.step is not None and operator.index(rounds.step) <= 0:
                raise ValueError(f"Booster slice: the step must be positive, got {rounds.step}")
            picked = range(n_rounds)[rounds]
        else:
            try:
                index = operator.index(rounds)
            except TypeError:
                raise TypeError(f"a Booster is sliced by rounds (an int or a slice), got "
                                f"{type(rounds).__name__}") from None
            if not -n_rounds <= index < n_rounds:
                raise IndexError(f"round {index} is out of range: the model has {n_rounds}")
            picked = [index % n_rounds]
        groups = self.n_groups
        trees = [t for r in picked for t in self.trees[r * groups:(r + 1) * groups]]
        return type(self)(trees, self.cuts, self.feature_names, self.params, self.base_margin,
                          label_name=self.label_name, weight_name=self.weight_name,
                          categories=self.categories, by_value=self.by_value,
                          attributes=self.user_attributes, made_up_names=self.made_up_names)


    # XGBoost's signatures, fmap first: a feature map file is refused (model_tables.check_fmap)
    def get_score(self, fmap: str = "", importance_type: str = "weight") -> dict[str, float]:
        """XGBoost's ``Booster.get_score``: {feature: importance} of the features used in a
        split; importance_type "weight" (number of splits), "gain"/"cover" (mean per split),
        "total_gain"/"total_cover"."""
        model_tables.check_fmap(fmap, "get_score")
        return self.feature_importances(importance_type)

    def trees_to_dataframe(self, fmap: str = ""):
        """A pandas DataFrame of every node (``gbflow.model_tables.trees_to_dataframe``)."""
        model_tables.check_fmap(fmap, "trees_to_dataframe")
        return model_tables.trees_to_dataframe(self)

    def get_dump(self, fmap: str = "", with_stats: bool = False,
                 dump_format: str = "text") -> list[str]:
        """Each tree as XGBoost's text or JSON dump (``gbflow.model_tables.get_dump``)."""
        model_tables.check_fmap(fmap, "get_dump")
        return model_tables.get_dump(self, with_stats, dump_format)

    def dump_model(self, fout, fmap: str = "", with_stats: bool = False,
                   dump_format: str = "text") -> None:
        """Write every tree's dump to the file ``fout`` (``gbflow.model_tables.dump_model``)."""
        model_tables.check_fmap(fmap, "dump_model")
        model_tables.dump_model(self, fout, with_stats, dump_format)


def explain_kind(output_margin: bool, pred_leaf: bool, pred_contribs: bool,
                 approx_contribs: bool, pred_interactions: bool) -> str:
    """What ``predict`` computes: "value", "leaf", "contribs", "approx_contribs" or
    "interactions"; a clear error for options that do not go together."""
    chosen = [n for n, on in (("pred_leaf", pred_leaf), ("pred_contribs", pred_contribs),
                              ("pred_interactions", pred_interactions)) if on]
    if len(chosen) > 1:
        raise ValueError(f"predict: choose one of pred_leaf, pred_contribs and "
                         f"pred_interactions (got {' and '.join(chosen)})")
    if approx_contribs and not pred_contribs:
        raise ValueError("predict: approx_contribs=True goes with pred_contribs=True (Saabas's "
                         "approximate contributions; interactions are exact only)")
    if chosen and output_margin:
        raise ValueError(f"predict: output_margin does not apply to {chosen[0]} (contributions "
                         f"are in margin units already)")
    if not chosen:
        return "value"
    return {"pred_leaf": "leaf", "pred_interactions": "interactions"}.get(
        chosen[0], "approx_contribs" if approx_contribs else "contribs")


def _is_nan(value) -> bool:
    try:
        return math.isnan(value)
    except TypeError:
        return False
