"""Engine properties: determinism (twice, permuted, sharded, reference kernels), exact margins,
objectives, evals and early stopping, sampling, importances, model file round trip."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from conftest import make_table, present_or_missing, record_backends

import gbflow
from gbflow import _dtypes, boosting, grow, inputs, sampling, shards
from gbflow.backend import cuda_available, get_backend, reference_kernels
from gbflow.params import make_params

PARAMS = {
    "regression": {"objective": "reg:squarederror", "max_depth": 4},
    "binary": {"objective": "binary:logistic", "max_depth": 4},
    "multiclass": {"objective": "multi:softprob", "num_class": 3, "max_depth": 4},
}


def _train(df, task, rounds=15, device="cpu", **extra):
    return gbflow.train(df, label="y", params={**PARAMS[task], "device": device, **extra},
                        num_boost_round=rounds, verbose=False)


@pytest.mark.parametrize("task", list(PARAMS))
def test_same_model_twice_and_with_rows_permuted(task, device):
    df = make_table(task=task)
    first = _train(df, task, device=device)
    assert first.to_json() == _train(df, task, device=device).to_json()
    permuted = df.sample(frac=1.0, random_state=3)
    assert _train(permuted, task, device=device).to_json() == first.to_json()


@pytest.mark.parametrize("task", list(PARAMS))
@pytest.mark.parametrize("extra", [{}, {"subsample": 0.7, "colsample_bytree": 0.5},
                                   {"colsample_bytree": 0.8, "colsample_bylevel": 0.5},
                                   {"colsample_bylevel": 0.7, "colsample_bynode": 0.5},
                                   {"subsample": 0.3, "sampling_method": "gradient_based"}])
def test_same_model_on_one_or_many_shards(task, extra, device):
    df = make_table(task=task, seed=4)
    params = make_params({**PARAMS[task], **extra})
    whole = inputs.load(df, "y")
    backend = get_backend(device)
    one = boosting.fit(backend, [whole], params, 12, verbose=False, keep_training_margins=True)
    bounds = [0, 1, 700, 701, 2000, len(df)]  # includes a one-row shard
    parts = [inputs.load(df.iloc[a:b], "y") for a, b in zip(bounds[:-1], bounds[1:])]
    many = boosting.fit(backend, parts, params, 12, verbose=False, keep_training_margins=True)
    assert many.to_json() == one.to_json()
    assert np.array_equal(np.concatenate(many.training_margins), one.training_margins[0])


@pytest.mark.parametrize("task", list(PARAMS))
def test_reference_kernels_give_the_same_model(task, device):
    if device == "cuda" and task != "regression":
        pytest.skip("the GPU's exp() differs from NumPy's in the last bits: test_gpu.py bounds "
                    "the difference")
    df = make_table(n_rows=800, task=task, seed=5)
    fast = _train(df, task, rounds=5, subsample=0.8, device=device)
    with reference_kernels():
        reference = _train(df, task, rounds=5, subsample=0.8)
    assert reference.to_json() == fast.to_json()


@pytest.mark.parametrize("task", list(PARAMS))
def test_training_margins_equal_predicted_margins(task, device):
    """Margins reached in training (on ``device``) equal those predicted on the CPU."""
    df = make_table(task=task, seed=6)
    params = make_params({**PARAMS[task], "max_depth": 6})
    booster = boosting.fit(get_backend(device), [inputs.load(df, "y")], params, 25,
                           verbose=False, keep_training_margins=True)
    predicted = booster.predict(df, output_margin=True)
    predicted = predicted.to_numpy().reshape(len(df), -1)
    assert np.array_equal(predicted, booster.training_margins[0])
    assert not hasattr(_train(df, task, rounds=2), "training_margins")  # not kept by default


def test_prediction_shapes_and_index(device):
    df = make_table(task="multiclass", seed=7)
    df.index = pd.RangeIndex(100, 100 + len(df)) * 3
    booster = _train(df, "multiclass", rounds=5, device=device)
    proba = booster.predict(df)
    assert isinstance(proba, pd.DataFrame) and proba.shape == (len(df), 3)
    assert proba.index.equals(df.index)
    assert np.allclose(proba.sum(axis=1), 1.0)
    out = booster.transform(df.drop(columns="y").assign(id=np.arange(len(df))), name="p")
    assert list(out.columns[-3:]) == ["p_0", "p_1", "p_2"] and "id" in out
    X = df.drop(columns="y").to_numpy()
    assert isinstance(booster.predict(X), np.ndarray)
    assert np.array_equal(booster.predict(X), proba.to_numpy())


def test_binary_predictions_are_probabilities():
    """predict gives sigmoid(margin) (the margins themselves reach beyond [0, 1]), with the
    frame's index, and they rank the rows as the labels do."""
    df = make_table(task="binary", seed=8)
    booster = _train(df, "binary")
    p = booster.predict(df)
    margin = booster.predict(df, output_margin=True)
    assert isinstance(p, pd.Series) and p.index.equals(df.index)
    assert (margin < 0).any() and (margin > 1).any()
    assert np.array_equal(p.to_numpy(), 1.0 / (1.0 + np.exp(-margin.to_numpy())))
    from gbflow.metrics import auc
    assert auc(df["y"].to_numpy(), p.to_numpy()) > 0.75


def test_missing_values_learn_a_default_direction():
    rng = np.random.default_rng(9)
    x = rng.normal(size=4000).astype(np.float32)
    y = np.where(np.isnan(np.where(rng.random(4000) < 0.3, np.nan, x)), 5.0, x)
    x_obs = np.where(y == 5.0, np.nan, x)
    booster = gbflow.train(x_obs[:, None], y, params={"max_depth": 2}, num_boost_round=30,
                           verbose=False)
    pred = booster.predict(np.array([[np.nan], [0.0]], dtype=np.float32))
    assert abs(pred[0] - 5.0) < 0.2 and abs(pred[1]) < 0.5


@pytest.mark.parametrize("level_plans", [False, True])
def test_present_values_split_from_missing_ones(device, level_plans, tmp_path):
    """A column that is 1.0 or missing (one-hot, CSR) is split present versus missing (issue
    F15: it used to be never split), stored as threshold below every value with missing values
    left; training margins equal predicted ones, dense and CSR input give the same model, and
    the model file keeps it."""
    X, y = present_or_missing(n_rows=6000)
    params = make_params({"objective": "binary:logistic", "max_depth": 2, "device": device})
    backend = get_backend(device)
    csr = sp.hstack([sp.csr_matrix(np.nan_to_num(X[:, :1], nan=0.0)),  # 1.0 or absent
                     sp.csr_matrix(X[:, 1:])]).tocsr()
    boosters = []
    for data in (X, csr):
        shardset = shards.ShardSet(backend)
        shardset.level_plans = level_plans
        part = inputs.load(data, y, what="training data")
        booster = boosting.fit(backend, [part], params, 5, verbose=False,
                               keep_training_margins=True, shardset=shardset)
        assert shardset.uses_level_plans == level_plans
        margin = booster.predict(data, output_margin=True)
        assert np.array_equal(np.asarray(margin).reshape(-1, 1), booster.training_margins[0])
        boosters.append(booster)
    assert boosters[0].to_json() == boosters[1].to_json()
    root = boosters[0].trees[0]
    assert root.feature[0] == 0 and root.bin_threshold[0] == 0 and root.default_left[0]
    assert root.threshold[0] == np.float32(_dtypes.BELOW_EVERY_VALUE)
    assert boosters[0].feature_importances("split").get("f0", 0) >= 5
    path = tmp_path / "model.json"
    boosters[0].save_model(path)
    loaded = gbflow.load_model(path)
    assert loaded.to_json() == boosters[0].to_json()
    assert np.array_equal(loaded.predict(X), boosters[0].predict(X))


def test_evals_and_early_stopping(device):
    df = make_table(task="binary", seed=10, n_rows=4000)
    train, valid = df.iloc[:3000], df.iloc[3000:]
    booster = gbflow.train(train, label="y",
                           params={"objective": "binary:logistic", "learning_rate": 0.5,
                                   "eval_metric": ["logloss", "auc"], "device": device},
                           num_boost_round=300, evals=[(train, "train"), (valid, "valid")],
                           early_stopping_rounds=5, verbose=False)
    history = booster.evals_result["valid"]["auc"]
    assert set(booster.evals_result) == {"train", "valid"}
    assert booster.best_iteration == int(np.argmax(history))
    assert len(history) == booster.best_iteration + 6 < 300  # stopped 5 rounds after the best
    assert booster.num_boosted_rounds() == len(history)  # every round kept
    from gbflow.metrics import auc
    assert auc(valid["y"].to_numpy(), booster.predict(valid).to_numpy()) == \
        pytest.approx(booster.best_score, abs=1e-12)


def test_verbose_progress_on_stderr():
    """In a plain script (no logging configured; pytest configures its own, hence the
    subprocess) verbose lines reach stderr through gbflow's handler; verbose=False is silent."""
    import subprocess
    import sys
    script = ("import numpy as np, gbflow\n"
              "X = np.random.default_rng(0).normal(size=(500, 3)).astype(np.float32)\n"
              "y = X[:, 0] * 2\n"
              "gbflow.train(X, y, num_boost_round=10, evals=[((X, y), 'train')], verbose=5)\n"
              "print('--', file=__import__('sys').stderr)\n"
              "gbflow.train(X, y, num_boost_round=3, verbose=False)\n"
              "import logging\n"
              "assert logging.getLogger('gbflow').level == logging.NOTSET  # left alone\n"
              "logging.basicConfig(level=logging.WARNING)  # the application's choice\n"
              "gbflow.train(X, y, num_boost_round=3, evals=[((X, y), 't')], verbose=True)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    err, after = out.stderr.split("--\n")
    lines = err.strip().splitlines()
    assert [line.split("]")[0] for line in lines] == ["[ 1/10", "[ 5/10", "[10/10"]
    assert "train-rmse:" in lines[-1]
    assert after == ""


def test_progress_goes_through_the_gbflow_logger(caplog):
    """Progress lines are INFO records of the "gbflow" logger: an application's logging
    configuration takes them (pytest's caplog here)."""
    import logging
    df = make_table(n_rows=300, seed=5)
    with caplog.at_level(logging.INFO, logger="gbflow"):
        gbflow.train(df, "y", {"max_depth": 2}, 4, evals=[(df, "train")], verbose=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "gbflow"]
    assert [line.split("]")[0] for line in lines] == ["[1/4", "[2/4", "[3/4", "[4/4"]
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "gbflow")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gbflow"):  # no metrics to show: silent, as XGBoost
        gbflow.train(df, "y", {"max_depth": 2}, 4, verbose=True)
    assert caplog.records == []
    with caplog.at_level(logging.INFO, logger="gbflow"):  # an explicit period still prints
        gbflow.train(df, "y", {"max_depth": 2}, 4, verbose=2)
    assert [r.getMessage().split("]")[0] for r in caplog.records] == ["[1/4", "[2/4", "[4/4"]


def test_feature_importances_rank_the_signal():
    df = make_table(seed=11, missing=0)
    booster = _train(df, "regression", rounds=20)
    gain = booster.feature_importances("gain")
    split = booster.feature_importances("split")
    assert max(gain, key=gain.get) == "x0"
    assert all(v > 0 and float(v).is_integer() for v in split.values())
    total = booster.feature_importances("total_gain")
    assert total["x0"] == pytest.approx(gain["x0"] * split["x0"])


def test_sampling_changes_the_model_but_stays_deterministic(device):
    df = make_table(seed=12)
    plain = _train(df, "regression", device=device)
    sampled = _train(df, "regression", subsample=0.5, colsample_bytree=0.5, seed=1, device=device)
    assert sampled.to_json() != plain.to_json()
    assert sampled.to_json() == _train(df, "regression", subsample=0.5, colsample_bytree=0.5,
                                       seed=1, device=device).to_json()
    assert sampled.to_json() != _train(df, "regression", subsample=0.5, colsample_bytree=0.5,
                                       seed=2, device=device).to_json()
    one_feature = _train(df, "regression", colsample_bytree=0.01, device=device)
    assert all(len(set(t.feature[t.feature >= 0])) <= 1 for t in one_feature.trees)


@pytest.mark.parametrize("task", list(PARAMS))
def test_model_file_round_trip(task, tmp_path, device):
    df = make_table(task=task, seed=13)
    booster = _train(df, task, device=device)
    path = tmp_path / "model.json"
    booster.save_model(path)
    loaded = gbflow.load_model(path)
    assert loaded.to_json() == booster.to_json() == path.read_text()
    assert np.array_equal(np.asarray(loaded.predict(df)), np.asarray(booster.predict(df)))
    d = json.loads(path.read_text())
    assert d["format"] == "gbflow-model" and d["version"] == 1
    assert d["feature_names"] == [c for c in df.columns if c != "y"]


def test_weights_matter_and_zero_weight_rows_are_ignored_by_the_cuts(device):
    df = make_table(seed=14)
    w = np.where(df["x0"] > 0, 10.0, 0.1)
    plain = _train(df, "regression", device=device)
    weighted = gbflow.train(df, label="y", weight=w,
                            params={**PARAMS["regression"], "device": device},
                            num_boost_round=15, verbose=False)
    assert weighted.to_json() != plain.to_json()
    assert weighted.base_margin[0] == pytest.approx(np.average(df["y"], weights=w), rel=1e-12)


def test_hyperparameters_act_like_xgboost(device):
    df = make_table(seed=15, missing=0)
    shallow = _train(df, "regression", max_depth=1, device=device)
    assert all(t.n_nodes <= 3 for t in shallow.trees)
    stump_free = _train(df, "regression", gamma=1e9, device=device)
    assert all(t.n_nodes == 1 for t in stump_free.trees)
    heavy = _train(df, "regression", min_child_weight=len(df) / 3, device=device)
    assert all((t.cover[t.feature < 0] >= len(df) / 3).all() for t in heavy.trees)
    alpha = _train(df, "regression", reg_alpha=1e9, device=device)
    assert all(np.all(t.value == 0) for t in alpha.trees)


def test_base_score_and_num_boost_round_zero():
    df = make_table(task="binary", seed=16)
    b = gbflow.train(df, label="y", params={"objective": "binary:logistic", "base_score": 0.25},
                     num_boost_round=0, verbose=False)
    assert np.allclose(b.predict(df), 0.25)
    auto = gbflow.train(df, label="y", params={"objective": "binary:logistic"},
                        num_boost_round=0, verbose=False)
    assert np.allclose(auto.predict(df), df["y"].mean())


def test_level_buffers_reuse_storage_per_parity():
    """Levels' histograms live in two reused buffers per store (even and odd levels), so the
    pool is not fragmented by arrays of every size; a level never shares its parent's."""
    from gbflow.histogram import LevelBuffers
    buffers = LevelBuffers(np)
    a = buffers.take("dense", 1, (4, 3, 16, 2), np.int64)
    b = buffers.take("dense", 0, (8, 3, 16, 2), np.int64)
    assert not np.shares_memory(a, b)
    smaller = buffers.take("dense", 1, (2, 3, 16, 2), np.int64)  # fits: the same storage
    assert np.shares_memory(smaller, a) and smaller.flags.c_contiguous
    assert not np.shares_memory(buffers.take("sparse", 1, (2, 5, 2), np.int64), a)
    larger = buffers.take("dense", 1, (16, 3, 16, 2), np.int64)  # grows: new storage
    assert larger.shape == (16, 3, 16, 2) and not np.shares_memory(larger, a)
    assert buffers.take("dense", 0, (0, 0, 16, 2), np.int64).size == 0


def _assert_same_training(booster, other):
    """The two boosters' model files and training margins are equal, bit for bit (the sign of
    a zero too, which ``np.array_equal`` would not see)."""
    assert booster.to_json() == other.to_json()
    for a, b in zip(booster.training_margins, other.training_margins, strict=True):
        assert np.array_equal(np.asarray(a, dtype=np.float64).view(np.uint64),
                              np.asarray(b, dtype=np.float64).view(np.uint64))


PLANNED_CASES = [
    ("regression", {"max_depth": 6}, None),
    ("binary", {"max_depth": 5, "subsample": 0.7, "colsample_bytree": 0.5}, None),
    ("multiclass", {"max_depth": 3}, None),
    ("regression", {"max_depth": 1}, None),  # the root's split is the last
    ("regression", {"max_depth": 8, "min_child_weight": 30}, None),  # levels stop before 8
    ("regression", {"max_depth": 5, "gamma": 1e6}, None),  # nothing splits
    ("regression", {"max_depth": 7, "gamma": 1.0}, 0),  # every level sized by its parent's splits
    ("binary", {"max_depth": 7}, 4 * 6 * 256 * 16),  # fixed levels, then sized ones
    ("regression", {"max_depth": 6, "max_delta_step": 0.05}, None),  # capped weights
    # line-searched leaves: the planned tree's margins walk it with the searched values
    ("regression", {"max_depth": 6, "objective": "reg:absoluteerror"}, None),
    ("regression", {"max_depth": 5, "objective": "reg:quantileerror", "subsample": 0.7,
                    "quantile_alpha": [0.2, 0.9]}, None),
]


@pytest.mark.parametrize("task,extra,hist_bytes", PLANNED_CASES)
def test_planned_trees_equal_level_by_level_trees(task, extra, hist_bytes, device, monkeypatch):
    """The planned loop (the GPU's default for dense features: one wait for the device a tree)
    grows the same trees and margins as the level-by-level loop, on several shards, also where
    levels are sized by their parent's split count (a small PLANNED_HIST_BYTES)."""
    from gbflow.grow import planned
    if hist_bytes is not None:
        monkeypatch.setattr(planned, "PLANNED_HIST_BYTES", hist_bytes)
    df = make_table(task=task, seed=8)
    params = make_params({**PARAMS[task], **extra})
    backend = get_backend(device)
    bounds = [0, 1, 900, 901, 2000, len(df)]  # includes one-row shards

    def fit(level_plans):
        shardset = shards.ShardSet(backend)
        shardset.level_plans = level_plans
        parts = [inputs.load(df.iloc[a:b], "y") for a, b in zip(bounds[:-1], bounds[1:])]
        booster = boosting.fit(backend, parts, params, 10, verbose=False,
                               keep_training_margins=True, shardset=shardset)
        assert shardset.uses_level_plans == bool(level_plans)
        return booster

    levels, planned = fit(False), fit(True)
    _assert_same_training(planned, levels)
    assert "tree" in planned.timings and "tree" not in levels.timings


WHOLE_CASES = [
    ("regression", {"max_depth": 6}),
    ("binary", {"max_depth": 5, "subsample": 0.7, "colsample_bytree": 0.5,
                "colsample_bylevel": 0.7}),
    ("multiclass", {"max_depth": 3}),
    ("regression", {"max_depth": 1}),  # the root's split is the last
    ("regression", {"max_depth": 8, "min_child_weight": 30, "reg_alpha": 2.0}),  # stops early
    ("regression", {"max_depth": 5, "gamma": 1e6}),  # nothing splits
    ("regression", {"max_depth": 6, "max_delta_step": 0.05}),  # capped weights
    ("regression", {"max_depth": 4, "objective": "reg:absoluteerror"}),  # leaves line-searched
    ("binary", {"max_depth": 4, "max_leaves": 16}),  # a leaf budget that cannot bind
    ("binary", {"max_depth": 5, "sparse_threshold": 0.2}),  # x1 (4 values) in a sparse store
    ("regression", {"max_depth": 6, "sparse_threshold": 0.0,  # every feature sparse
                    "colsample_bylevel": 0.7, "max_delta_step": 0.05}),
    ("multiclass", {"max_depth": 3, "sparse_threshold": 0.2}),
]


@pytest.mark.parametrize("task,extra", WHOLE_CASES)
def test_whole_trees_equal_level_by_level_trees(task, extra):
    """The CPU's whole trees (one compiled call a tree) are the level-by-level loop's trees and
    margins, for every training control they take."""
    df = make_table(task=task, seed=8)
    params = make_params({**PARAMS[task], **extra})

    def fit(whole):
        shardset = shards.ShardSet(get_backend("cpu"))
        shardset.whole_trees = whole
        booster = boosting.fit(shardset.backend, [inputs.load(df, "y")], params, 10,
                               verbose=False, keep_training_margins=True, shardset=shardset)
        assert shardset.grows_whole_trees == whole
        assert len(shardset.stores) == 1 + ("sparse_threshold" in extra)
        stores.append([store.n_features for store in shardset.stores])
        return booster

    stores = []
    levels, whole = fit(False), fit(True)
    _assert_same_training(whole, levels)
    if "sparse_threshold" in extra:  # features split in both stores (all sparse at 0.0)
        assert stores[0] == stores[1] == ([5, 1] if extra["sparse_threshold"] else [0, 6])
    assert "whole trees" in whole.timings and "whole trees" not in levels.timings
    assert "splits" in levels.timings and "splits" not in whole.timings


@pytest.mark.parametrize("extra", [{"monotone_constraints": (1, 0, 0, 0, 0, 0)},
                                   {"colsample_bynode": 0.5}, {"max_leaves": 5},
                                   {"interaction_constraints": [[0, 1], [2, 3, 4, 5]]}])
def test_whole_trees_give_way_where_they_cannot_follow_the_rules(extra):
    """Per-node samples, monotone and interaction constraints and a leaf budget that binds
    are the level-by-level loop's (or best-first's) even where whole trees are on."""
    df = make_table(seed=8)
    booster = gbflow.train(df, "y", {"max_depth": 4, "device": "cpu", **extra}, 3,
                           verbose=False)
    assert "whole trees" not in booster.timings and "splits" in booster.timings


def test_planned_trees_by_default_on_the_gpu_only_with_dense_features(device):
    df = make_table(seed=9)
    for sparse_threshold, dense_only in ((1.0, True), (0.0, False)):
        params = make_params({**PARAMS["regression"], "sparse_threshold": sparse_threshold})
        shardset = shards.ShardSet(get_backend(device))
        boosting.fit(shardset.backend, [inputs.load(df, "y")], params, 2, verbose=False,
                     shardset=shardset)
        assert (len(shardset.stores) > 1) != dense_only
        assert shardset.uses_level_plans == (device == "cuda" and dense_only)


def test_a_progress_bar_on_request(monkeypatch):
    """verbose="bar": a tqdm bar advanced once a round, the metrics as its postfix, closed at
    the end, early stopping included (a stand-in for tqdm records what it is told)."""
    import sys
    import types
    bars = []

    class Bar:
        def __init__(self, total, **kwargs):
            self.total, self.n, self.postfix, self.closed, self.written = total, 0, "", False, []
            bars.append(self)

        def update(self, k):
            self.n += k

        def set_postfix_str(self, text, refresh=True):
            self.postfix = text

        def write(self, text):
            self.written.append(text)

        def close(self):
            self.closed = True

    monkeypatch.setitem(sys.modules, "tqdm.auto", types.SimpleNamespace(tqdm=Bar))
    df = make_table(n_rows=600, seed=6)
    booster = gbflow.train(df, "y", {"learning_rate": 0.9}, 100, evals=[(df.iloc[:200], "v")],
                           early_stopping_rounds=2, verbose="bar")
    [bar] = bars
    assert bar.total == 100 and bar.closed
    assert bar.n == booster.num_boosted_rounds() < 100 and bar.postfix.startswith("v-rmse:")
    assert bar.written and bar.written[0].startswith("early stopping at round")


def test_a_bar_without_tqdm_relays_trues_lines(monkeypatch, caplog):
    """verbose="bar" on a Dask client without tqdm: a warning, then the worker's per-round
    lines thinned to verbose=True's (about 20), not all of them."""
    import logging
    import sys

    from gbflow.progress import Progress
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # importing it fails
    with caplog.at_level(logging.INFO, logger="gbflow"):
        progress = Progress("bar", 100)
        for i in range(100):
            progress.relay(f"[{i + 1:>3}/100] v-rmse:0.5  (0.1s)")
    messages = [r.getMessage() for r in caplog.records]
    assert "needs tqdm" in messages[0]
    assert [m.split("/")[0].strip("[ ") for m in messages[1:]] == \
        ["1"] + [str(k) for k in range(5, 101, 5)]


@pytest.mark.parametrize("verbose", ["Bar", -1, 2.5])
def test_bad_verbose_is_refused_first(verbose):
    with pytest.raises(ValueError, match="verbose must be True, False, a number of rounds"):
        gbflow.train(make_table(n_rows=50), "y", num_boost_round=1, verbose=verbose)


@pytest.mark.parametrize("level_plans", [False, True])
def test_colsample_bylevel_splits_each_depth_on_its_sample_of_the_trees_features(level_plans,
                                                                                device):
    """Every split at depth d uses a feature of level d's sample (drawn from the tree's), and
    the samples differ between levels; planned and level-by-level trees are the same."""
    df = make_table(n_rows=3000, n_features=10, seed=12)
    params = make_params({"max_depth": 5, "colsample_bytree": 0.8, "colsample_bylevel": 0.4,
                          "seed": 3})
    shardset = shards.ShardSet(get_backend(device))
    shardset.level_plans = level_plans
    booster = boosting.fit(shardset.backend, [inputs.load(df, "y")], params, 6, verbose=False,
                           shardset=shardset)
    for r, tree in enumerate(booster.trees):
        levels = sampling.level_samples(sampling.feature_sample(10, 3, r, 0, 0.8), 3, r, 0, 0.4,
                                        5)
        assert (levels.sum(axis=1) == 3).all() and len({row.tobytes() for row in levels}) > 1
        depth = np.zeros(tree.n_nodes, dtype=int)
        for node in range(tree.n_nodes):
            if not tree.is_leaf[node]:
                depth[tree.left[node]] = depth[tree.right[node]] = depth[node] + 1
                assert levels[depth[node], tree.feature[node]]
    if level_plans:  # the planned loop against the level-by-level one
        by_levels = shards.ShardSet(get_backend(device))
        by_levels.level_plans = False
        assert booster.to_json() == boosting.fit(
            by_levels.backend, [inputs.load(df, "y")], params, 6, verbose=False,
            shardset=by_levels).to_json()


def test_colsample_bynode_splits_each_node_on_its_own_sample(device, monkeypatch):
    """Every split uses a feature of its node's sample (drawn from its level's by the node's
    tree id), nodes of one level get different samples, and the planned loop gives way to the
    level-by-level one even where it is asked for."""
    df = make_table(n_rows=3000, n_features=10, seed=13)
    params = make_params({"max_depth": 4, "colsample_bylevel": 0.8, "colsample_bynode": 0.5,
                          "seed": 5})
    booster = boosting.fit(get_backend(device), [inputs.load(df, "y")], params, 5,
                           verbose=False)
    seen = set()
    for r, tree in enumerate(booster.trees):
        sample = sampling.FeatureSample(sampling.level_samples(
            np.ones(10, bool), 5, r, 0, 0.8, 4), 5, r, 0, 0.5)
        depth = np.zeros(tree.n_nodes, dtype=int)
        for node in range(tree.n_nodes):
            if tree.is_leaf[node]:
                continue
            depth[tree.left[node]] = depth[tree.right[node]] = depth[node] + 1
            mask = sample.nodes(depth[node], np.array([node]))[0]
            assert mask.sum() == 4 and mask[tree.feature[node]]
            seen.add(mask.tobytes())
    assert len(seen) > 5
    shardset = shards.ShardSet(get_backend(device))
    shardset.level_plans = True

    def no_plans(*args):
        raise AssertionError("a per-node sample reached the planned loop")
    monkeypatch.setattr(grow, "grow_tree_planned", no_plans)
    asked = boosting.fit(shardset.backend, [inputs.load(df, "y")], params, 5, verbose=False,
                         shardset=shardset)
    assert asked.to_json() == booster.to_json()


def test_verbosity_zero_silences_warnings_and_changes_no_model(caplog):
    """XGBoost's verbosity: 0 drops gbflow's warnings (here the label-also-a-feature warning
    and a logged one) for that training only; the model file is the same at every level."""
    import logging
    import warnings

    from gbflow import progress
    df = make_table(seed=14)
    X = df.drop(columns="y").assign(y=df["y"])  # the label is also a feature column
    models = []
    for level in (0, 1, 3):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            models.append(gbflow.train(X, label=df["y"], params={"verbosity": level},
                                       num_boost_round=2, verbose=False).to_json())
        assert bool([w for w in caught if "also the feature column" in str(w.message)]) == \
            (level >= 1)
    assert models[0] == models[1] == models[2]
    caplog.set_level("WARNING", logger="gbflow")
    with progress.verbosity(0):
        logging.getLogger("gbflow").warning("not shown")
    logging.getLogger("gbflow").warning("shown")
    assert [r.getMessage() for r in caplog.records] == ["shown"]
    with pytest.raises(ValueError, match=r"verbosity must lie in \[0, 3\]"):
        make_params({"verbosity": 4})


@pytest.mark.skipif(cuda_available(), reason="pretends a GPU where there is none")
def test_auto_device_trains_small_host_data_on_the_cpu_where_a_gpu_is_present(monkeypatch):
    """device="auto" with a GPU present: host data of at most AUTO_CPU_CELLS cells trains on
    the CPU (no CuPy asked for); more cells ask for the GPU (here: the error that CuPy or a GPU
    is missing). Without a GPU, "auto" is the CPU at any size. tests/test_gpu.py trains both
    sizes on a real GPU."""
    import gbflow.backend as backends
    limit = backends.AUTO_CPU_CELLS
    assert get_backend("auto", cells=limit + 1).name == "cpu"  # no GPU here
    monkeypatch.setattr(backends, "cuda_available", lambda: True)
    assert get_backend("auto", cells=limit).name == "cpu"
    with pytest.raises(RuntimeError, match="CuPy"):
        get_backend("auto", cells=limit + 1)
    with pytest.raises(RuntimeError, match="CuPy"):
        get_backend("auto")  # cells unknown
    chosen = record_backends(monkeypatch)
    df = make_table(n_rows=2000, seed=3)
    booster = gbflow.train(df, label="y", num_boost_round=3, verbose=False)
    assert chosen == ["cpu"] and booster.num_boosted_rounds() == 3


def test_the_model_file_does_not_depend_on_the_thread_count():
    """The thread count is a run-time choice like the device: trainings on 1 and 2 threads
    write the same file, byte for byte (the trees were always equal)."""
    df = make_table(n_rows=3000, seed=7)
    files = [gbflow.train(df, "y", {"nthread": n, "max_depth": 4}, 5, verbose=False).to_json()
             for n in (1, 2)]
    assert files[0] == files[1]
    assert "nthread" not in files[0]
