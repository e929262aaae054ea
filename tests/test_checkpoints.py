"""Checkpoints: a training killed after a checkpoint and run again resumes from it and ends with
the model file (and evaluation history) of an uninterrupted run."""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import make_table

import gbflow
from gbflow import resume

CASES = {
    "binary, early stopping, sampling, metric_period": dict(
        task="binary", rounds=40, early_stopping_rounds=25, metric_period=2,
        params={"objective": "binary:logistic", "max_depth": 3, "subsample": 0.8,
                "colsample_bytree": 0.7, "eval_metric": ["logloss", "auc"],
                "learning_rate": 0.1}),
    "regression, no evaluation set": dict(
        task="regression", rounds=12, params={"max_depth": 4, "subsample": 0.7}),
    "multiclass": dict(task="multiclass", rounds=9,
                       params={"objective": "multi:softprob", "num_class": 3, "max_depth": 3}),
}


class Killed(Exception):
    """Stands for the process dying right after a checkpoint was written."""


def _kill_after(monkeypatch, rounds: int) -> None:
    write = resume.write

    def write_then_die(checkpoint, state):
        write(checkpoint, state)
        if state.rounds >= rounds and not state.finished:
            raise Killed(state.rounds)

    monkeypatch.setattr(resume, "write", write_then_die)


def _train(case, df, valid, path, device, **extra):
    evals = [(valid, "valid")] if "early_stopping_rounds" in case else None
    return gbflow.train(df, label="y", params={**case["params"], "device": device},
                        num_boost_round=case["rounds"], evals=evals,
                        early_stopping_rounds=case.get("early_stopping_rounds"),
                        metric_period=case.get("metric_period", 1), verbose=False,
                        checkpoint=path, **extra)


@pytest.mark.parametrize("name", list(CASES))
def test_a_killed_training_run_again_gives_the_uninterrupted_model(name, device, tmp_path,
                                                                   monkeypatch):
    case = CASES[name]
    df = make_table(n_rows=2000, task=case["task"], seed=61)
    valid = make_table(n_rows=600, task=case["task"], seed=62)
    whole = _train(case, df, valid, None, device)
    path = tmp_path / "job.json"
    with monkeypatch.context() as m:
        _kill_after(m, 5)
        with pytest.raises(Killed):
            _train(case, df, valid, (path, 3), device)
    written = json.loads(path.read_text())
    assert len(written["trees"]) == 6 * (3 if case["task"] == "multiclass" else 1)
    partial = gbflow.load_model(path)  # a checkpoint is a model file of its rounds
    np.testing.assert_array_equal(partial.predict(valid, output_margin=True),
                                  whole.predict(valid, output_margin=True,
                                                iteration_range=(0, 6)))
    fit, calls = gbflow.boosting.fit, []

    def counting_fit(*args, **kwargs):
        calls.append((args[3], kwargs["resume"].rounds if kwargs.get("resume") else 0))
        return fit(*args, **kwargs)

    monkeypatch.setattr(gbflow.boosting, "fit", counting_fit)
    rest = _train(case, df, valid, (path, 3), device)
    assert calls == [(case["rounds"] - 6, 6)]  # resumed: only the rounds left were trained
    assert rest.to_json() == whole.to_json()
    assert rest.evals_result == whole.evals_result
    assert rest.eval_rounds == whole.eval_rounds
    assert json.loads(path.read_text())["training_state"]["finished"] is True
    again = _train(case, df, valid, (path, 3), device)  # finished: the model, no training
    assert len(calls) == 1
    assert again.to_json() == whole.to_json() and again.evals_result == whole.evals_result


def test_early_stopping_reached_before_the_kill_is_kept(tmp_path, monkeypatch):
    """A run killed after early stopping had already found its best round, resumed, stops at
    the same round as an uninterrupted one (the history is replayed)."""
    df = make_table(n_rows=1500, task="binary", seed=63)
    valid = make_table(n_rows=500, task="binary", seed=64)
    kwargs = dict(label="y", params={"objective": "binary:logistic", "max_depth": 3,
                                     "learning_rate": 0.5},
                  num_boost_round=200, evals=[(valid, "valid")], early_stopping_rounds=6,
                  verbose=False)
    whole = gbflow.train(df, **kwargs)
    stop = whole.num_boosted_rounds()
    assert whole.best_iteration + 6 + 1 == stop < 200
    path = tmp_path / "job.json"
    with monkeypatch.context() as m:
        _kill_after(m, stop - 2)
        with pytest.raises(Killed):
            gbflow.train(df, checkpoint=(path, 1), **kwargs)
    rest = gbflow.train(df, checkpoint=(path, 1), **kwargs)
    assert rest.to_json() == whole.to_json() and rest.best_iteration == whole.best_iteration


@pytest.mark.parametrize("change, match", [
    (dict(params={"max_depth": 5}), r"parameter max_depth=3 there, 5 here"),
    (dict(num_boost_round=7), r"num_boost_round=6 there, 7 here"),
    (dict(rows=900), r"1000 training rows there, 900 here"),
    (dict(evals=True), r"evaluation sets \[\] there, \['train'\] here"),
    (dict(early_stopping_rounds=3), r"parameter early_stopping_rounds=None there, 3 here"),
])
def test_a_checkpoint_of_another_training_is_refused(tmp_path, change, match):
    df = make_table(n_rows=1000, seed=65)
    path = tmp_path / "job.json"
    gbflow.train(df, label="y", params={"max_depth": 3}, num_boost_round=6, verbose=False,
                 checkpoint=path)
    before = path.read_bytes()
    data = df.iloc[:change.get("rows", 1000)]
    with pytest.raises(ValueError, match=rf"checkpoint '.*job\.json' was written by another "
                                         rf"training \(.*{match}"):
        gbflow.train(data, label="y", params=change.get("params", {"max_depth": 3}),
                     num_boost_round=change.get("num_boost_round", 6), verbose=False,
                     evals=[(data, "train")] if change.get("evals") or
                     change.get("early_stopping_rounds") else None, checkpoint=path,
                     early_stopping_rounds=change.get("early_stopping_rounds"))
    assert path.read_bytes() == before  # left as it was


def test_checkpoint_arguments_are_checked(tmp_path):
    df = make_table(n_rows=200, seed=66)
    with pytest.raises(FileNotFoundError, match=r"folder .*nowhere.* does not exist"):
        gbflow.train(df, label="y", checkpoint=tmp_path / "nowhere" / "job.json")
    with pytest.raises(ValueError, match=r"checkpoint period must be a whole number"):
        gbflow.train(df, label="y", checkpoint=(tmp_path / "job.json", 0))
    with pytest.raises(TypeError, match=r"checkpoint must be a file path"):
        gbflow.train(df, label="y", checkpoint=3)
    booster = gbflow.train(df, label="y", num_boost_round=2, verbose=False)
    with pytest.raises(ValueError, match=r"checkpoint and xgb_model do not go together"):
        gbflow.train(df, label="y", checkpoint=tmp_path / "job.json", xgb_model=booster)
    booster.save_model(tmp_path / "model.json")  # a model file, not a checkpoint
    with pytest.raises(ValueError, match=r"is a gbflow model but not a checkpoint"):
        gbflow.train(df, label="y", checkpoint=tmp_path / "model.json")
    assert not (tmp_path / "job.json").exists()


def test_checkpoint_object_and_period(tmp_path, monkeypatch):
    df = make_table(n_rows=500, seed=67)
    written = []
    write = resume.write
    monkeypatch.setattr(resume, "write", lambda c, s: (written.append(s.rounds), write(c, s)))
    gbflow.train(df, label="y", num_boost_round=10, verbose=False,
                 checkpoint=gbflow.Checkpoint(str(tmp_path / "job.json"), period=4))
    assert written == [4, 8, 10]  # every 4 rounds, and the finished model


def test_a_checkpoint_keeps_nan_metric_values_and_a_new_thread_count(tmp_path):
    """A metric may be NaN (a custom one here): the checkpoint still writes and resumes; a
    parameter that never changes a model (nthread) may differ on resume."""
    df = make_table(n_rows=600, seed=68)
    kwargs = dict(label="y", num_boost_round=6, verbose=False, evals=[(df, "train")],
                  custom_metric=lambda p, d: ("nan_metric", float("nan")))
    whole = gbflow.train(df, **kwargs)
    first = gbflow.train(df, checkpoint=tmp_path / "job.json", params={"nthread": 1}, **kwargs)
    again = gbflow.train(df, checkpoint=tmp_path / "job.json", params={"nthread": 2}, **kwargs)
    assert first.to_json() == again.to_json()  # the finished checkpoint's model
    assert [t.to_dict() for t in first.trees] == [t.to_dict() for t in whole.trees]
    assert np.isnan(again.evals_result["train"]["nan_metric"]).all()


def test_a_checkpoint_path_expands_the_home_folder(tmp_path, monkeypatch):
    """"~/job.json" is the home folder's file for writing, finding and resuming, as model
    paths are (a literal "~" folder in the working directory is not read)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "work" / "~").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "work")
    df = make_table(n_rows=300, seed=69)
    first = gbflow.train(df, "y", num_boost_round=4, verbose=False, checkpoint="~/job.json")
    assert (tmp_path / "home" / "job.json").exists()
    assert not list((tmp_path / "work" / "~").iterdir())
    again = gbflow.train(df, "y", num_boost_round=4, verbose=False, checkpoint="~/job.json")
    assert again.to_json() == first.to_json()
