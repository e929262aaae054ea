"""Model files are untrusted input: corrupt, crafted, truncated and foreign files get a clear
error from load_model, and whatever load_model accepts predicts without crashing the process."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gbflow  # noqa: E402


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": rng.standard_normal(n), "b": rng.standard_normal(n),
                       "c": pd.Categorical(rng.choice(["x", "y", "z", "w"], n))})
    df.loc[rng.random(n) < 0.2, "a"] = np.nan
    # the class depends on the category and on a: both kinds of split are made
    df["y"] = df["c"].isin(["x", "z"]).astype(int) + (df["a"] > 0.3) + (rng.random(n) < 0.1)
    df["y"] = df["y"].clip(0, 2)
    return df


@pytest.fixture(scope="module")
def frame():
    return _frame(400, 1)


@pytest.fixture(scope="module")
def models(frame):
    """Model files (as dicts) of a binary model on numeric and categorical features, and of a
    three-class model: what the corruptions start from."""
    binary = gbflow.train(frame.assign(y=frame["c"].isin(["x", "z"])), label="y",
                          params={"max_depth": 3, "objective": "binary:logistic",
                                  "max_cat_to_onehot": 1}, num_boost_round=3, verbose=False)
    multi = gbflow.train(frame, label="y", params={"max_depth": 2, "objective": "multi:softprob",
                                                   "num_class": 3}, num_boost_round=2,
                         verbose=False)
    assert any(t.categories for t in binary.trees)  # the categorical sets are exercised
    return {"binary": binary.to_dict(), "multi": multi.to_dict()}


def _load(tmp_path, d_or_text):
    path = tmp_path / "model.json"
    text = d_or_text if isinstance(d_or_text, str) else json.dumps(d_or_text)
    path.write_text(text)
    return gbflow.load_model(path)


def _inner(tree: dict) -> int:
    return next(i for i, f in enumerate(tree["feature"]) if f >= 0)


def _numeric_inner(tree: dict) -> int:
    return next(i for i, f in enumerate(tree["feature"])
                if f >= 0 and i not in tree.get("categorical_nodes", []))


# The faults the issue found: each crashed, corrupted or hung predict, or gave garbage.
@pytest.mark.parametrize("edit, match", [
    (lambda d: d["trees"][0]["left"].__setitem__(_inner(d["trees"][0]), 10**6),
     r"trees\[0\]\.left\[\d+\] is 1000000, outside"),
    (lambda d: d["trees"][1].__setitem__("group", 5), r"trees\[1\]\.group is 5"),
    (lambda d: d["trees"][0].__setitem__("group", 1), r"trees\[0\]\.group is 1"),
    (lambda d: d["trees"][0]["feature"].__setitem__(0, 3), r"trees\[0\]\.feature\[0\] is 3"),
    (lambda d: d["trees"][0]["feature"].__setitem__(0, -7), r"trees\[0\]\.feature\[0\] is -7"),
    (lambda d: d.__setitem__("trees", d["trees"][:-1]), r"not a whole number of rounds"),
    (lambda d: d["base_margin"].append(0.0), r"base_margin has 4 values"),
    (lambda d: d["cuts"]["offsets"].__setitem__(1, 10**9), r"cuts\.offsets"),
    (lambda d: d["cuts"]["values"].__setitem__(0, float("nan")), r"cuts\.values\[0\] is nan"),
    (lambda d: d["trees"][0]["value"].__setitem__(0, "1.0"), r"trees\[0\]\.value\[0\] is '1\.0'"),
    (lambda d: d["trees"][0]["default_left"].__setitem__(0, 1), r"default_left holds values"),
    (lambda d: d["trees"][0]["bin_threshold"].__setitem__(_numeric_inner(d["trees"][0]), 300),
     r"bin_threshold"),
    (lambda d: d.__setitem__("best_iteration", 7), r"best_iteration 7 is not a round"),
    (lambda d: d.__setitem__("feature_names", ["a", "a", "c"]), r"duplicate names"),
])
def test_corrupt_entries_are_named(models, tmp_path, edit, match):
    d = json.loads(json.dumps(models["multi"]))
    edit(d)
    with pytest.raises(ValueError, match=rf"load_model: '.*model\.json' is not a valid gbflow "
                                         rf"model \(.*{match}"):
        _load(tmp_path, d)


def _with_cycle(d):
    """The root's left child made to point back at the root (the right child follows it), with
    every other index still in range: a walk would loop forever."""
    tree = d["trees"][0]
    child = tree["left"][0]
    tree["feature"][child], tree["left"][child], tree["right"][child] = 0, 0, 1
    return d


def _shared_child(d):
    """Tree 0 made a DAG of 7 nodes in gbflow's layout where nodes 1 and 2 share children."""
    tree = d["trees"][0]
    tree.update(feature=[0, 0, 0, -1, -1, -1, -1], left=[1, 3, 3, -1, -1, -1, -1],
                right=[2, 4, 4, -1, -1, -1, -1], bin_threshold=[1, 1, 1, 0, 0, 0, 0],
                threshold=[0.0] * 7, default_left=[True] * 7, value=[0.1] * 7, gain=[1.0] * 7,
                cover=[1.0] * 7, categorical_nodes=[], categories=[])
    return d


@pytest.mark.parametrize("edit, match", [
    (_with_cycle, r"children are not gbflow's layout"),
    (_shared_child, r"node 3 is the child of 2 nodes"),
])
def test_trees_that_are_not_trees_are_refused(models, tmp_path, edit, match):
    d = edit(json.loads(json.dumps(models["binary"])))
    with pytest.raises(ValueError, match=match):
        _load(tmp_path, d)


def _chain(d, n_inner: int):
    """Tree 0 made a chain of ``n_inner`` splits (each node's right child splits again)."""
    n = 2 * n_inner + 1
    feature, left, right = [-1] * n, [-1] * n, [-1] * n
    for k in range(n_inner):
        node = 0 if k == 0 else 2 * k
        feature[node], left[node], right[node] = 1, 2 * k + 1, 2 * k + 2
    cut = d["cuts"]["values"][d["cuts"]["offsets"][1]]
    d["trees"][0].update(feature=feature, left=left, right=right,
                         bin_threshold=[1 if f >= 0 else 0 for f in feature],
                         threshold=[cut if f >= 0 else 0.0 for f in feature],
                         default_left=[True] * n, value=[0.1] * n, gain=[1.0] * n,
                         cover=[1.0] * n, categorical_nodes=[], categories=[])
    return d


def test_tree_depth_is_bounded(models, tmp_path):
    """A crafted chain deeper than max_depth allows (its SHAP paths grow with the depth: a 1 MB
    file of 24,001 nodes asked for more than 8 GB) is refused; depth 30 loads and explains."""
    with pytest.raises(ValueError, match=r"trees\[0\] is deeper than 30 levels"):
        _load(tmp_path, _chain(json.loads(json.dumps(models["multi"])), 31))
    booster = _load(tmp_path, _chain(json.loads(json.dumps(models["multi"])), 30))
    rows = _frame(20, 3).drop(columns="y")
    assert np.isfinite(np.asarray(booster.predict(rows, pred_contribs=True))).all()


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["trees"][0]["value"].__setitem__(0, 10**400), r"beyond float range"),
    (lambda d: d["base_margin"].__setitem__(0, -10**400), r"beyond float range"),
    (lambda d: d["trees"][0]["cover"].__setitem__(0, -1.0), r"cover has negative values"),
    (lambda d: d["trees"][0]["threshold"].__setitem__(_numeric_inner(d["trees"][0]), 123.5),
     r"threshold 123\.5 is not the cut of its bin_threshold"),
    (lambda d: d.update(feature_names=[], categories={},
                        cuts={"max_bin": 256, "offsets": [0], "values": []}),
     r"trees\[0\]\.feature\[\d+\] is \d, outside \[-1, -1\]"),
    (lambda d: d["categories"]["c"].__setitem__(0, float("nan")), r"categories\['c'\] mixes"),
    (lambda d: d["categories"].update(c=[float("nan"), 1.0, 2.0, 3.0]),
     r"categories\['c'\] is not sorted and distinct"),
])
def test_more_crafted_entries_are_named(models, tmp_path, edit, match):
    d = json.loads(json.dumps(models["multi"]))
    edit(d)
    with pytest.raises(ValueError, match=match):
        _load(tmp_path, json.dumps(d))


def test_category_sets_are_checked(models, tmp_path):
    d = json.loads(json.dumps(models["binary"]))
    t, tree = next((i, t) for i, t in enumerate(d["trees"]) if t.get("categorical_nodes"))
    tree["categories"][0] = [0, 9]
    with pytest.raises(ValueError, match=rf"trees\[{t}\]\.categories of node \d+\[1\] is 9, "
                                         rf"outside \[0, 3\]"):
        _load(tmp_path, d)
    tree["categories"][0] = [2, 1]
    with pytest.raises(ValueError, match=r"not ascending and distinct"):
        _load(tmp_path, d)
    d = json.loads(json.dumps(models["binary"]))
    d["categories"]["c"] = ["w", "x", "y", "z", "zz"]  # more categories than the cuts' bins
    with pytest.raises(ValueError, match=r"categories\['c'\] has 5 categories but the cuts"):
        _load(tmp_path, d)


def test_foreign_model_files_are_named(tmp_path, frame):
    xgboost = pytest.importorskip("xgboost")
    X, y = frame[["a", "b"]], frame["y"] > 0
    xgb = xgboost.train({"max_depth": 2}, xgboost.DMatrix(X, y), 2)
    xgb.save_model(tmp_path / "xgb.json")
    with pytest.raises(ValueError, match=r"not a gbflow model file .*XGBoost model"):
        gbflow.load_model(tmp_path / "xgb.json")
    xgb.save_model(tmp_path / "xgb.ubj")
    with pytest.raises(ValueError, match=r"not UTF-8 text.*xgboost\.Booster"):
        gbflow.load_model(tmp_path / "xgb.ubj")
    lightgbm = pytest.importorskip("lightgbm")
    lgb = lightgbm.train({"verbose": -1, "num_leaves": 4}, lightgbm.Dataset(X, y.astype(int)), 2)
    lgb.save_model(tmp_path / "lgb.txt")
    with pytest.raises(ValueError, match=r"not valid JSON .*LightGBM text model"):
        gbflow.load_model(tmp_path / "lgb.txt")


def test_deeply_nested_and_huge_numbers_are_errors(tmp_path):
    with pytest.raises(ValueError, match=r"not valid JSON"):
        _load(tmp_path, "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=r"not valid JSON"):
        _load(tmp_path, '{"format": "gbflow-model", "version": ' + "9" * 10_000 + "}")


# -- fuzzing: random mutations of valid files --------------------------------------------------
_JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70),
    st.sampled_from([-1, 0, 1, 2, 3, 7, 8, 255, 256, 65535, 2**31, -2**31 - 1]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
    st.lists(st.integers(-3, 9), max_size=4), st.dictionaries(st.text(max_size=3), st.none(),
                                                              max_size=2))


def _containers(value, path=()):
    """Every (path, container) of a parsed JSON value, the trees' node arrays included."""
    if isinstance(value, (dict, list)):
        yield path, value
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            yield from _containers(item, path + (key,))


@st.composite
def _mutated(draw, models):
    name = draw(st.sampled_from(sorted(models)))
    d = json.loads(json.dumps(models[name]))
    kind = draw(st.sampled_from(["replace", "replace", "replace", "delete", "insert", "text"]))
    if kind == "text":
        text = json.dumps(d)
        at = draw(st.integers(0, len(text) - 1))
        how = draw(st.sampled_from(["truncate", "byte"]))
        return text[:at] if how == "truncate" else \
            text[:at] + draw(st.sampled_from('0123456789-.,:[]{}"e')) + text[at + 1:]
    containers = [(p, c) for p, c in _containers(d) if c]
    _, container = draw(st.sampled_from(containers))
    key = draw(st.sampled_from(sorted(container) if isinstance(container, dict)
                               else range(len(container))))
    if kind == "replace":
        container[key] = draw(_JSON_VALUES)
    elif kind == "delete":
        del container[key]
    elif isinstance(container, list):
        container.insert(key, draw(_JSON_VALUES))
    else:
        container[draw(st.text(max_size=5))] = draw(_JSON_VALUES)
    return d


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_fuzzed_model_files_never_crash_prediction(models, frame, tmp_path, data):
    """A mutated file either gets load_model's ValueError, or loads and predicts (values,
    leaves and SHAP values) on rows with missing values and unseen categories without error."""
    mutated = data.draw(_mutated(models))
    try:
        booster = _load(tmp_path, mutated)
    except ValueError as e:
        assert str(e).startswith("load_model: "), e
        return
    rows = frame.drop(columns="y").iloc[:50].copy()
    rows["c"] = rows["c"].cat.add_categories(["new"])
    rows.iloc[:5, 2] = "new"
    n_out = booster.output_width()
    assert booster.predict(rows).shape[:1] == (50,)
    assert booster.predict(rows, pred_leaf=True).shape == (50, len(booster.trees))
    contributions = np.asarray(booster.predict(rows, pred_contribs=True))
    assert contributions.shape[0] == 50 and booster.output_width(True) >= 1 and n_out >= 1


def test_model_paths_expand_the_home_folder(tmp_path, monkeypatch):
    """"~/m.json" is the home folder's file when saving and loading, as in XGBoost."""
    monkeypatch.setenv("HOME", str(tmp_path))
    df = _frame(200, 2)
    booster = gbflow.train(df, "y", {"max_depth": 2}, 2, verbose=False)
    booster.save_model("~/m.json")
    assert (tmp_path / "m.json").exists()
    assert gbflow.load_model("~/m.json").to_json() == booster.to_json()
