"""What continuing a model (``xgb_model=``, checkpoints) requires of the new training."""
from __future__ import annotations


def check_continuation(model, params, feature_names: list, categories: dict | None = None,
                       by_value: tuple = ()) -> None:
    """ValueError, before any work, when training cannot continue ``model`` (a ``Booster``)
    with these params and features: another objective, class or quantile count or max_bin (its
    cuts are reused), other features (names and order), other categorical features
    (``categories``: the data's), or other features whose values are their categories
    (``by_value``: the training's, from ``feature_types``)."""
    for name in ("objective", "num_class", "max_bin"):
        theirs, ours = getattr(model.params, name), getattr(params, name)
        if theirs != ours:
            raise ValueError(f"xgb_model was trained with {name}={theirs!r}; training cannot "
                             f"continue it with {name}={ours!r}")
    if model.n_groups != params.n_groups:  # reg:quantileerror's quantiles: one output each
        raise ValueError(f"xgb_model has {model.n_groups} outputs (quantile_alpha="
                         f"{model.params.quantile_alpha!r}); training cannot continue it with "
                         f"{params.n_groups} (quantile_alpha={params.quantile_alpha!r})")
    if list(model.feature_names) != list(feature_names):
        ours, theirs = list(model.feature_names), list(feature_names)
        first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                     min(len(ours), len(theirs)))
        raise ValueError(f"xgb_model's {len(ours)} features differ from the training data's "
                         f"{len(theirs)} (names and order must match): at position {first}, "
                         f"{ours[first] if first < len(ours) else 'none'!r} against "
                         f"{theirs[first] if first < len(theirs) else 'none'!r}")
    if set(model.by_value) != set(by_value):
        raise ValueError(f"xgb_model's features {list(model.by_value)} are categorical by "
                         f"value (feature_types 'c' on numeric columns); this training's are "
                         f"{list(by_value)}: give the same feature_types")
    if categories is not None and set(model.categories) != set(categories):
        raise ValueError(f"xgb_model's categorical features {sorted(model.categories)} differ "
                         f"from the training data's category columns {sorted(categories)}")


# What a continued training takes from the model where its params do not name it (XGBoost's
# model files keep the objective with its parameters, the classes and the feature types): the
# objective's own parameters only with the objective itself (they belong to it), and what the
# kept cuts and features need.
_WITH_THE_OBJECTIVE = ("objective", "num_class", "quantile_alpha", "huber_slope",
                       "tweedie_variance_power", "scale_pos_weight",
                       "lambdarank_num_pair_per_sample", "lambdarank_normalization",
                       "lambdarank_score_normalization", "ndcg_exp_gain")
_OF_THE_DATA = ("max_bin", "feature_types")


def kept_params(model, given: set, objective: str | None) -> dict:
    """The parameters of ``model`` (a ``Booster``) that a training continuing it takes because
    its params do not name them (``given``: the canonical names they set; ``objective``: the
    objective they name, or None): the objective's own parameters (count:poisson's
    max_delta_step among them) when the objective is not named or is the model's, as XGBoost
    keeps an objective's settings; max_bin and feature_types when not named. Values of None
    are left out."""
    same = objective is None or objective == model.params.objective
    names = (_WITH_THE_OBJECTIVE if same else ()) + _OF_THE_DATA
    if same and model.params.objective == "count:poisson":
        names += ("max_delta_step",)  # its hessian's factor (a tree cap elsewhere)
    values = {name: getattr(model.params, name) for name in names if name not in given}
    return {name: value for name, value in values.items() if value is not None}
