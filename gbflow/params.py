"""Training parameters: XGBoost's names, aliases and defaults, validated before any work is done."""
from __future__ import annotations

import dataclasses
import difflib
import math

from . import metrics, objectives
from .backend import DEVICES

ALIASES = {
    "eta": "learning_rate",
    "lambda": "reg_lambda",
    "alpha": "reg_alpha",
    "min_split_loss": "gamma",
    "random_state": "seed",
}


@dataclasses.dataclass(frozen=True)
class Params:
    """Validated training parameters (XGBoost's meanings and defaults where the concept exists)."""

    objective: str = "reg:squarederror"
    learning_rate: float = 0.3
    max_depth: int = 6
    min_child_weight: float = 1.0
    gamma: float = 0.0
    reg_lambda: float = 1.0
    reg_alpha: float = 0.0
    subsample: float = 1.0
    colsample_bytree: float = 1.0
    max_bin: int = 256
    seed: int = 0
    base_score: float | None = None
    num_class: int | None = None
    eval_metric: tuple[str, ...] | None = None
    device: str = "auto"
    # LightGBM's meaning: a column whose most common bin holds more than this share of rows is
    # stored sparse. Routing changes speed and memory, never the model; this version stores every
    # column dense, so the value is validated and kept but changes nothing yet.
    sparse_threshold: float = 0.8

    @property
    def n_groups(self) -> int:
        return int(self.num_class) if self.objective == "multi:softprob" else 1

    @property
    def metrics(self) -> tuple[str, ...]:
        if self.eval_metric is not None:
            return self.eval_metric
        return (objectives.get_objective(self.objective, self.num_class).default_metric,)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["eval_metric"] = list(self.eval_metric) if self.eval_metric is not None else None
        return d


KNOWN = tuple(f.name for f in dataclasses.fields(Params))


def _unknown(name: str) -> ValueError:
    choices = list(KNOWN) + list(ALIASES)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known parameters: {sorted(KNOWN)}"
    return ValueError(f"unknown parameter {name!r}{hint}")


def _number(name, value, kind=float):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (kind is int and float(value) != int(value)) or not math.isfinite(float(value)):
        raise ValueError(f"parameter {name} must be a finite {kind.__name__}, got {value!r}")
    return kind(value)


def make_params(user: dict | None = None, **overrides) -> Params:
    """Validate a user's parameter dict (aliases allowed) into ``Params``; errors name the parameter."""
    merged: dict = {}
    for source in (user or {}, overrides):
        for name, value in source.items():
            canonical = ALIASES.get(name, name)
            if canonical not in KNOWN:
                raise _unknown(name)
            if canonical in merged and source is user and name != canonical:
                raise ValueError(f"parameter {canonical} given twice (as {name!r} and by name)")
            merged[canonical] = value
    p = {}
    for name, kind, low, high, low_open in [
        ("learning_rate", float, 0, math.inf, True), ("max_depth", int, 1, 30, False),
        ("min_child_weight", float, 0, math.inf, False), ("gamma", float, 0, math.inf, False),
        ("reg_lambda", float, 0, math.inf, False), ("reg_alpha", float, 0, math.inf, False),
        ("subsample", float, 0, 1, True), ("colsample_bytree", float, 0, 1, True),
        ("max_bin", int, 2, 65536, False), ("seed", int, -(2**63), 2**63 - 1, False),
        ("sparse_threshold", float, 0, 1, False),
    ]:
        if name not in merged:
            continue
        v = _number(name, merged[name], kind)
        if v < low or v > high or (low_open and v == low):
            bound = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
            raise ValueError(f"parameter {name} must lie in {bound}, got {merged[name]!r}")
        p[name] = v
    objective = merged.get("objective", Params.objective)
    if objective not in objectives.OBJECTIVES:
        close = difflib.get_close_matches(str(objective), objectives.OBJECTIVES, n=1, cutoff=0.4)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"objective {objective!r} is not supported{hint} "
                         f"(supported: {', '.join(objectives.OBJECTIVES)})")
    p["objective"] = objective
    num_class = merged.get("num_class")
    if objective == "multi:softprob":
        if num_class is None:
            raise ValueError("objective multi:softprob needs the parameter num_class")
        num_class = _number("num_class", num_class, int)
        if num_class < 2:
            raise ValueError(f"parameter num_class must be at least 2, got {num_class}")
        p["num_class"] = num_class
    elif num_class not in (None, 1):
        raise ValueError(f"parameter num_class={num_class!r} only goes with multi:softprob")
    if merged.get("base_score") is not None:
        p["base_score"] = _number("base_score", merged["base_score"])
    device = merged.get("device", Params.device)
    if device not in DEVICES:
        raise ValueError(f"parameter device must be one of {DEVICES}, got {device!r}")
    p["device"] = device
    metric = merged.get("eval_metric")
    if metric is not None:
        names = (metric,) if isinstance(metric, str) else tuple(metric)
        fits = {"reg:squarederror": {"rmse"}, "binary:logistic": {"logloss", "auc", "rmse"},
                "multi:softprob": {"mlogloss"}}[objective]
        for m in names:
            if m not in metrics.METRICS:
                raise ValueError(f"eval_metric {m!r} is not supported "
                                 f"(supported: {', '.join(metrics.METRICS)})")
            if m not in fits:
                raise ValueError(f"eval_metric {m!r} does not fit objective {objective} "
                                 f"(use one of {sorted(fits)})")
        p["eval_metric"] = names
    return Params(**p)
