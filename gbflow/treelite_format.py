"""gbflow models as Treelite models, for Treelite's predictor, RAPIDS FIL/nvForest and Triton.

Built with Treelite's model builder: float64 thresholds and leaves (a float32 threshold is exact
in float64, so rows are routed as in training, and the leaves keep gbflow's float64 values),
numerical tests ``x < threshold`` with gbflow's default directions, categorical tests whose
listed categories (positions in ``Booster.categories``, the codes rows must carry; for features
``feature_types`` marks "c", their values: ``categories.export_codes``, as are their
value-order thresholds) go right, the base
margin as Treelite's base score and the objective's link as its postprocessor.
"""
from __future__ import annotations

from .categories import export_codes, export_thresholds

# gbflow objective -> Treelite postprocessor (multi:softmax gives the probabilities, whose
# largest is gbflow's predicted class)
_POSTPROCESSOR = {
    "binary:logistic": "sigmoid", "reg:logistic": "sigmoid", "binary:hinge": "hinge",
    "count:poisson": "exponential", "reg:gamma": "exponential", "reg:tweedie": "exponential",
    "survival:cox": "exponential",
    "multi:softprob": "softmax", "multi:softmax": "softmax",
}


def to_treelite(booster):
    """A ``treelite.Model`` of ``booster`` (every round; see ``Booster.to_treelite``)."""
    try:
        from treelite import model_builder as tb
    except ImportError as e:
        raise ImportError("Booster.to_treelite needs the treelite package (pip install "
                          "treelite, or the gbflow[export] extra)") from e
    n_groups = booster.n_groups
    objective = booster.params.objective
    groups = [int(t.group) for t in booster.trees]
    none = [0] * len(booster.trees)
    if booster.params.multiclass:  # one class per output
        task, targets, classes, target_id, class_id = "kMultiClf", 1, [n_groups], none, groups
    else:  # one target per output: reg:quantileerror's quantiles, else a single one
        task = "kBinaryClf" if _POSTPROCESSOR.get(objective) in ("sigmoid", "hinge") else \
            "kRegressor"
        targets, classes, target_id, class_id = n_groups, [1] * n_groups, groups, none
    builder = tb.ModelBuilder(
        threshold_type="float64", leaf_output_type="float64",
        metadata=tb.Metadata(num_feature=booster.num_features(), task_type=task,
                             average_tree_output=False, num_target=targets, num_class=classes,
                             leaf_vector_shape=(1, 1)),
        tree_annotation=tb.TreeAnnotation(num_tree=len(booster.trees), target_id=target_id,
                                          class_id=class_id),
        postprocessor=tb.PostProcessorFunc(name=_POSTPROCESSOR.get(objective, "identity")),
        base_scores=[float(m) for m in booster.base_margin])
    codes = export_codes(booster.feature_names, booster.categories, booster.by_value)
    for tree in booster.trees:
        thresholds = export_thresholds(tree.feature, tree.threshold, codes)
        builder.start_tree()
        for node in range(tree.n_nodes):
            builder.start_node(node)
            feature = int(tree.feature[node])
            if feature < 0:
                builder.leaf(float(tree.value[node]))
            elif node in tree.categories:
                builder.categorical_test(
                    feature, default_left=bool(tree.default_left[node]),
                    category_list=[int(c) for c in (
                        codes[feature][tree.categories[node]] if feature in codes
                        else tree.categories[node])],
                    category_list_right_child=True, left_child_key=int(tree.left[node]),
                    right_child_key=int(tree.right[node]))
            else:
                builder.numerical_test(
                    feature, float(thresholds[node]),
                    default_left=bool(tree.default_left[node]), opname="<",
                    left_child_key=int(tree.left[node]), right_child_key=int(tree.right[node]))
            builder.gain(float(tree.gain[node])) if feature >= 0 else None
            builder.sum_hess(float(tree.cover[node]))
            builder.end_node()
        builder.end_tree()
    return builder.commit()
