"""Training parameters: XGBoost's names, aliases and defaults, validated before any work is done."""
from __future__ import annotations

import dataclasses
import difflib
import functools
import math

from . import _dtypes, interactions, metrics, objectives, ranking, weight_bounds
from .backend import DEVICES
from .categories import parse_feature_types
from .param_values import (
    as_number,
    device_name,
    flag_value,
    params_from_pairs,
    parse_bytes,
    quantile_alphas,
)
from .ported_names import ELSEWHERE, FIXED

# the smallest magnitude that float32 (the features' type) rounds to infinity: its largest
# finite value plus half a unit in the last place
_FLOAT32_INFINITE = 3.4028235677973366e38

ALIASES = {
    "eta": "learning_rate",
    "lambda": "reg_lambda",
    "alpha": "reg_alpha",
    "min_split_loss": "gamma",
    "random_state": "seed",
    "n_jobs": "nthread",
}


@dataclasses.dataclass(frozen=True)
class Params:
    """Validated training parameters (XGBoost's meanings and defaults where the concept exists)."""

    objective: str = "reg:squarederror"
    learning_rate: float = 0.3
    # XGBoost's: 0 is no limit (then max_leaves must be set; gbflow's trees stop at
    # _dtypes.MAX_TREE_DEPTH, 30 levels, whatever the policy)
    max_depth: int = 6
    # XGBoost's: "depthwise" splits the shallowest leaves first, "lossguide" the leaf of the
    # largest gain (best first, LightGBM's leaf-wise growth); their trees differ only when
    # max_leaves (0: no limit) stops a tree before every leaf worth splitting is split
    # (gbflow.grow; without that, only XGBoost's lossguide node ids differ: split order)
    grow_policy: str = "depthwise"
    max_leaves: int = 0
    min_child_weight: float = 1.0
    gamma: float = 0.0
    reg_lambda: float = 1.0
    reg_alpha: float = 0.0
    subsample: float = 1.0
    # XGBoost's: how subsample draws rows; "gradient_based" keeps rows with probability growing
    # with their gradients and reweights them (``sampling.gradient_based_sample``)
    sampling_method: str = "uniform"
    colsample_bytree: float = 1.0
    # XGBoost's: each depth's nodes split on this share of the tree's features (sampled anew)
    colsample_bylevel: float = 1.0
    # XGBoost's: each node splits on this share of its level's features (sampled per node)
    colsample_bynode: float = 1.0
    max_bin: int = 256
    seed: int = 0
    base_score: float | None = None
    num_class: int | None = None
    eval_metric: tuple[str, ...] | None = None
    huber_slope: float = 1.0  # reg:pseudohubererror's and the mphe metric's delta (XGBoost's)
    tweedie_variance_power: float = 1.5  # reg:tweedie's rho, in (1, 2) (XGBoost's default)
    scale_pos_weight: float = 1.0  # weight factor of rows labelled 1 (XGBoost's rule)
    # CPU threads of the kernels (XGBoost's nthread, alias n_jobs); None or <= 0: every core
    # numba may use (on a Dask worker, its own thread count)
    nthread: int | None = None
    # reg:quantileerror's and the quantile metric's level (XGBoost's name and default); a
    # tuple of several (XGBoost's list) trains one output per quantile, in that order
    quantile_alpha: float | tuple[float, ...] = 0.5
    # XGBoost's: 0 silences gbflow's warnings during training; 1 (default), 2 and 3 show them
    # (gbflow has no info or debug messages of its own; progress lines are train()'s verbose)
    verbosity: int = 1
    # XGBoost's: without eval_metric, evaluate no built-in metric (only a custom metric)
    disable_default_eval_metric: bool = False
    device: str = "auto"
    # XGBoost's missing: a feature value read as missing, like NaN (None: only NaN and nulls);
    # applied to numeric features in training, evaluation and prediction data
    missing: float | None = None
    # LightGBM's meaning: a column whose most common bin holds more than this share of rows is
    # stored as sparse entries (1.0: none is). None (the default): above 0.8, and only those whose
    # entries take less memory than their dense columns (routing.decide). Routing changes speed
    # and memory, never the model.
    sparse_threshold: float | None = None
    # Categorical features (pandas/cuDF ``category`` columns; gbflow.categories). XGBoost's
    # enable_categorical is accepted; False refuses category columns, as XGBoost's does.
    enable_categorical: bool = True
    # XGBoost's: a feature of fewer categories splits one category against the rest
    max_cat_to_onehot: int = 4
    # XGBoost's: at most this many categories on the chosen side of a partition split
    max_cat_threshold: int = 64
    # LightGBM's, in hessian units (rows for squared error): a partition split sorts categories
    # by G / (H + cat_smooth) and leaves out of the sorted scan those holding less hessian
    cat_smooth: float = 10.0
    # LightGBM's: the L2 penalty of partition splits' gains is reg_lambda + cat_l2
    cat_l2: float = 10.0
    # XGBoost's: one type per feature ("q", "int", "float", "i": numeric; "c": categorical,
    # for numeric columns and arrays whose values are categories); None: from the dtypes
    feature_types: tuple[str, ...] | None = None
    # gbflow's: a partition split's gain pays this many times the gain its node's categories
    # would find in noise alone (``category_splits``); 0 turns the penalty off
    cat_noise_penalty: float = 1.0
    # dask-cuda's name: the device bytes this process's binned training data may take; above
    # it the bins live in host pages streamed to the device level by level. None: the device's
    # free memory (the CPU: nothing paged). Changes speed and memory, never the model.
    device_memory_limit: int | None = None
    # XGBoost's: a cap on each leaf weight's size before the learning rate (0: none), and
    # count:poisson's hessian factor exp(max_delta_step); None: XGBoost's default, 0.7 for
    # count:poisson (both uses) and no cap otherwise
    max_delta_step: float | None = None
    # XGBoost's: per feature -1 (prediction decreasing in it), 0 or 1 (increasing); a tuple by
    # feature position or a dict by name (``weight_bounds.parse_monotone``)
    monotone_constraints: tuple | dict | None = None
    # XGBoost's: sets of features (positions or names) that may split on one path together
    # (``interactions.InteractionSets``); None: any features may
    interaction_constraints: tuple | None = None
    # learning to rank (rank:ndcg, rank:map, rank:pairwise; ``gbflow.ranking``), XGBoost's
    # LambdaMART parameters: the top-k pairs of each query's first k documents (None: 32)
    lambdarank_num_pair_per_sample: int | None = None
    lambdarank_normalization: bool = True
    lambdarank_score_normalization: bool = True
    ndcg_exp_gain: bool = True

    @functools.cached_property
    def loss(self) -> objectives.Objective:
        """The objective's ``Objective`` (gradients, link, base score), made once."""
        return objectives.get_objective(
            self.objective, self.num_class, scale_pos_weight=self.scale_pos_weight,
            huber_slope=self.huber_slope, tweedie_variance_power=self.tweedie_variance_power,
            quantile_alpha=self.quantile_alpha, poisson_delta_step=self.poisson_delta_step,
            lambda_params=ranking.LambdaParams(
                "", top_k=self.lambdarank_num_pair_per_sample or ranking.DEFAULT_TOP_K,
                normalize=self.lambdarank_normalization,
                score_normalize=self.lambdarank_score_normalization,
                exp_gain=self.ndcg_exp_gain))

    @property
    def delta_step_cap(self) -> float:
        """The trees' cap on leaf weights (0: none): ``max_delta_step``, else XGBoost's
        default (0.7 for count:poisson, which XGBoost gives its trees too, else none)."""
        if self.max_delta_step is not None:
            return self.max_delta_step
        return self.poisson_delta_step if self.objective == "count:poisson" else 0.0

    @property
    def poisson_delta_step(self) -> float:
        """count:poisson's hessian factor exp(this): ``max_delta_step``, or XGBoost's Poisson
        default 0.7."""
        return objectives.POISSON_MAX_DELTA_STEP if self.max_delta_step is None else \
            self.max_delta_step

    @property
    def depth_limit(self) -> int:
        """The trees' depth limit: ``max_depth``, or gbflow's largest depth when it is 0."""
        return self.max_depth or _dtypes.MAX_TREE_DEPTH

    @property
    def quantile_alphas(self) -> tuple[float, ...]:
        """``quantile_alpha`` as a tuple (one entry for one quantile)."""
        alpha = self.quantile_alpha
        return tuple(alpha) if isinstance(alpha, tuple) else (alpha,)

    @property
    def multiclass(self) -> bool:
        """Whether the outputs are classes (multi:softprob, multi:softmax)."""
        return self.objective in objectives.MULTICLASS

    @property
    def n_groups(self) -> int:
        """Margins (and trees) per row and round: the classes, the quantiles of
        reg:quantileerror, else 1."""
        if self.multiclass:
            return int(self.num_class)
        if self.objective == "reg:quantileerror":
            return len(self.quantile_alphas)
        return 1

    @property
    def metrics(self) -> tuple[str, ...]:
        """The names of the metrics evaluated: ``eval_metric``, or the objective's default."""
        if self.eval_metric is not None:
            return self.eval_metric
        return () if self.disable_default_eval_metric else (self.loss.default_metric,)

    def metric_list(self) -> list:
        """The ``metrics.Metric`` of every name in ``metrics`` (made anew: they hold functions,
        which are not kept on the parameters that travel to Dask workers)."""
        return [metrics.metric(name, self) for name in self.metrics]

    def to_dict(self, categorical: bool = True) -> dict:
        """The parameters as a dict; without ``categorical`` the categorical ones are left out
        (a model without categorical features: they had no effect on it)."""
        d = dataclasses.asdict(self)
        if not categorical:
            for name in CATEGORICAL:
                del d[name]
        d["eval_metric"] = list(self.eval_metric) if self.eval_metric is not None else None
        if self.missing is None:  # XGBoost's default: model files without it keep their bytes
            del d["missing"]
        for name in ("colsample_bylevel", "colsample_bynode"):  # likewise
            if getattr(self, name) == 1.0:
                del d[name]
        if self.grow_policy == "depthwise" and self.max_leaves == 0:  # likewise
            del d["grow_policy"], d["max_leaves"]
        if self.sampling_method == "uniform":  # likewise
            del d["sampling_method"]
        if self.feature_types is not None:
            d["feature_types"] = list(self.feature_types)
        for name in ("max_delta_step", "monotone_constraints",
                     "interaction_constraints", "feature_types"):  # likewise
            if getattr(self, name) is None:
                del d[name]
        for name in RANKING:  # likewise, where they keep their defaults
            if getattr(self, name) == _RANKING_DEFAULTS[name]:
                del d[name]
        if isinstance(self.monotone_constraints, tuple):
            d["monotone_constraints"] = list(self.monotone_constraints)
        if isinstance(self.quantile_alpha, tuple):  # one quantile keeps its number: old files
            d["quantile_alpha"] = list(self.quantile_alpha)
        if self.interaction_constraints is not None:
            d["interaction_constraints"] = [list(group) for group in
                                            self.interaction_constraints]
        del d["verbosity"]  # how a run talks, not what it trains
        return d


KNOWN = tuple(f.name for f in dataclasses.fields(Params))
# parameters that never change a model (where and how fast it trains): model files leave them
# out (the same file whatever the device or thread count), a resumed training may set them
# otherwise
RUN_TIME = ("device", "device_memory_limit", "nthread")
RANKING = ("lambdarank_num_pair_per_sample", "lambdarank_normalization",
           "lambdarank_score_normalization", "ndcg_exp_gain")
_RANKING_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Params) if f.name in RANKING}
CATEGORICAL = ("enable_categorical", "max_cat_to_onehot", "max_cat_threshold", "cat_smooth",
               "cat_l2", "cat_noise_penalty")


def _unknown(name) -> ValueError:
    if name in ELSEWHERE:
        return ValueError(f"unknown parameter {name!r}: {ELSEWHERE[name]}")
    choices = list(KNOWN) + list(ALIASES)
    close = difflib.get_close_matches(str(name), choices, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else \
        f"; known parameters: {', '.join(sorted(KNOWN))}"
    return ValueError(f"unknown parameter {name!r}{hint}")


def make_params(user: dict | None = None, **overrides) -> Params:
    """Validate a user's parameter dict (aliases allowed) into ``Params``; errors name the
    parameter."""
    if isinstance(user, Params):
        user = {k: v for k, v in dataclasses.asdict(user).items() if v is not None}
    if isinstance(user, (list, tuple)):
        user = params_from_pairs(user)
    if user is not None and not isinstance(user, dict):
        raise TypeError(f"params must be a dict of parameter names to values, got "
                        f"{type(user).__name__}")
    merged: dict = {}
    for source in (user or {}, overrides):
        spelled: dict = {}  # canonical name -> the name used for it in this source
        for name, value in source.items():
            if not isinstance(name, str):
                raise TypeError(f"parameter names must be strings, got {name!r}")
            canonical = ALIASES.get(name, name)
            if canonical in FIXED:
                accepted, why = FIXED[canonical]
                # True == 1 in Python: a flag where a count is meant is refused (XGBoost
                # refuses "True" for an integer; 1 for a flag it reads as true, and so do we)
                flag_for_count = isinstance(value, bool) and not isinstance(accepted[0], bool)
                if value not in accepted or isinstance(value, float) or flag_for_count:
                    raise ValueError(f"parameter {canonical}={value!r} is not supported: {why} "
                                     f"({canonical} may be {' or '.join(map(repr, accepted))})")
                continue
            if canonical not in KNOWN:
                raise _unknown(name)
            if canonical in spelled:
                raise ValueError(f"parameter {canonical} given twice (as {spelled[canonical]!r} "
                                 f"and as {name!r}); keep one")
            spelled[canonical] = name
            merged[canonical] = value
    p = {}
    if "quantile_alpha" in merged:
        alphas = quantile_alphas(merged["quantile_alpha"])
        # one quantile (a list of one included) is the number itself: its model files and
        # everything else stay as they were before lists were taken
        p["quantile_alpha"] = alphas[0] if len(alphas) == 1 else alphas
    # (name, kind, low, high, interval): "(" / ")" exclude the bound, "[" / "]" include it
    for name, kind, low, high, interval in [
        ("learning_rate", float, 0, math.inf, "(]"),
        ("max_depth", int, 0, _dtypes.MAX_TREE_DEPTH, "[]"),
        ("min_child_weight", float, 0, math.inf, "[]"), ("gamma", float, 0, math.inf, "[]"),
        ("reg_lambda", float, 0, math.inf, "[]"), ("reg_alpha", float, 0, math.inf, "[]"),
        ("subsample", float, 0, 1, "(]"), ("colsample_bytree", float, 0, 1, "(]"),
        ("colsample_bylevel", float, 0, 1, "(]"), ("colsample_bynode", float, 0, 1, "(]"),
        ("verbosity", int, 0, 3, "[]"),
        ("max_bin", int, 3, 65536, "[]"), ("seed", int, -(2**63), 2**63 - 1, "[]"),
        ("sparse_threshold", float, 0, 1, "[]"), ("huber_slope", float, 0, math.inf, "(]"),
        ("scale_pos_weight", float, 0, math.inf, "(]"),
        ("tweedie_variance_power", float, 1, 2, "()"),
        ("max_cat_to_onehot", int, 1, 2**31 - 1, "[]"),
        ("max_cat_threshold", int, 1, 2**31 - 1, "[]"),
        ("cat_smooth", float, 0, math.inf, "[]"), ("cat_l2", float, 0, math.inf, "[]"),
        ("cat_noise_penalty", float, 0, math.inf, "[]"),
        ("max_delta_step", float, 0, math.inf, "[]"), ("max_leaves", int, 0, 2**31 - 1, "[]"),
    ]:
        if name not in merged or (name in ("sparse_threshold", "max_delta_step") and
                                  merged[name] is None):
            continue
        v = as_number(name, merged[name], kind)
        low_open, high_open = interval[0] == "(", interval[1] == ")"
        if v < low or v > high or (low_open and v == low) or (high_open and v == high):
            if high == math.inf:
                bound = f"be {'>' if low_open else '>='} {low}"
            else:
                bound = f"lie in {interval[0]}{low}, {high}{interval[1]}"
            raise ValueError(f"parameter {name} must {bound}, got {merged[name]!r}")
        p[name] = v
    monotone = weight_bounds.parse_monotone(merged.get("monotone_constraints"))
    if monotone:  # () and {} constrain nothing
        p["monotone_constraints"] = monotone
    interaction_sets = interactions.parse_interactions(merged.get("interaction_constraints"))
    if interaction_sets is not None:
        p["interaction_constraints"] = interaction_sets
    p.update(_growth_params(merged, p))
    if merged.get("device_memory_limit") is not None:
        p["device_memory_limit"] = parse_bytes("device_memory_limit",
                                               merged["device_memory_limit"])
    if merged.get("nthread") is not None:
        threads = as_number("nthread", merged["nthread"], int)
        p["nthread"] = threads if threads > 0 else None  # XGBoost's 0, scikit-learn's -1: all
    objective = merged.get("objective", Params.objective)
    if not isinstance(objective, str):
        raise TypeError(f"parameter objective must be a string such as 'reg:squarederror', got "
                        f"{type(objective).__name__} {objective!r}")
    if objective in objectives.NOT_YET:
        raise ValueError(f"objective {objective!r} is not supported by this version of gbflow "
                         f"(supported: {', '.join(objectives.OBJECTIVES)})")
    if objective not in objectives.OBJECTIVES:
        close = difflib.get_close_matches(str(objective), objectives.OBJECTIVES, n=1, cutoff=0.4)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"objective {objective!r} is not supported{hint} "
                         f"(supported: {', '.join(objectives.OBJECTIVES)})")
    p["objective"] = objective
    if isinstance(p.get("quantile_alpha"), tuple) and objective != "reg:quantileerror":
        raise ValueError(f"parameter quantile_alpha lists {len(p['quantile_alpha'])} quantiles, "
                         f"which only objective reg:quantileerror trains (one output per "
                         f"quantile); the objective is {objective}: give one quantile")
    num_class = merged.get("num_class")
    if objective in objectives.MULTICLASS:
        if num_class is None:
            raise ValueError(f"objective {objective} needs the parameter num_class (the number "
                             "of classes, e.g. num_class=3)")
        num_class = as_number("num_class", num_class, int)
        if num_class < 2:
            raise ValueError(f"parameter num_class must be at least 2, got {num_class}")
        p["num_class"] = num_class
    elif num_class not in (None, 1):
        raise ValueError(f"parameter num_class={num_class!r} only goes with "
                         f"{' or '.join(objectives.MULTICLASS)} (the objective is {objective})")
    if merged.get("base_score") is not None:
        base_score = as_number("base_score", merged["base_score"])
        if abs(base_score) > _dtypes.TARGET_LIMIT:
            raise ValueError(f"parameter base_score={base_score:g} is beyond +-2**62 (about "
                             f"4.6e18), the largest label gbflow trains on; rescale the label")
        if objective not in objectives.MULTICLASS:
            objectives.get_objective(objective).base_score_margin(base_score)  # its link's range
        p["base_score"] = base_score
    p["device"] = device_name(merged.get("device", Params.device), DEVICES)
    missing = merged.get("missing")
    is_nan = isinstance(missing, float) and math.isnan(missing)  # always missing: nothing to add
    if missing is not None and not is_nan:
        p["missing"] = as_number("missing", missing, float)
        if abs(p["missing"]) >= _FLOAT32_INFINITE:
            raise ValueError(f"parameter missing={missing!r} is beyond float32's range: features "
                             f"are float32 (as XGBoost's), so it would stand for infinity")
    for name in ("disable_default_eval_metric", "enable_categorical"):
        flag = flag_value(merged, name)
        if flag is not None:
            p[name] = flag
    feature_types = parse_feature_types(merged.get("feature_types"),
                                        p.get("enable_categorical", True))
    if feature_types is not None:
        p["feature_types"] = feature_types
    p.update(_ranking_params(merged, objective))
    metric = merged.get("eval_metric")
    if metric is not None:
        if isinstance(metric, str):
            names = (metric,)
        elif isinstance(metric, (list, tuple)) and all(isinstance(m, str) for m in metric):
            names = tuple(metric)
        else:
            raise TypeError(f"parameter eval_metric must be a metric name or a list of them, "
                            f"got {metric!r}")
        if not names:
            raise ValueError("parameter eval_metric is an empty list; leave it out for the "
                             "objective's default metric")
        multiclass = objective in objectives.MULTICLASS
        # several quantiles: one output each, which a row metric averages over (XGBoost's)
        quantiles = len(p["quantile_alpha"]) if isinstance(p.get("quantile_alpha"), tuple) \
            else 1
        seen = set()
        for name in names:
            m = metrics.metric(name)
            if not metrics.fits_objective(m, multiclass, quantiles):
                fitting = [n for n in metrics.METRICS
                           if metrics.fits_objective(metrics.metric(n if n != "tweedie-nloglik"
                                                                    else n + "@1.5"),
                                                     multiclass, quantiles)]
                kind = "one output per class" if multiclass else \
                    f"{quantiles} quantiles, a metric averaged over their outputs" \
                    if quantiles > 1 else "one output"
                raise ValueError(f"eval_metric {name!r} does not fit objective {objective} "
                                 f"({kind}; use one of {', '.join(fitting)})")
            if m.name in seen:
                raise ValueError(f"eval_metric lists {m.name!r} twice")
            seen.add(m.name)
        p["eval_metric"] = names
    return Params(**p)


def _growth_params(merged: dict, checked: dict) -> dict:
    """grow_policy and sampling_method, checked, and XGBoost's rule that max_depth and max_leaves
    may not both be 0 (``checked``: the numbers already validated)."""
    p = {}
    for name, choices in (("grow_policy", ("depthwise", "lossguide")),
                          ("sampling_method", ("uniform", "gradient_based"))):
        value = merged.get(name)
        if value is not None:
            if value not in choices:
                raise ValueError(f"parameter {name} must be {' or '.join(map(repr, choices))}, "
                                 f"got {value!r}")
            p[name] = value
    if checked.get("max_depth", Params.max_depth) == 0 and not checked.get("max_leaves"):
        raise ValueError("parameter max_depth=0 (no depth limit) needs max_leaves > 0 to stop "
                         "the trees (XGBoost's rule), e.g. grow_policy='lossguide', "
                         "max_leaves=255")
    return p


def _ranking_params(merged: dict, objective: str) -> dict:
    """The learning-to-rank parameters given, checked (XGBoost's names); the pair method and
    debiasing are ``FIXED``."""
    p = {}
    if merged.get("lambdarank_num_pair_per_sample") is not None:
        k = as_number("lambdarank_num_pair_per_sample", merged["lambdarank_num_pair_per_sample"],
                    int)
        if not 1 <= k <= 2**20:
            raise ValueError(f"parameter lambdarank_num_pair_per_sample must lie in [1, 2**20], "
                             f"got {k}")
        p["lambdarank_num_pair_per_sample"] = k
    for name in ("lambdarank_normalization", "lambdarank_score_normalization", "ndcg_exp_gain"):
        flag = flag_value(merged, name)
        if flag is not None:
            p[name] = flag
    given = [name for name in RANKING if name in merged and name != "ndcg_exp_gain" and
             merged[name] != _RANKING_DEFAULTS[name]]  # ndcg_exp_gain: the ndcg metric's too
    if given and objective not in objectives.RANKING:
        raise ValueError(f"parameter {given[0]} only goes with the ranking objectives "
                         f"({', '.join(objectives.RANKING)}); the objective is {objective}")
    return p
