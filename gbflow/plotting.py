"""Figures with matplotlib (an optional extra): feature importance, learning curves, one tree."""
from __future__ import annotations

from .model_tables import children, split_of


def _axes(ax, figsize=None):
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("gbflow's plots need matplotlib (pip install matplotlib, or the "
                          "gbflow[plot] extra)") from e
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def plot_importance(booster, ax=None, importance_type: str = "weight",
                    max_num_features: int | None = None, title: str = "Feature importance",
                    xlabel: str | None = None, ylabel: str = "Features", height: float = 0.2,
                    show_values: bool = True, figsize=None):
    """Horizontal bars of ``booster.get_score(importance_type)``, the largest at the top
    (XGBoost's plot_importance). booster: a ``Booster`` or a fitted gbflow estimator. Returns the
    matplotlib Axes."""
    booster = getattr(booster, "booster_", booster)
    scores = booster.get_score(importance_type=importance_type)
    if not scores:
        raise ValueError("plot_importance: the model has no split (every tree is a leaf)")
    ranked = sorted(scores.items(), key=lambda kv: (kv[1], kv[0]))
    if max_num_features is not None:
        ranked = ranked[-int(max_num_features):]
    names, values = zip(*ranked)
    ax = _axes(ax, figsize)
    ax.barh(range(len(values)), values, height=height, align="center")
    if show_values:
        for y, v in enumerate(values):
            ax.text(v, y, f" {v:.4g}", va="center")
    ax.set_yticks(range(len(names)), labels=names)
    ax.set_title(title)
    ax.set_xlabel(xlabel or importance_type)
    ax.set_ylabel(ylabel)
    return ax


def plot_metric(booster, metric: str | None = None, ax=None, title: str = "Metric during training",
                xlabel: str = "Round", ylabel: str | None = None, figsize=None):
    """Learning curves: one line per evaluation set of ``metric`` (default: the first metric
    recorded) against the round (``eval_rounds`` when evaluation ran every few rounds), the best
    round marked when early stopping ran. booster: a Booster, a fitted estimator or an
    ``evals_result`` dict. Returns the matplotlib Axes."""
    if isinstance(booster, dict):
        evals_result = booster
    elif hasattr(booster, "booster_") or hasattr(booster, "evals_result_"):  # an estimator
        evals_result = getattr(booster, "evals_result_", None) or {}
    else:
        evals_result = getattr(booster, "evals_result", {})
    booster = getattr(booster, "booster_", booster)
    if not evals_result:
        raise ValueError("plot_metric: no evaluation results (train with evals=...)")
    metrics = {m for curves in evals_result.values() for m in curves}
    metric = metric or next(iter(next(iter(evals_result.values()))))
    if metric not in metrics:
        raise ValueError(f"plot_metric: metric {metric!r} was not recorded; recorded: "
                         f"{sorted(metrics)}")
    ax = _axes(ax, figsize)
    rounds = getattr(booster, "eval_rounds", None)
    for name, curves in evals_result.items():
        values = curves.get(metric)
        if values is not None:
            x = rounds if rounds is not None and len(rounds) == len(values) \
                else range(len(values))
            ax.plot(list(x), values, label=name)
    best = getattr(booster, "best_iteration", None)
    if best is not None:
        ax.axvline(best, linestyle="--", color="grey", label=f"best round {best}")
    ax.legend()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel or metric)
    return ax


def plot_tree(booster, tree_idx: int = 0, ax=None, with_stats: bool = False, figsize=None,
              fontsize: float = 8):
    """Draw tree ``tree_idx`` (in training order) with matplotlib alone (no graphviz): each
    split as its test, yes/no edges as in ``get_dump``, leaves with their values. Returns the
    matplotlib Axes."""
    booster = getattr(booster, "booster_", booster)
    if not 0 <= tree_idx < len(booster.trees):
        raise ValueError(f"plot_tree: tree_idx {tree_idx} is not a tree of this model (it has "
                         f"{len(booster.trees)})")
    tree = booster.trees[tree_idx]
    ax = _axes(ax, figsize)
    ax.set_axis_off()
    places, next_leaf = {}, [0]

    def place(node: int, depth: int) -> float:
        """Leaves left to right in order, each inner node above the middle of its children."""
        if tree.feature[node] < 0:
            x = next_leaf[0]
            next_leaf[0] += 1
        else:
            x = (place(int(tree.left[node]), depth + 1) +
                 place(int(tree.right[node]), depth + 1)) / 2
        places[node] = (x, -depth)
        return x

    place(0, 0)
    for node, (x, y) in places.items():
        if tree.feature[node] < 0:
            text = f"leaf {float(tree.value[node]):.4g}"
        else:
            name, split = split_of(booster, tree, node)
            text = f"{name} in {split}" if isinstance(split, list) else f"{name} < {split:.4g}"
            text += f"\ngain {float(tree.gain[node]):.4g}" if with_stats else ""
            yes, no, missing = children(tree, node)
            for label, child in (("yes", yes), ("no", no)):
                cx, cy = places[child]
                label += " / missing" if child == missing else ""
                ax.annotate("", xy=(cx, cy + 0.15), xytext=(x, y - 0.15),
                            arrowprops={"arrowstyle": "->", "color": "grey"})
                ax.text((x + cx) / 2, (y + cy) / 2, label, fontsize=fontsize * 0.8,
                        ha="center", color="grey")
        if with_stats:
            text += f"\ncover {float(tree.cover[node]):.4g}"
        ax.text(x, y, text, ha="center", va="center", fontsize=fontsize,
                bbox={"boxstyle": "round", "facecolor": "white"})
    xs = [x for x, _ in places.values()]
    ax.set_xlim(min(xs) - 1, max(xs) + 1)
    ax.set_ylim(min(y for _, y in places.values()) - 0.5, 0.5)
    return ax
