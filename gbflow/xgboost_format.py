"""gbflow models in XGBoost's JSON model format, for XGBoost, the SHAP library and serving stacks.

XGBoost's trees test ``x < split_condition`` with float32 thresholds and send missing values by
``default_left``: gbflow's own rule, so a written tree routes every row as gbflow does. Node ids
are kept (pred_leaf agrees). What differs: XGBoost keeps leaf values in float32 and adds them in
float32 (gbflow in float64), and stores the base margin in prediction space (a probability for
the logistic objectives), so predictions agree to float32 rounding, not bit for bit.
Categorical splits are written with category codes equal to gbflow's positions in the sorted
category list (``Booster.categories``), and, where every category column holds ASCII strings,
the lists themselves as XGBoost's category record ("cats"), from which XGBoost recodes a
frame's categories by value; every split on a category column is a category set. Features
that ``feature_types`` marks "c" are written with their values as codes, and their value-order
splits' thresholds as values (``categories.export_codes``, ``export_thresholds``): XGBoost
reads the same numbers from the same arrays (its dumps refuse those splits).
"""
from __future__ import annotations

import json
import math
import warnings

import numpy as np

from .categories import export_codes, export_thresholds

# XGBoost's format version written. XGBoost 3.2 reads the bracketed base_score (one per
# output); 3.0.5 and 2.1.4 load the file but ignore it (their predictions are off by the base
# score: a review helper's check)
VERSION = [3, 2, 0]
_ROOT_PARENT = 2147483647  # XGBoost's parent id of a root
# objectives whose base_score XGBoost stores through the inverse of its link (the others, with
# binary:logitraw and binary:hinge, store the margin itself)
_LOGISTIC = ("binary:logistic", "reg:logistic")
_LOG_LINK = ("count:poisson", "reg:gamma", "reg:tweedie", "survival:cox")


def _number(x: float) -> str:
    """A float32 as XGBoost writes parameters: the shortest text that reads back the same."""
    return np.format_float_scientific(np.float32(x), unique=True, trim="-").upper() \
        .replace("E+", "E")


def _objective(params) -> dict:
    name = params.objective
    config = {"name": name}
    if name in ("reg:squarederror", "reg:logistic", "binary:logistic", "binary:logitraw",
                "reg:gamma"):
        config["reg_loss_param"] = {"scale_pos_weight": repr(float(params.scale_pos_weight))}
    elif name == "reg:pseudohubererror":
        config["pseudo_huber_param"] = {"huber_slope": repr(float(params.huber_slope))}
    elif name == "count:poisson":
        # a float32 with 9 significant digits, as XGBoost writes its parameters
        config["poisson_regression_param"] = {
            "max_delta_step": f"{np.float32(params.poisson_delta_step):.9g}"}
    elif name == "reg:tweedie":
        config["tweedie_regression_param"] = {
            "tweedie_variance_power": repr(float(params.tweedie_variance_power))}
    elif name == "reg:quantileerror":  # XGBoost's list of quantiles, one output each
        alphas = params.quantile_alphas
        if list(alphas) != sorted(alphas):
            warnings.warn(f"quantile_alpha {list(alphas)} is not in ascending order: XGBoost "
                          f"3.4 and later refuse to load this model (3.2 takes it); train with "
                          f"the quantiles sorted to export for them", UserWarning, stacklevel=3)
        config["quantile_loss_param"] = {
            "quantile_alpha": f"[{','.join(_number(a) for a in alphas)}]"}
    elif name in ("multi:softprob", "multi:softmax"):
        config["softmax_multiclass_param"] = {"num_class": str(params.num_class)}
    elif name.startswith("rank:"):  # XGBoost's LambdaRankParam; 4294967295: k not set (32)
        k = params.lambdarank_num_pair_per_sample
        config["lambdarank_param"] = {
            "lambdarank_pair_method": "topk",
            "lambdarank_num_pair_per_sample": str(4294967295 if k is None else k),
            "lambdarank_normalization": str(int(params.lambdarank_normalization)),
            "lambdarank_score_normalization": str(int(params.lambdarank_score_normalization)),
            "lambdarank_unbiased": "0", "lambdarank_bias_norm": "1",
            "ndcg_exp_gain": str(int(params.ndcg_exp_gain))}
    return config


def base_score(objective: str, margin: float) -> float:
    """The base margin in XGBoost's prediction space (the inverse of its ProbToMargin)."""
    if objective in _LOGISTIC:
        return 1.0 / (1.0 + math.exp(-margin))
    if objective in _LOG_LINK:
        return math.exp(margin)
    return margin


def _tree(tree, tree_id: int, n_features: int, codes: dict, columns: dict) -> dict:
    """One tree in XGBoost's layout; codes: ``categories.export_codes``; columns: {feature
    position: category count} of the category columns, whose value-order splits (positions
    below the cut go left) are written as the set of the positions at or above it: XGBoost's
    own trees test a categorical feature by set alone (its dumps refuse anything else)."""
    leaf = tree.feature < 0
    n = tree.n_nodes
    parents = np.full(n, _ROOT_PARENT, dtype=np.int64)
    inner = np.flatnonzero(~leaf)
    parents[tree.left[inner]] = inner
    parents[tree.right[inner]] = inner
    value = tree.value.astype(np.float32)
    condition = np.where(leaf, value, export_thresholds(tree.feature, tree.threshold, codes))
    given = {k: np.asarray(v, dtype=np.int64) for k, v in tree.categories.items()}
    for k in inner:
        f = int(tree.feature[k])
        if f in columns and int(k) not in given:
            positions = np.arange(columns[f], dtype=np.int64)
            given[int(k)] = positions[positions >= tree.threshold[k]]
    nodes = sorted(given)
    sets = [given[k] for k in nodes]
    sets = [codes[int(tree.feature[k])][s] if int(tree.feature[k]) in codes else s
            for k, s in zip(nodes, sets)]
    split_type = np.zeros(n, dtype=np.int64)
    split_type[nodes] = 1
    condition[nodes] = 0.0
    sizes = [len(s) for s in sets]
    return {
        "base_weights": [float(v) for v in value],
        "categories": [int(c) for s in sets for c in s],
        "categories_nodes": [int(k) for k in nodes],
        "categories_segments": [int(x) for x in np.concatenate([[0], np.cumsum(sizes)[:-1]])]
        if nodes else [],
        "categories_sizes": sizes,
        "default_left": [int(d) for d in tree.default_left],
        "id": tree_id,
        "left_children": [int(c) for c in tree.left],
        "loss_changes": [float(np.float32(g)) for g in tree.gain],
        "parents": [int(p) for p in parents],
        "right_children": [int(c) for c in tree.right],
        "split_conditions": [float(c) for c in condition],
        "split_indices": [int(f) if f >= 0 else 0 for f in tree.feature],
        "split_type": [int(t) for t in split_type],
        "sum_hessian": [float(np.float32(c)) for c in tree.cover],
        "tree_param": {"num_deleted": "0", "num_feature": str(n_features),
                       "num_nodes": str(n), "size_leaf_vector": "1"},
    }


def _category_encoding(booster) -> dict | None:
    """XGBoost's record of the category columns' categories (its models' "cats", 3.1 on): each
    feature's categories in gbflow's order (the codes its trees use), so XGBoost recodes a
    frame's categories by value whatever their order; strings as bytes with offsets. None
    unless every category column holds ASCII strings: XGBoost 3.2 mishandles other bytes in
    its record (it sorts them signed), and integer categories must carry the frame's own
    integer type, which the model does not keep. The trees' codes are then positions in the
    sorted categories, as documented."""
    enc, segments, order = [], [0], []
    for name in booster.feature_names:
        values = booster.categories.get(name)
        if values is None or name in booster.by_value:
            enc.append({"offsets": [], "values": []})
            segments.append(segments[-1])
            continue
        values = list(values)
        if not all(isinstance(v, str) and v.isascii() for v in values):
            return None
        data = [v.encode("ascii") for v in values]
        offsets = np.concatenate([[0], np.cumsum([len(b) for b in data], dtype=np.int64)])
        enc.append({"offsets": [int(o) for o in offsets],
                    "values": [int(c) for b in data for c in b]})
        order.extend(sorted(range(len(data)), key=data.__getitem__))
        segments.append(segments[-1] + len(values))
    return {"enc": enc, "feature_segments": segments, "sorted_idx": order}


def to_xgboost_dict(booster) -> dict:
    """The booster as XGBoost's JSON model (a dict for ``json.dumps``). Every gbflow model fits
    the format: its objectives are XGBoost's, its splits XGBoost's numeric and categorical
    tests."""
    params = booster.params
    objective = params.objective
    n_groups = booster.n_groups
    n_features = booster.num_features()
    scores = ",".join(_number(base_score(objective, m)) for m in booster.base_margin)
    attributes = dict(booster.user_attributes)
    if booster.best_iteration is not None:
        attributes["best_iteration"] = str(booster.best_iteration)
    if booster.best_score is not None:
        attributes["best_score"] = repr(float(booster.best_score))
    categorical = set(booster.categories)
    codes = export_codes(booster.feature_names, booster.categories, booster.by_value)
    names = list(booster.feature_names)
    columns = {names.index(name): len(values) for name, values in booster.categories.items()
               if name not in booster.by_value}
    model = {"gbtree_model_param": {"num_parallel_tree": "1",
                                    "num_trees": str(len(booster.trees))},
             "iteration_indptr": list(range(0, len(booster.trees) + 1, n_groups)),
             "tree_info": [int(t.group) for t in booster.trees],
             "trees": [_tree(t, i, n_features, codes, columns)
                       for i, t in enumerate(booster.trees)]}
    encoding = _category_encoding(booster) if columns else None
    if encoding is not None:
        model["cats"] = encoding
    # a model just trained on an array has gbflow's made-up names (f0, f1, ...): XGBoost's own
    # such models have none (their types only where some feature is categorical), and XGBoost
    # refuses to predict an array without names with a model that has some
    types = ["c" if name in categorical else "float" for name in names]
    return {
        "learner": {
            "attributes": attributes,
            "feature_names": [] if booster.made_up_names else names,
            "feature_types": [] if booster.made_up_names and not categorical else types,
            "gradient_booster": {"model": model, "name": "gbtree"},
            "learner_model_param": {
                # (a model without trees: XGBoost would take "1" as a base score still to be
                # estimated, and read the stored one as a margin)
                "base_score": f"[{scores}]",
                "boost_from_average": "1" if booster.trees else "0",
                # classes are XGBoost's num_class, reg:quantileerror's quantiles its targets
                "num_class": str(params.num_class if params.multiclass else 0),
                "num_feature": str(n_features),
                "num_target": str(1 if params.multiclass else n_groups),
            },
            "objective": _objective(params),
        },
        "version": VERSION,
    }


def to_xgboost_json(booster) -> str:
    """``to_xgboost_dict`` as compact JSON text (what XGBoost's ``load_model`` reads)."""
    return json.dumps(to_xgboost_dict(booster), allow_nan=False, separators=(",", ":"),
                      ensure_ascii=False)  # feature names as written: XGBoost keeps "\\u00e9"
