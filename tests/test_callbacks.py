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


def test_early_stopping_callback_is_xgboosts():
    """XGBoost's EarlyStopping: the same rounds and best round as gbflow's early_stopping_rounds
    on the same watched metric; save_best ends the model at the best round; min_delta,
    data_name and metric_name as XGBoost's; unknown names are errors naming them."""
    from gbflow.callback import EarlyStopping
    df, valid = _data()
    kwargs = dict(label="y", params=PARAMS, num_boost_round=60, verbose=False)
    built_in = gbflow.train(df, evals=[(df, "train"), (valid, "valid")],
                            early_stopping_rounds=3, **kwargs)
    called = gbflow.train(df, evals=[(df, "train"), (valid, "valid")],
                          callbacks=[EarlyStopping(3)], **kwargs)
    assert [t.to_dict() for t in called.trees] == [t.to_dict() for t in built_in.trees]
    assert (called.best_iteration, called.best_score) == \
        (built_in.best_iteration, built_in.best_score)
    saved = gbflow.train(df, evals=[(valid, "valid")],
                         callbacks=[EarlyStopping(3, save_best=True)], **kwargs)
    assert saved.num_boosted_rounds() == saved.best_iteration + 1 == built_in.best_iteration + 1
    # (the history of every round trained, as XGBoost's evals_result)
    assert len(saved.evals_result["valid"]["auc"]) == built_in.num_boosted_rounds()
    # by hand from the history: the first round whose value beats the best by min_delta
    delta = 0.002
    history = gbflow.train(df, evals=[(valid, "valid")], **{**kwargs, "num_boost_round": 40}
                           ).evals_result["valid"]["logloss"]
    best, waited, expected = history[0], 0, None
    for r, value in enumerate(history[1:], 1):
        if best - delta > value:
            best, waited = value, 0
        else:
            waited += 1
            if waited >= 2:
                expected = r
                break
    stopped = gbflow.train(df, evals=[(valid, "valid"), (df, "train")],
                           callbacks=[EarlyStopping(2, metric_name="logloss", data_name="valid",
                                                    min_delta=delta)],
                           **{**kwargs, "num_boost_round": 40})
    assert stopped.num_boosted_rounds() == expected + 1
    assert stopped.best_score == best
    for bad, match in ((EarlyStopping(2, data_name="test"), "no evaluation set named 'test'"),
                       (EarlyStopping(2, metric_name="rmse"), "no metric named 'rmse'")):
        with pytest.raises(ValueError, match=match):
            gbflow.train(df, evals=[(valid, "valid")], callbacks=[bad], **kwargs)


def test_evaluation_monitor_prints_xgboosts_lines():
    from gbflow.callback import EvaluationMonitor
    df, valid = _data()
    lines = []
    booster = gbflow.train(df, label="y", params=PARAMS, num_boost_round=5,
                           evals=[(valid, "valid")], verbose=False,
                           callbacks=[EvaluationMonitor(period=2, logger=lines.append)])
    history = booster.evals_result["valid"]
    assert [line.split("\t")[0] for line in lines] == ["[0]", "[2]", "[4]"]
    assert lines[1] == (f"[2]\tvalid-logloss:{history['logloss'][2]:.5f}"
                        f"\tvalid-auc:{history['auc'][2]:.5f}")


def test_early_stopping_and_the_monitor_count_evaluated_rounds_only():
    """With metric_period, rounds without a new value are not "no improvement": the callback
    stops where early_stopping_rounds does, and the monitor says only evaluated rounds."""
    from gbflow.callback import EarlyStopping, EvaluationMonitor
    df, valid = _data()
    kwargs = dict(label="y", params={**PARAMS, "learning_rate": 0.5}, num_boost_round=80,
                  evals=[(valid, "valid")], verbose=False, metric_period=4)
    built_in = gbflow.train(df, early_stopping_rounds=6, **kwargs)
    lines = []
    called = gbflow.train(df, callbacks=[EvaluationMonitor(logger=lines.append),
                                         EarlyStopping(6)], **kwargs)
    assert called.num_boosted_rounds() == built_in.num_boosted_rounds() < 80
    assert called.best_iteration == built_in.best_iteration
    assert [int(line[1:line.index("]")]) for line in lines] == called.eval_rounds
    # the same monitor watching another training says its lines too
    monitor = EvaluationMonitor(logger=lines.append)
    for _ in range(2):
        lines.clear()
        gbflow.train(df, label="y", params=PARAMS, num_boost_round=1,
                     evals=[(valid, "valid")], verbose=False, callbacks=[monitor])
        assert len(lines) == 1 and lines[0].startswith("[0]")
