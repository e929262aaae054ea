"""Trees as tables and text, XGBoost's way: trees_to_dataframe, dumps and importance scores."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd


def children(tree, node: int) -> tuple[int, int, int]:
    """(yes, no, missing) child ids of an inner node, XGBoost's way: yes is the side of
    ``x < threshold``, or on a categorical split the side its listed categories take (right)."""
    left, right = int(tree.left[node]), int(tree.right[node])
    missing = left if tree.default_left[node] else right
    return (right, left, missing) if node in tree.categories else (left, right, missing)


def split_of(booster, tree, node: int) -> tuple[str, object]:
    """(feature name, the split's value: float threshold, or the list of categories going
    right) of an inner node."""
    name = booster.feature_names[int(tree.feature[node])]
    if node in tree.categories:
        values = booster.categories.get(name)
        chosen = tree.categories[node]
        return name, [values[c].item() if hasattr(values[c], "item") else values[c]
                      for c in chosen] if values is not None else [int(c) for c in chosen]
    return name, float(tree.threshold[node])


IMPORTANCE_TYPES = ("weight", "gain", "cover", "total_gain", "total_cover", "split")


def check_fmap(fmap, where: str) -> None:
    """Refuse a feature map file (XGBoost's ``fmap``, the first argument of its dump and
    importance methods) with a clear error: gbflow's models carry their feature names. A
    positional argument meant for the next parameter (``get_score("gain")``) is named."""
    if fmap in ("", None):
        return
    misplaced = isinstance(fmap, bool) or fmap in IMPORTANCE_TYPES + ("text", "json")
    hint = f"; XGBoost's signature is {where}(fmap='', ...): pass it by keyword" \
        if misplaced else ""
    raise ValueError(f"{where}: feature map files (fmap={fmap!r}) are not taken; the model "
                     f"holds its feature names{hint}")


def trees_to_dataframe(booster) -> pd.DataFrame:
    """One row per node of every tree, XGBoost's columns: Tree, Node, ID ("tree-node"), Feature
    ("Leaf" on leaves), Split (threshold: ``x < Split`` goes Yes), Yes, No, Missing (child ids as
    "tree-node"), Gain (the leaf value on leaves), Cover (hessian sum), Category (on categorical
    splits the categories going Yes)."""
    rows = []
    for t, tree in enumerate(booster.trees):
        for node in range(tree.n_nodes):
            common = {"Tree": t, "Node": node, "ID": f"{t}-{node}",
                      "Cover": float(tree.cover[node])}
            if tree.feature[node] < 0:
                rows.append({**common, "Feature": "Leaf", "Split": np.nan, "Yes": None,
                             "No": None, "Missing": None, "Gain": float(tree.value[node]),
                             "Category": None})
                continue
            name, split = split_of(booster, tree, node)
            yes, no, missing = children(tree, node)
            rows.append({**common, "Feature": name,
                         "Split": np.nan if isinstance(split, list) else split,
                         "Yes": f"{t}-{yes}", "No": f"{t}-{no}", "Missing": f"{t}-{missing}",
                         "Gain": float(tree.gain[node]),
                         "Category": split if isinstance(split, list) else None})
    columns = ["Tree", "Node", "ID", "Feature", "Split", "Yes", "No", "Missing", "Gain", "Cover",
               "Category"]
    return pd.DataFrame(rows, columns=columns)


def _text_tree(booster, tree, with_stats: bool) -> str:
    lines = []

    def visit(node: int, depth: int) -> None:
        indent = "\t" * depth
        # gain and cover as XGBoost prints its float32 statistics (9 significant digits)
        stats = f",cover={float(np.float32(tree.cover[node])):.9g}" if with_stats else ""
        if tree.feature[node] < 0:
            lines.append(f"{indent}{node}:leaf={float(tree.value[node]):.9g}{stats}")
            return
        name, split = split_of(booster, tree, node)
        test = f"{name}:{{{','.join(map(str, split))}}}" if isinstance(split, list) \
            else f"{name}<{split:.9g}"
        yes, no, missing = children(tree, node)
        gain = f",gain={float(np.float32(tree.gain[node])):.9g}" if with_stats else ""
        lines.append(f"{indent}{node}:[{test}] yes={yes},no={no},missing={missing}"
                     f"{gain}{stats}")
        visit(int(tree.left[node]), depth + 1)
        visit(int(tree.right[node]), depth + 1)

    visit(0, 0)
    return "\n".join(lines) + "\n"


def _json_tree(booster, tree, with_stats: bool) -> dict:
    def visit(node: int, depth: int) -> dict:
        out = {"nodeid": node}
        if tree.feature[node] < 0:
            out["leaf"] = float(tree.value[node])
        else:
            name, split = split_of(booster, tree, node)
            yes, no, missing = children(tree, node)
            out.update(depth=depth, split=name,
                       **({"categories": split} if isinstance(split, list)
                          else {"split_condition": split}),
                       yes=yes, no=no, missing=missing)
            if with_stats:
                out["gain"] = float(tree.gain[node])
        if with_stats:
            out["cover"] = float(tree.cover[node])
        if tree.feature[node] >= 0:
            out["children"] = [visit(int(tree.left[node]), depth + 1),
                               visit(int(tree.right[node]), depth + 1)]
        return out

    return visit(0, 0)


def get_dump(booster, with_stats: bool = False, dump_format: str = "text") -> list[str]:
    """One string per tree: XGBoost's text dump (``0:[f<0.5] yes=1,no=2,missing=1``, children
    indented by tabs; categorical tests list the categories going right) or JSON."""
    if dump_format not in ("text", "json"):
        raise ValueError(f"dump_format must be 'text' or 'json', got {dump_format!r}")
    if dump_format == "json":
        return [json.dumps(_json_tree(booster, t, with_stats), indent=2) for t in booster.trees]
    return [_text_tree(booster, t, with_stats) for t in booster.trees]


def dump_model(booster, fout, with_stats: bool = False, dump_format: str = "text") -> None:
    """Write ``get_dump`` to the file ``fout`` (a path): for text, each tree headed by
    ``booster[i]:``; for JSON, one array of the trees."""
    dumps = get_dump(booster, with_stats, dump_format)
    with open(fout, "w", encoding="utf-8") as f:
        if dump_format == "json":
            f.write("[\n" + ",\n".join(dumps) + "\n]\n")
        else:
            for i, text in enumerate(dumps):
                f.write(f"booster[{i}]:\n{text}")
