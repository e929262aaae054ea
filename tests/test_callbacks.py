"""Training callbacks (XGBoost's TrainingCallback interface)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import make_table

import gbflow
from gbflow.callback import TrainingCallback


class Recorder(TrainingCallback):
    """Records what every hook saw; stops after ``stop_after`` (an epoch) if given."""

    def __init__(self, stop_after=None, stop_before=None):
        self.calls, self.stop_after, self.stop_before = [], stop_after, stop_before

    def before_training(self, model):
        self.calls.append(("before_training", model.num_boosted_rounds()))
        return model

    def before_iteration(self, model, epoch, evals_log):
        self.calls.append(("before_iteration", epoch, model.num_boosted_rounds()))
        return epoch == self.stop_before

    def after_iteration(self, model, epoch, evals_log):
        last = {s: {m: v[-1] for m, v in metrics.items()} for s, metrics in evals_log.items()}
        self.calls.append(("after_iteration", epoch, model.num_boosted_rounds(), last))
        return epoch == self.stop_after

    def after_training(self, model):
        self.calls.append(("after_training", model.num_boosted_rounds()))
        return model


def _data():
    return make_table(n_rows=2000, task="binary", seed=51), \
        make_table(n_rows=500, task="binary", seed=52)


PARAMS = {"objective": "binary:logistic", "max_depth": 3, "eval_metric": ["logloss", "auc"]}


def test_hooks_see_each_rounds_model_and_values(device):
    df, valid = _data()
    recorder = Recorder()
    booster = gbflow.train(df, label="y", params={**PARAMS, "device": device},
                           num_boost_round=4, evals=[(valid, "valid")], verbose=False,
                           callbacks=[recorder])
    assert recorder.calls[0] == ("before_training", 0)
    after = [c for c in recorder.calls if c[0] == "after_iteration"]
    assert [(c[1], c[2]) for c in after] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    for c in after:  # this round's values, as the final history holds them
        epoch, values = c[1], c[3]["valid"]
        assert values == {m: v[epoch] for m, v in booster.evals_result["valid"].items()}
    before = [c for c in recorder.calls if c[0] == "before_iteration"]
    assert [(c[1], c[2]) for c in before] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert recorder.calls[-1] == ("after_training", 4)


def test_a_callback_stops_training_after_or_before_a_round():
    df, valid = _data()
    kwargs = dict(label="y", params=PARAMS, evals=[(valid, "valid")], verbose=False)
    stopped = gbflow.train(df, num_boost_round=10, callbacks=[Recorder(stop_after=2)], **kwargs)
    three = gbflow.train(df, num_boost_round=3, **kwargs)
    assert [t.to_dict() for t in stopped.trees] == [t.to_dict() for t in three.trees]
    assert stopped.evals_result == three.evals_result
    before = gbflow.train(df, num_boost_round=10, callbacks=[Recorder(stop_before=5)],
                          **kwargs)
    assert before.num_boosted_rounds() == 5


def test_epochs_count_a_continued_models_rounds_and_after_training_replaces_the_model():
    df, _ = _data()
    first = gbflow.train(df, label="y", params=PARAMS, num_boost_round=3, verbose=False)
    recorder = Recorder()

    class Swap(TrainingCallback):
        def after_training(self, model):
            return first

    result = gbflow.train(df, label="y", params=PARAMS, num_boost_round=2, verbose=False,
                          xgb_model=first, callbacks=[recorder, Swap()])
    assert [c[1] for c in recorder.calls if c[0] == "after_iteration"] == [3, 4]
    assert recorder.calls[0] == ("before_training", 3)
    assert result is first

    class Bad(TrainingCallback):
        def after_training(self, model):
            return None

    with pytest.raises(TypeError, match="after_training returned a NoneType"):
        gbflow.train(df, label="y", params=PARAMS, num_boost_round=1, verbose=False,
                     callbacks=[Bad()])


@pytest.mark.parametrize("callbacks,match", [
    (Recorder(), "callbacks must be a list"),
    ([lambda *a: False], "callbacks\\[0\\] is a function"),
])
def test_bad_callbacks_are_refused_before_training(callbacks, match):
    df, _ = _data()
    with pytest.raises(TypeError, match=match):
        gbflow.train(df, label="y", num_boost_round=1, callbacks=callbacks, verbose=False)


class StopAfter(TrainingCallback):
    def __init__(self, epoch):
        self.epoch = epoch

    def after_iteration(self, model, epoch, evals_log):
        return epoch == self.epoch


def test_callbacks_on_dask_workers_stop_alike():
    dd = pytest.importorskip("dask.dataframe")
    distributed = pytest.importorskip("distributed")
    df, _ = _data()
    expected = gbflow.train(df, label="y", params=PARAMS, num_boost_round=5, verbose=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        booster = gbflow.train(dd.from_pandas(df, npartitions=3), label="y", params=PARAMS,
                               num_boost_round=20, verbose=False, client=client,
                               callbacks=[StopAfter(4)])
    assert [t.to_dict() for t in booster.trees] == [t.to_dict() for t in expected.trees]
    assert np.isfinite(booster.predict(df.drop(columns="y"))).all()


def test_the_callbacks_share_one_model_whose_attributes_stay():
    """One Booster object at every call (XGBoost's): what a callback sets on it is in the model
    train returns; early stopping's best round is on it, set after the callbacks ran."""
    df, valid = _data()
    seen = []

    class Note(TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            seen.append((model, model.best_iteration))
            model.set_attr(note=f"round {epoch}")
            return False

    booster = gbflow.train(df, label="y", params=PARAMS, num_boost_round=40,
                           evals=[(valid, "valid")], early_stopping_rounds=3, verbose=False,
                           callbacks=[Note()])
    assert len({id(m) for m, _ in seen}) == 1
    assert booster.attr("note") == f"round {booster.num_boosted_rounds() - 1}"
    # every round's callbacks ran, the stopping one's too, before early stopping looked
    assert len(seen) == booster.num_boosted_rounds() < 40
    assert seen[0][1] is None and seen[-1][1] is not None
    assert seen[-1][1] == booster.best_iteration  # (unchanged in the rounds stopping waits)
    # a best round a callback sets (no early stopping) is the model's
    class Best(TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            model.set_attr(best_iteration=str(min(epoch, 2)), best_score="0.5")
            return False

    best = gbflow.train(df, label="y", params=PARAMS, num_boost_round=5, verbose=False,
                        callbacks=[Best()])
    assert (best.best_iteration, best.best_score) == (2, 0.5)


def test_a_stop_ends_the_rounds_calls_and_a_copy_keeps_the_history():
    """The first callback asking to stop ends that round's calls (XGBoost's any()); a copy
    returned by after_training gets the training's evals_result; early_stopping_rounds=0 is
    off, as in XGBoost."""
    df, valid = _data()
    first, second = Recorder(stop_after=1), Recorder()

    class Copy(TrainingCallback):
        def after_training(self, model):
            return model.copy()

    history = {}
    booster = gbflow.train(df, label="y", params=PARAMS, num_boost_round=10,
                           evals=[(valid, "valid")], verbose=False, evals_result=history,
                           callbacks=[first, second, Copy()])
    assert [c[1] for c in first.calls if c[0] == "after_iteration"] == [0, 1]
    assert [c[1] for c in second.calls if c[0] == "after_iteration"] == [0]
    assert booster.num_boosted_rounds() == 2
    assert history == booster.evals_result and len(history["valid"]["auc"]) == 2
    assert booster.eval_rounds == [0, 1]
    unstopped = gbflow.train(df, label="y", params=PARAMS, num_boost_round=6,
                             evals=[(valid, "valid")], verbose=False, early_stopping_rounds=0)
    assert unstopped.num_boosted_rounds() == 6 and unstopped.best_iteration is None
