"""The ``gbflow`` command line: train, predict, info, and the exit codes a scheduler sees."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import gbflow
from gbflow.cli import main, output_parts


@pytest.fixture
def folder(tmp_path):
    """A folder of three Parquet parts of one binary table, and the whole table."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3000, 4))
    df = pd.DataFrame(X, columns=list("abcd"))
    df["y"] = (X[:, 0] + 0.5 * X[:, 1] + rng.standard_normal(3000) > 0).astype(np.int64)
    (tmp_path / "data").mkdir()
    for i, part in enumerate(np.array_split(np.arange(3000), 3)):
        df.iloc[part].to_parquet(tmp_path / "data" / f"part{i}.parquet")
    return tmp_path, df


def test_train_writes_the_model_and_report_of_the_same_training_in_python(folder):
    tmp, df = folder
    (tmp / "p.toml").write_text('objective = "binary:logistic"\nmax_depth = 3\n')
    code = main(["train", str(tmp / "data"), "--label", "y", "--params", str(tmp / "p.toml"),
                 "--set", "learning_rate=0.2", "--rounds", "7", "--model", str(tmp / "m.json"),
                 "--report", str(tmp / "r.json"), "--quiet"])
    assert code == 0
    expected = gbflow.train(df, label="y", params={"objective": "binary:logistic",
                                                   "max_depth": 3, "learning_rate": 0.2},
                            num_boost_round=7, verbose=False)
    model = gbflow.load_model(tmp / "m.json")
    assert [t.to_dict() for t in model.trees] == [t.to_dict() for t in expected.trees]
    report = json.loads((tmp / "r.json").read_text())
    assert report["rounds"] == 7 and report["params"]["learning_rate"] == 0.2
    assert "quantize" in report["timings"] and report["seconds"] > 0


def test_evaluation_split_early_stopping_predict_and_info(folder, capsys):
    tmp, df = folder
    assert main(["train", str(tmp / "data" / "*.parquet"), "--label", "y", "--set",
                 "objective=binary:logistic", "--set", 'eval_metric=["logloss","auc"]',
                 "--eval-fraction", "0.25", "--early-stopping", "3", "--rounds", "200",
                 "--model", str(tmp / "m.json"), "--report", str(tmp / "r.json"),
                 "--quiet"]) == 0
    report = json.loads((tmp / "r.json").read_text())
    assert set(report["metrics"]["eval"]) == {"logloss", "auc"}
    # every round trained is kept: the best, then the 3 that did not improve on it
    assert report["rounds"] == report["best_iteration"] + 1 + 3 < 200
    assert main(["predict", str(tmp / "m.json"), str(tmp / "data"), "--output",
                 str(tmp / "scored.csv"), "--name", "p"]) == 0
    scored = pd.read_csv(tmp / "scored.csv")
    assert list(scored.columns) == ["a", "b", "c", "d", "y", "p"] and len(scored) == 3000
    model = gbflow.load_model(tmp / "m.json")
    np.testing.assert_allclose(scored["p"], model.predict(df.drop(columns="y")), rtol=1e-12)
    capsys.readouterr()
    assert main(["info", str(tmp / "m.json")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["objective"] == "binary:logistic" and info["features"] == list("abcd")
    assert info["categorical"] == {} and "cat_smooth" not in info["params"]


def test_csv_codes_become_categorical_features_with_feature_types(tmp_path, capsys):
    """A CSV has no category dtype: feature_types marks its code columns categorical, in
    training and (kept in the model) when the same CSV is scored."""
    rng = np.random.default_rng(2)
    shop = rng.integers(0, 40, 2000) * 5
    x = rng.standard_normal(2000)
    df = pd.DataFrame({"shop": shop, "x": x, "y": rng.normal(size=200)[shop] + 0.5 * x})
    df.to_csv(tmp_path / "d.csv", index=False)
    assert main(["train", str(tmp_path / "d.csv"), "--label", "y", "--set",
                 'feature_types=["c","q"]', "--rounds", "5", "--model",
                 str(tmp_path / "m.json"), "--quiet"]) == 0
    model = gbflow.load_model(tmp_path / "m.json")
    assert model.categories["shop"].tolist() == sorted(set(shop.astype(float)))
    assert any(t.categories for t in model.trees)
    assert main(["predict", str(tmp_path / "m.json"), str(tmp_path / "d.csv"), "--output",
                 str(tmp_path / "p.csv")]) == 0
    capsys.readouterr()
    assert main(["info", str(tmp_path / "m.json")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["categorical"] == {"shop": 40} and info["params"]["feature_types"] == ["c", "q"]
    np.testing.assert_allclose(pd.read_csv(tmp_path / "p.csv")["prediction"],
                               model.predict(df.drop(columns="y")), rtol=1e-12)


@pytest.mark.parametrize("argv,message", [
    (["train", "{tmp}/nowhere", "--label", "y"], "no Parquet or CSV file"),
    (["train", "{tmp}/data", "--label", "y", "--set", "max_depht=3"], "did you mean"),
    (["train", "{tmp}/data", "--label", "zz"], "label column 'zz' is not in"),
    (["train", "{tmp}/data", "--label", "y", "--set", "oops"], "--set takes key=value"),
    (["train", "{tmp}/data", "--label", "y", "--early-stopping", "3"], "needs an evaluation"),
    (["train", "{tmp}/data", "--label", "y", "--params", "{tmp}/none.toml"], "does not exist"),
    (["predict", "{tmp}/none.json", "{tmp}/data", "--output", "{tmp}/o.parquet"],
     "model file"),
    (["train", "{tmp}/data", "--label", "y", "--model", "{tmp}/nodir/m.json"],
     "--model '{tmp}/nodir/m.json': folder"),
    (["train", "{tmp}/data", "--label", "y", "--report", "{tmp}/nodir/r.json", "--model",
      "{tmp}/m.json"], "does not exist; create it first"),
    (["train", "{tmp}/data", "--label", "y", "--model", "{tmp}/data"], "is a folder"),
])
def test_bad_input_exits_2_with_one_line(folder, capsys, argv, message):
    tmp, _ = folder
    code = main([a.format(tmp=tmp) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("gbflow: error:")
    assert message.format(tmp=tmp) in err[0]
    assert not (tmp / "m.json").exists()  # (refused before any training)


def test_outputs_replace_whole_or_are_refused_before_work(folder, capsys, monkeypatch):
    """A Dask output folder replaces an earlier one whole (no old part left among the new);
    a failed write leaves the earlier output as it was; a .csv on Dask, a folder where a file
    goes and a cluster of no worker are refused (exit 2) before any work."""
    import dask.dataframe as dd

    from gbflow.atomic_file import write_through
    from gbflow.dask.files import write_dask
    tmp, df = folder
    out = tmp / "scores"
    write_dask(dd.from_pandas(df, npartitions=5), str(out))
    with pytest.raises(FileExistsError, match="not replaced"):  # (no rule: nothing replaced)
        write_dask(dd.from_pandas(df.iloc[:900], npartitions=3), str(out))
    write_dask(dd.from_pandas(df.iloc[:900], npartitions=3), str(out), output_parts)
    assert sorted(p.name for p in out.iterdir()) == [f"part.{i}.parquet" for i in range(3)]
    assert len(pd.read_parquet(out)) == 900

    def half_then_fail(path):
        with open(path, "w") as f:
            f.write("a,b\n1,")
        raise OSError("disk full")
    target = tmp / "scores.csv"
    target.write_text("old\n")
    with pytest.raises(OSError, match="disk full"):
        write_through(str(target), half_then_fail)
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp.iterdir()) == \
        ["data", "scores", "scores.csv"]
    assert main(["train", f"{tmp}/data", "--label", "y", "--rounds", "2", "--quiet",
                 "--model", f"{tmp}/m.json"]) == 0
    capsys.readouterr()
    for extra, message in ((["--output", f"{tmp}/s.csv", "--local-cluster", "2"],
                            "on Dask the scores are a Parquet folder"),
                           (["--output", f"{tmp}/data"], "is a folder; give a file name")):
        assert main(["predict", f"{tmp}/m.json", f"{tmp}/data", *extra]) == 2
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", f"{tmp}/m.json", f"{tmp}/data", "--output", f"{tmp}/x",
              "--local-cluster", "0"])
    assert exit_info.value.code == 2 and "must be at least 1" in capsys.readouterr().err
    # an existing folder is replaced only when it holds an earlier output's parts, never the
    # input; a file name ending in a separator is refused; a link's target gets the output
    (tmp / "project").mkdir()
    (tmp / "project" / "notes.txt").write_text("keep")
    for output, message in ((tmp / "project", "holding more than an earlier output's part"),
                            (tmp / "data", "holds the input data"),
                            (tmp, "holds the input data")):
        assert main(["predict", f"{tmp}/m.json", f"{tmp}/data", "--output", str(output),
                     "--local-cluster", "1"]) == 2
        assert message in capsys.readouterr().err
    assert (tmp / "project" / "notes.txt").read_text() == "keep"
    assert main(["predict", f"{tmp}/m.json", f"{tmp}/data", "--output", f"{tmp}/o.csv/"]) == 2
    assert "ends with a folder separator" in capsys.readouterr().err
    # a folder named like a part is no part: refused, nothing deleted
    (tmp / "parted" / "part.0.parquet").mkdir(parents=True)
    (tmp / "parted" / "part.0.parquet" / "thesis.txt").write_text("keep")
    assert main(["predict", f"{tmp}/m.json", f"{tmp}/data", "--output", f"{tmp}/parted",
                 "--local-cluster", "1"]) == 2
    assert "holding more than an earlier output's part files" in capsys.readouterr().err
    assert (tmp / "parted" / "part.0.parquet" / "thesis.txt").read_text() == "keep"
    # no output or model over an input, the model or each other; no unknown extension
    part = next((tmp / "data").iterdir())
    for argv, message in (
            (["train", f"{tmp}/data", "--label", "y", "--model", str(part)], "same file as"),
            (["train", f"{tmp}/data", "--label", "y", "--model", f"{tmp}/m2.json", "--report",
              f"{tmp}/m2.json"], "--report .* is the same file as --model"),
            (["predict", f"{tmp}/m.json", str(part), "--output", str(part)],
             "is or holds the input data"),
            (["predict", f"{tmp}/m.json", f"{tmp}/data", "--output", f"{tmp}/m.json"],
             "name it .parquet")):
        assert main(argv) == 2
        assert re.search(message, capsys.readouterr().err)
    # a linked model file is written through: the link stays
    (tmp / "models").mkdir()
    (tmp / "current.json").symlink_to(tmp / "models" / "real.json")
    assert main(["train", f"{tmp}/data", "--label", "y", "--rounds", "2", "--quiet",
                 "--model", f"{tmp}/current.json"]) == 0
    assert (tmp / "current.json").is_symlink() and gbflow.load_model(
        tmp / "models" / "real.json").num_boosted_rounds() == 2
    (tmp / "real.csv").write_text("old\n")
    (tmp / "link.csv").symlink_to(tmp / "real.csv")
    assert main(["predict", f"{tmp}/m.json", f"{tmp}/data", "--output", f"{tmp}/link.csv"]) == 0
    assert (tmp / "link.csv").is_symlink() and len(pd.read_csv(tmp / "real.csv")) == len(df)


def test_the_console_script_and_module_run(folder):
    tmp, _ = folder
    result = subprocess.run([sys.executable, "-m", "gbflow", "train", str(tmp / "data"),
                             "--label", "y", "--rounds", "2", "--model", str(tmp / "m.json"),
                             "--local-cluster", "2", "--quiet"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert gbflow.load_model(tmp / "m.json").num_boosted_rounds() == 2
    bad = subprocess.run([sys.executable, "-m", "gbflow", "train"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "--label" in bad.stderr


# What a process has compiled or loaded: every numba kernel of gbflow's (found among all live
# objects, wherever it is kept) with the signatures it holds, and whether it is cached on disk.
_KERNEL_SIGNATURES = """
import gc
import numba


def kernel_signatures():
    out = {}
    for value in gc.get_objects():
        if (isinstance(value, numba.core.dispatcher.Dispatcher) and value.signatures
                and value.py_func.__module__.startswith("gbflow")):
            name = value.py_func.__module__ + "." + value.py_func.__qualname__
            cached = type(value._cache).__name__ != "NullCache"
            out[name] = (cached, sorted(map(str, value.signatures)))
    return out
"""

_COMPILE_THEN_LIST = _KERNEL_SIGNATURES + """
from gbflow import cli
assert cli.main(["compile"]) == 0
print(kernel_signatures())
"""

_TRAIN_THEN_LIST = _KERNEL_SIGNATURES + """
import numpy as np
from numba.core import event
import gbflow
rng = np.random.default_rng(1)
X = rng.standard_normal((40_000, 8)).astype(np.float32)  # past the CPU's 2**15 rows for threads
y = (X[:, 0] + rng.standard_normal(40_000) > 0).astype(np.float32)
with event.install_recorder("numba:compile") as recorded:  # a load from the cache is none
    booster = gbflow.train(X, y, {"objective": "binary:logistic", "max_depth": 5,
                                  "eval_metric": "auc"}, 10, evals=[((X, y), "train")],
                           verbose=False)
    booster.predict(X)
    gbflow.train(X, y, {"objective": "multi:softprob", "num_class": 3, "max_depth": 4}, 5,
                 verbose=False)
compiled = sorted({e.data["dispatcher"].py_func.__module__ + "." +
                   e.data["dispatcher"].py_func.__qualname__
                   for _, e in recorded.buffer if e.is_start})
print(compiled)
print(kernel_signatures())
"""

_ONE_KERNEL_COUNTING_COMPILES = """
import numpy as np
from numba.core import event
from gbflow.backend import cpu_kernels
with event.install_recorder("numba:compile") as recorded:
    cpu_kernels.auc_words(np.ones((2, 2, 8), dtype=np.int64))
print(sum(1 for _, e in recorded.buffer if e.is_start))
"""


def test_compile_covers_every_kernel_a_training_uses_and_caches_them():
    """``gbflow compile`` compiles (or loads) every kernel, with every signature, that a new
    process's training, evaluation and prediction then take, each kernel asks numba's disk
    cache, and that process, run after ``gbflow compile``, compiles none of gbflow's kernels
    (a kernel whose cache entry is never found, as one made by a closure, compiles again).
    What the processes hold is compared, so the test holds whatever the cache held before;
    from a cold cache it compiles everything first (about two minutes on two cores), which
    the suite's earlier tests mostly did already."""
    import ast
    compiled = subprocess.run([sys.executable, "-c", _COMPILE_THEN_LIST], capture_output=True,
                              text=True, timeout=600)
    assert compiled.returncode == 0, compiled.stderr
    assert "compiled: dense binary" in compiled.stderr
    assert "compiled: large data's kernels" in compiled.stderr
    assert "numba's disk cache" in compiled.stderr and "gbflow: gbflow:" not in compiled.stderr
    held = ast.literal_eval(compiled.stdout.strip().splitlines()[-1])
    trained = subprocess.run([sys.executable, "-c", _TRAIN_THEN_LIST], capture_output=True,
                             text=True, timeout=300)
    assert trained.returncode == 0, trained.stderr
    recompiled, used = map(ast.literal_eval, trained.stdout.strip().splitlines()[-2:])
    assert not [name for name in recompiled if name.startswith("gbflow.")], recompiled
    # the kernels called from Python (what they call is compiled and cached with them)
    # (the round grower quantises the gradients and grows the trees in one call)
    assert {"gbflow.backend.cpu_round._grow_round", "gbflow.backend.cpu_kernels._walk_trees",
            "gbflow.backend.cpu_kernels._auc_words",
            "gbflow.backend.cpu_kernels._logistic_gradients"} <= set(used)
    from gbflow.backend import cpu_kernels
    if cpu_kernels._numpy_exp_is_numbas():  # (else the twin's softmax runs)
        assert "gbflow.backend.cpu_kernels._softmax_gradients" in used
    assert not [name for name, (cached, _) in used.items() if not cached]
    missing = {name: sorted(set(signatures) - set(held.get(name, (False, []))[1]))
               for name, (_, signatures) in used.items()}
    assert not {name: m for name, m in missing.items() if m}


def test_a_fresh_numba_cache_is_filled_and_read_by_the_next_process(tmp_path):
    """gbflow's kernels go to numba's disk cache (here a fresh NUMBA_CACHE_DIR), and the next
    process loads them instead of compiling."""
    import os
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    counts = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", _ONE_KERNEL_COUNTING_COMPILES],
                              capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        counts.append(int(done.stdout.strip().splitlines()[-1]))
        assert any((tmp_path / "numba").rglob("*.nbi"))
    assert counts[0] >= 1 and counts[1] == 0


def test_the_commands_log_lines_carry_the_prefix_once():
    """The command's log lines read "gbflow: <message>"; the compile announcement, which
    carries the prefix itself (it is seen without any logging set up), is not prefixed
    again."""
    import logging

    from gbflow.backend.compiling import CPU_NOTE
    from gbflow.cli import _Prefixed

    def line(message):
        return _Prefixed().format(logging.LogRecord("gbflow", logging.INFO, __file__, 1,
                                                    message, None, None))
    assert line("compiled: multiclass (1.0 s)") == "gbflow: compiled: multiclass (1.0 s)"
    assert line(CPU_NOTE) == CPU_NOTE and CPU_NOTE.startswith("gbflow: ")
