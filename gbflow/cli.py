"""The ``gbflow`` command line: train, predict and info for scheduled jobs; compile, ahead.

Exit codes a scheduler can act on: 0 done, 2 bad input or arguments, 1 failure (one line on
stderr either way).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
import time
import tomllib

EXAMPLES = """examples:
  gbflow train data/loans/ --label default --set objective=binary:logistic --set max_depth=8 \\
      --eval-fraction 0.2 --early-stopping 20 --model model.json --report report.json
  gbflow train 'data/*.csv' --label y --params params.toml --rounds 300 --local-cluster 4
  gbflow train data/ --label y --scheduler tcp://scheduler:8786 --model model.json
  gbflow predict model.json data/new/ --output scored.parquet
  gbflow info model.json
  gbflow compile    # once after installing (a Docker build): the first training starts at once
  gbflow compile --device cuda    # the same for the CUDA kernels (CuPy's kernel cache)
"""

BAD_INPUT, FAILURE = 2, 1


class BadInput(ValueError):
    """An argument or file the command cannot use (exit code 2)."""


def _value(text: str):
    """A --set value: JSON when it parses (numbers, true/false, lists), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def load_params(path: str | None, settings: list[str]) -> dict:
    """Parameters from a TOML or JSON file, then ``key=value`` settings over them."""
    params: dict = {}
    if path:
        if not os.path.isfile(path):
            raise BadInput(f"parameter file {path!r} does not exist")
        load, malformed = (tomllib.load, tomllib.TOMLDecodeError) \
            if path.lower().endswith(".toml") else (json.load, json.JSONDecodeError)
        with open(path, "rb") as f:
            try:
                params = load(f)
            except malformed as e:
                raise BadInput(f"parameter file {path!r}: {e}") from None
        if not isinstance(params, dict):
            raise BadInput(f"parameter file {path!r} must hold a table of names to values")
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadInput(f"--set takes key=value, got {item!r}")
        params[key.strip()] = _value(value.strip())
    return params


class _Data:
    """The frames a command works on: pandas in this process, or Dask on a cluster."""

    def __init__(self, args):
        self.on_dask = bool(args.scheduler or args.local_cluster or args.gpu)
        self.gpu = args.gpu

    def read(self, spec: str):
        from .batches import input_files
        files, fmt = input_files(spec)
        if self.on_dask:
            from .dask import files as dask_files
            return dask_files.read_dask(files, fmt, self.gpu)
        import pandas as pd
        reader = pd.read_parquet if fmt == "parquet" else pd.read_csv
        frames = [reader(f) for f in files]
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)

    def split(self, frame, fraction: float, seed: int):
        """(train, evaluation): a seeded random share of the rows held out."""
        if self.on_dask:
            train, held = frame.random_split([1.0 - fraction, fraction], random_state=seed)
            return train, held
        import numpy as np
        held = np.random.default_rng(seed).random(len(frame)) < fraction
        return frame[~held], frame[held]

    def write(self, frame, path: str) -> None:
        if self.on_dask:
            from .dask import files as dask_files
            dask_files.write_dask(frame, path, output_parts)
            return
        from .atomic_file import write_through
        from .batches import file_format
        if file_format(path) == "csv":
            write_through(path, lambda tmp: frame.to_csv(tmp, index=False))
        else:
            write_through(path, lambda tmp: frame.to_parquet(tmp, index=False))

    def check_output(self, path: str, data: str) -> None:
        """BadInput, before any work, for an output the command could not write: its folder
        missing or read-only, a folder where a file goes (or a file where the Dask folder
        goes), a .csv on Dask (which writes a Parquet folder); on Dask an existing folder is
        replaced only when it holds an earlier output's parts alone and none of the input
        ``data``'s files."""
        check_writable(path, "--output", folder_output=self.on_dask)
        from .batches import file_format, input_files
        target = os.path.realpath(path.rstrip("/") or path)
        inputs = [os.path.realpath(f) for f in input_files(data)[0]]
        if any(f == target or f.startswith(target + os.sep) for f in inputs):
            raise BadInput(f"--output {path!r} is or holds the input data; give another path")
        if not self.on_dask:
            if file_format(path) is None:
                raise BadInput(f"--output {path!r}: name it .parquet (or .pq) or .csv")
            return
        if path.lower().endswith(".csv"):
            raise BadInput(f"--output {path!r}: on Dask the scores are a Parquet folder (one file "
                           f"a partition); give a folder name, not a .csv")
        if os.path.isdir(target) and output_parts(target) is None:
            raise BadInput(f"--output {path!r} is a folder holding more than an earlier "
                           f"output's part files: it would be replaced; give a new folder (or "
                           f"empty it)")


def output_parts(folder: str) -> list[str] | None:
    """The files of an earlier Dask output in ``folder`` (plain files named part.N.parquet,
    _metadata, _common_metadata), or None when it holds anything else: then it is not
    replaced."""
    names = []
    for entry in os.scandir(folder):
        if not (entry.is_file(follow_symlinks=False) or entry.is_symlink()) or \
                not re.fullmatch(r"part\.[0-9]+\.parquet|_metadata|_common_metadata",
                                 entry.name, re.ASCII):
            return None
        names.append(entry.name)
    return names


def check_distinct(paths: dict) -> None:
    """BadInput when two of ``paths`` ({option: path or list of paths}) are the same file."""
    seen: dict = {}
    for option, value in paths.items():
        for path in ([value] if isinstance(value, str) else value):
            real = os.path.realpath(path)
            if real in seen and seen[real] != option:
                raise BadInput(f"{option} {path!r} is the same file as {seen[real]}: give "
                               f"another path")
            seen.setdefault(real, option)


def check_writable(path: str, option: str, folder_output: bool = False) -> None:
    """BadInput naming ``option`` unless ``path`` can be written: its folder exists, and it is
    not a folder (a file where a folder goes, for ``folder_output``)."""
    if not folder_output and path.endswith(("/", os.sep)):
        raise BadInput(f"{option} {path!r} ends with a folder separator; give a file name")
    folder = os.path.dirname(os.path.realpath(path))
    if not os.path.isdir(folder):
        raise BadInput(f"{option} {path!r}: folder {folder!r} does not exist; create it first")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BadInput(f"{option} {path!r}: folder {folder!r} is not writable")
    if folder_output and os.path.isfile(path.rstrip("/") or path):
        raise BadInput(f"{option} {path!r} is a file; the output is a folder of parts here")
    if not folder_output and os.path.isdir(path):
        raise BadInput(f"{option} {path!r} is a folder; give a file name")


def _positive(text: str) -> int:
    """argparse's type for a count of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _client(args):
    """The Dask client the arguments ask for, or a context that gives None (this process)."""
    if not (args.scheduler or args.local_cluster or args.gpu):
        return contextlib.nullcontext()
    from .dask import files as dask_files
    return dask_files.client(args.scheduler, args.local_cluster, args.gpu)


def _write_json(path: str, payload: dict) -> None:
    """Write ``payload`` to ``path`` whole or not at all (a temporary file renamed)."""
    from .atomic_file import write_through

    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(payload, f, indent=2, default=float)
            f.write("\n")
    write_through(path, write)


def cmd_train(args) -> int:
    import gbflow

    from .params import make_params
    params = load_params(args.params, args.set)
    if args.eval and args.eval_fraction:
        raise BadInput("give --eval or --eval-fraction, not both")
    if args.eval_fraction is not None and not 0 < args.eval_fraction < 1:
        raise BadInput(f"--eval-fraction must lie in (0, 1), got {args.eval_fraction}")
    if args.early_stopping and not (args.eval or args.eval_fraction):
        raise BadInput("--early-stopping needs an evaluation set (--eval or --eval-fraction)")
    make_params(params)  # a bad parameter fails before any data is read
    check_writable(args.model, "--model")
    if args.report:
        check_writable(args.report, "--report")
    from .batches import input_files
    check_distinct({"the data": input_files(args.data)[0],
                    **({"the evaluation data": input_files(args.eval)[0]} if args.eval else {}),
                    "--model": args.model, **({"--report": args.report} if args.report else {})})
    started = time.perf_counter()
    data = _Data(args)
    with _client(args) as client:
        # In this process the files go to train() as paths, read a row group (a CSV chunk) at
        # a time (gbflow.batches), not joined into one frame first; a random split needs one.
        as_paths = not data.on_dask and not args.eval_fraction
        frame = args.data if as_paths else data.read(args.data)
        evals = []
        if args.eval:
            evals = [(args.eval if as_paths else data.read(args.eval), "eval")]
        elif args.eval_fraction:
            frame, held = data.split(frame, args.eval_fraction, args.seed)
            evals = [(held, "eval")]
        booster = gbflow.train(frame, label=args.label, weight=args.weight, params=params,
                               num_boost_round=args.rounds, evals=evals or None,
                               early_stopping_rounds=args.early_stopping,
                               verbose=not args.quiet, client=client)
    booster.save_model(args.model)
    report = {
        "model": os.path.abspath(args.model), "data": args.data, "label": args.label,
        "rounds": booster.num_boosted_rounds(), "best_iteration": booster.best_iteration,
        "best_score": booster.best_score, "params": booster.params.to_dict(),
        "metrics": {name: {m: values[-1] for m, values in metrics.items()}
                    for name, metrics in booster.evals_result.items()},
        "timings": booster.timings, "seconds": time.perf_counter() - started,
        "workers": getattr(booster, "worker_report", None),
    }
    if args.report:
        _write_json(args.report, report)
    logging.getLogger("gbflow").info("trained %d rounds in %.1f s; model %s",
                                     report["rounds"], report["seconds"], args.model)
    return 0


def _model(path: str):
    import gbflow
    if not os.path.isfile(path):
        raise BadInput(f"model file {path!r} does not exist")
    return gbflow.load_model(path)


def cmd_predict(args) -> int:
    booster = _model(args.model)
    data = _Data(args)
    data.check_output(args.output, args.data)
    check_distinct({"the model": args.model, "--output": args.output})
    with _client(args):
        frame = data.read(args.data)
        scored = booster.transform(frame, name=args.name, output_margin=args.margin)
        data.write(scored, args.output)
    return 0


def cmd_info(args) -> int:
    booster = _model(args.model)
    print(json.dumps({
        "objective": booster.params.objective, "rounds": booster.num_boosted_rounds(),
        "trees": len(booster.trees), "features": booster.feature_names,
        "label": booster.label_name, "weight": booster.weight_name,
        "best_iteration": booster.best_iteration, "best_score": booster.best_score,
        "categorical": {name: len(values) for name, values in booster.categories.items()},
        "params": booster.params.to_dict(bool(booster.categories)),
    }, indent=2))
    return 0


def cmd_compile(args) -> int:
    from .warmup import compile_kernels
    seconds = compile_kernels(args.device)
    where = "numba's disk cache" if args.device == "cpu" else "CuPy's kernel cache"
    logging.getLogger("gbflow").info("the %s kernels are in %s (%.1f s)",
                                     args.device.upper(), where, seconds)
    return 0


def _cluster_options(parser) -> None:
    group = parser.add_argument_group("where it runs (default: this process, pandas)")
    group.add_argument("--scheduler", help="address of a running Dask scheduler")
    group.add_argument("--local-cluster", type=_positive, metavar="N",
                       help="start a local Dask cluster of N CPU workers")
    group.add_argument("--gpu", action="store_true",
                       help="start a LocalCUDACluster (one worker a GPU), cuDF partitions")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="gbflow", description="Train gradient-boosted trees on Parquet or CSV data and "
        "score data with a saved model.", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a model", epilog=EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("data", help="a Parquet or CSV file, a folder of them, or a glob")
    train.add_argument("--label", required=True, help="the label column")
    train.add_argument("--weight", help="a weight column")
    train.add_argument("--params", help="a TOML or JSON file of parameters (XGBoost's names)")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="a parameter (repeatable; over --params)")
    train.add_argument("--rounds", type=int, default=100, help="boosting rounds (default 100)")
    train.add_argument("--eval", help="evaluation data (like DATA)")
    train.add_argument("--eval-fraction", type=float,
                       help="hold out this share of DATA's rows for evaluation")
    train.add_argument("--seed", type=int, default=0, help="seed of --eval-fraction's split")
    train.add_argument("--early-stopping", type=int, metavar="ROUNDS",
                       help="stop when the evaluation metric has not improved for ROUNDS")
    train.add_argument("--model", default="model.json", help="where the model goes")
    train.add_argument("--report", help="a JSON report: metrics, timings, workers' memory")
    train.add_argument("--quiet", action="store_true", help="no progress lines")
    _cluster_options(train)
    train.set_defaults(run=cmd_train)
    predict = sub.add_parser("predict", help="score data with a saved model")
    predict.add_argument("model", help="a model file (gbflow JSON)")
    predict.add_argument("data", help="a Parquet or CSV file, a folder of them, or a glob")
    predict.add_argument("--output", required=True,
                         help="where the input's columns and the prediction go (Parquet, or CSV "
                              "by extension; a Parquet folder on Dask)")
    predict.add_argument("--name", default="prediction", help="the prediction column's name")
    predict.add_argument("--margin", action="store_true", help="raw margins, not predictions")
    _cluster_options(predict)
    predict.set_defaults(run=cmd_predict)
    info = sub.add_parser("info", help="describe a saved model (JSON on stdout)")
    info.add_argument("model")
    info.set_defaults(run=cmd_info, scheduler=None, local_cluster=None, gpu=False)
    compile_ = sub.add_parser(
        "compile", help="compile the kernels into numba's (CPU) or CuPy's (CUDA) disk cache now "
        "(once after installing: otherwise the first training in an environment compiles them, "
        "10-30 s)")
    compile_.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                          help="cuda: gbflow's CUDA kernels into CuPy's kernel cache (once per "
                          "GPU architecture, about 5-20 s otherwise)")
    compile_.set_defaults(run=cmd_compile, scheduler=None, local_cluster=None, gpu=False)
    return top


class _Prefixed(logging.Formatter):
    """Each line "gbflow: <message>", once: the announcements of a compile (seen without any
    logging set up, so they carry the prefix themselves) are not prefixed again."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        return message if message.startswith("gbflow: ") else f"gbflow: {message}"


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code (errors are one line on stderr)."""
    args = parser().parse_args(argv)
    log = logging.getLogger("gbflow")
    if not log.handlers:  # gbflow's own lines only: Dask's loggers keep their levels
        handler = logging.StreamHandler()
        handler.setFormatter(_Prefixed())
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    try:
        return args.run(args)
    except (BadInput, ValueError, TypeError, KeyError, FileNotFoundError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"gbflow: error: {message}", file=sys.stderr)
        return BAD_INPUT
    except Exception as e:  # noqa: BLE001 - a scheduler needs a code, not a traceback
        print(f"gbflow: failed: {type(e).__name__}: {e}", file=sys.stderr)
        return FAILURE


def main_exit() -> None:
    """The console script: ``main`` with its code as the process's exit status."""
    sys.exit(main())
