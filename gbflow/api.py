"""The public entry point ``gbflow.train``: arguments checked, Dask collections handed on."""
from __future__ import annotations

import os
import warnings

import numpy as np

from . import batches, boosting, inputs, resume
from .backend import get_backend, on_gpu
from .booster import Booster, load_model
from .callback import check_callbacks
from .continuation import kept_params
from .custom_objective import Custom
from .evaluation import TRAINING, eval_options
from .params import ALIASES, KNOWN, Params, make_params
from .progress import VERBOSITY, check_verbose, verbosity


def _eval_dataset(entry, label, weight, train: inputs.DataSet, index: int, params,
                  base_margin: str | None = None, qid: str | None = None):
    data, name, what = inputs.eval_pair(entry, index)
    missing, feature_types = params.missing, params.feature_types
    if batches.is_batches(data):
        return batches.load(data, label if isinstance(label, str) else None,
                            weight if isinstance(weight, str) else None, what,
                            feature_names=train.feature_names, missing=missing,
                            base_margin=base_margin, qid=qid,
                            feature_types=feature_types)[0], name
    if isinstance(data, tuple):
        if len(data) not in (2, 3, 4, 5):
            raise TypeError(f"{what}: give (X, y), (X, y, weight), (X, y, weight, qid) or (X, "
                            f"y, weight, qid, base_margin) as data (None for one not given)")
        X, y, w, q, margin = (*data, None, None, None)[:5]
        return inputs.load(X, y, w, what, feature_names=train.feature_names,
                           missing=missing, qid=q, base_margin=margin,
                           feature_types=feature_types), name
    if not isinstance(label, str):
        raise TypeError(f"{what}: the training label was an array, so give this evaluation set "
                        f"as ((X, y), {name!r}) or ((X, y, weight), {name!r})")
    return inputs.load(data, label, weight if isinstance(weight, str) else None, what,
                       feature_names=train.feature_names, missing=missing,
                       base_margin=base_margin, qid=qid, feature_types=feature_types), name


def train(data, label=None, params: dict | None = None, num_boost_round: int = 100,
          evals=None, early_stopping_rounds: int | None = None, weight=None,
          verbose=True, client=None, *, obj=None, custom_metric=None,
          maximize: bool | None = None, early_stopping_metric: str | None = None,
          metric_period: int = 1, xgb_model=None, callbacks=None, checkpoint=None,
          on_worker_lost: str = "restart", base_margin=None, qid=None,
          verbose_eval=None, evals_result: dict | None = None) -> Booster:
    """Train a gradient-boosted tree model.

    data: pandas DataFrame or 2-D NumPy array (features; float32 is used internally, NaN and
    nulls are missing values), or a Dask DataFrame (then label/weight name columns, evals hold
    Dask DataFrames, and training runs on the workers of the active ``distributed.Client``, or in
    this process over the partitions without one: see ``gbflow.dask``; ``client`` names a
    ``distributed.Client`` explicitly), or a table in batches: a list or an iterator (a
    generator) of pandas/cuDF frames or NumPy/CuPy arrays (each an (X, y[, weight[, qid[,
    base_margin]]]) tuple; label and the others then stay None), or a Parquet or CSV path (a
    file, a folder of them or a glob; read a row group at a time). Batches are checked one by
    one and their features copied into one host matrix (a device batch leaves the device as
    it comes), so raw data larger than the GPU trains: the device gets blocks of it to sketch
    and bin, and keeps the bins only (paged too where they do not fit); the model is the one
    of the concatenated batches. label: column name of ``data`` (then not a feature) or
    an array with one value per row. weight: likewise, optional, non-negative. base_margin:
    XGBoost's, optional: each row's starting margin in place of the model's base score (an
    offset such as log exposure), a column name of ``data`` (then the evaluation frames must
    hold that column too; not a feature) or an array of one value per row ((n, n_classes)
    for several classes; a column name for a Dask DataFrame). Predict with the same margins
    through ``predict(..., base_margin=)``. qid: XGBoost's query ids for the ranking
    objectives (rank:ndcg, rank:map, rank:pairwise): a column name of ``data`` (then the
    evaluation frames must hold it too; not a feature) or an array of one whole number per row;
    rows of a query need not be adjacent, but on Dask a query's rows must lie in one partition.
    With ranking, weights are the queries' (every row of a query the same). params:
    XGBoost-style parameters (see ``gbflow.params.Params``; ``eval_metric`` names the metrics,
    XGBoost's names); an unknown name is an error.

    evals: list of (data, name) pairs evaluated after every round (frames holding the label
    column, or (X, y[, w[, qid[, base_margin]]]) tuples, None for one not given: a tuple
    without base_margin starts from the base score); the training data itself may be one (its
    margins are training's own: no extra prediction). The metrics are computed on the data's
    device and are exact: the same on any number of partitions, workers or GPUs. Values land in
    ``booster.evals_result`` ({name: {metric: [value per evaluated round]}}, XGBoost's layout;
    ``booster.eval_rounds`` lists the rounds, numbered as ``best_iteration``: counting a
    continued model's rounds before them), and in ``evals_result`` when given a dict
    (XGBoost's argument: emptied, then filled once training ends). metric_period: evaluate
    every that many rounds (and at the last) instead of every round.

    early_stopping_rounds: stop when the watched metric, on the last pair of ``evals``, has not
    improved for that many rounds; the model keeps every round trained and records its best
    (``best_iteration``, 0-based, and ``best_score``): prediction stops at the best round unless
    given an ``iteration_range``, as XGBoost's scikit-learn models do. The watched metric is
    ``early_stopping_metric`` or else the last metric (a custom metric's, when there is one);
    ``maximize`` says whether larger is better (default: the metric's own direction: auc and
    aucpr up, the others down; for a custom name, XGBoost's rule: names starting with auc, pre,
    map or ndcg up).

    obj: XGBoost's custom objective, ``obj(margins, data) -> (grad, hess)``, called every round
    with the raw margins ((n,) float64, (n, n_outputs) for the multi-class objectives and
    several quantiles) on the device where the data is (NumPy, or CuPy for GPU training; on
    Dask each worker's own rows) and ``data`` offering ``get_label()``, ``get_weight()``,
    ``num_row()`` there; it returns arrays of the margins' shape. As XGBoost, it applies the
    weights itself, and the start is base_score (0.5 unless given) through the configured
    objective's link, whose transform, label checks and default metric still apply. Each
    round waits for the device to check that its values are finite. On Dask it must pickle.

    xgb_model: a ``Booster`` (or a saved model's path) to continue, as XGBoost's: its trees,
    cuts and base margin are kept and ``num_boost_round`` more rounds are added (row and
    feature sampling continue from its round count; ``best_iteration`` counts its rounds
    too). On the same data and parameters, training n rounds and then m more gives the model
    of n + m rounds in one run, bit for bit. Its objective, num_class, number of quantiles,
    max_bin and features must be the same: what params do not name of them is the model's
    (the objective with its own parameters, max_bin, feature_types: XGBoost's model files keep
    them); other parameters (learning rate, depth, ...) may change.

    callbacks: a list of ``gbflow.callback.TrainingCallback`` (XGBoost's interface:
    before_training, before_iteration, after_iteration returning True to stop, after_training),
    run on the host after each round's evaluation; see the class for what they receive.

    checkpoint: a file path, a (path, period in rounds) pair or a ``gbflow.Checkpoint``
    (period 10 by default): the training's state (a model file of the completed rounds plus
    their evaluation history) is written there every period rounds, atomically, and at the end.
    A training given a checkpoint whose file exists resumes from it: the same parameters,
    features, round count, evaluation sets and row count are required (a clear error
    otherwise), and the result is the model file of an uninterrupted run. A finished
    checkpoint returns its model at once. Not with xgb_model.

    on_worker_lost (Dask with a client): "restart" (default) restarts training on the
    remaining workers (and any the cluster adds) from the last completed round when a training
    worker dies; Dask recomputes the lost partitions and the model is the one an uninterrupted
    run gives; at most ``gbflow.dask.driver.MAX_RESTARTS`` times. "raise" raises
    ``gbflow.dask.WorkerLostError`` instead. Callbacks start again from their state when
    training began.

    custom_metric: XGBoost's signature ``f(predictions, data) -> (name, value)`` or a list of
    such pairs, evaluated after the built-in metrics. predictions: host NumPy (n,) or
    (n, n_outputs) transformed predictions (probabilities for the classification objectives) of
    the whole set; data: an ``evaluation.EvalMatrix`` (``get_label()``, ``get_weight()``). It
    runs on the host: every evaluated round waits for the device and copies the set's
    predictions there (on Dask, gathers every worker's rows to every worker, in worker order):
    built-in metrics cost a few scalars a round instead.

    verbose: True for about 20 progress lines (the "gbflow" logger; stderr unless logging is
    configured), an int for a line every that many rounds, "bar" for a tqdm progress bar (a
    notebook widget in Jupyter; on Dask drawn on the client), False for none. verbose_eval:
    XGBoost's name for it, taken in its place (XGBoost's True logs every round; gbflow's about
    20 lines). Returns a ``Booster``; nothing is computed before every input has been checked.
    """
    if isinstance(data, dict) and not isinstance(params, dict):
        raise TypeError("train(data, label, params, num_boost_round, ...): the first argument is "
                        "the data, and a dict was given first, as in XGBoost's train(params, "
                        "dtrain, ...); gbflow takes the parameters third (or params=...)")
    if verbose_eval is not None:
        if verbose is not True:
            raise TypeError("train() takes verbose or verbose_eval (XGBoost's name for it), "
                            "not both")
        verbose = verbose_eval
    if evals_result is not None and not isinstance(evals_result, dict):
        raise TypeError(f"evals_result must be a dict (filled with the evaluation history), "
                        f"got {type(evals_result).__name__}")
    if xgb_model is not None:
        xgb_model = _model_to_continue(xgb_model)
        named = _named(params)
        params = make_params(params, **kept_params(xgb_model, named, _objective_named(params)))
    else:
        params = make_params(params)
    with verbosity(params.verbosity):
        booster = _train(data, label, params, num_boost_round, evals, early_stopping_rounds,
                         weight, verbose, client, obj=obj, custom_metric=custom_metric,
                         maximize=maximize, early_stopping_metric=early_stopping_metric,
                         metric_period=metric_period, xgb_model=xgb_model,
                         callbacks=callbacks, checkpoint=checkpoint,
                         on_worker_lost=on_worker_lost, base_margin=base_margin, qid=qid)
    if evals_result is not None:
        evals_result.clear()
        evals_result.update({name: {metric: list(values) for metric, values in by_metric.items()}
                             for name, by_metric in booster.evals_result.items()})
    return booster


def _train(data, label, params, num_boost_round, evals, early_stopping_rounds, weight, verbose,
           client, *, obj, custom_metric, maximize, early_stopping_metric, metric_period,
           xgb_model, callbacks, checkpoint, on_worker_lost, base_margin=None,
           qid=None) -> Booster:
    """``train`` once its parameters are made (``Params``), under their verbosity."""
    check_verbose(verbose)
    if isinstance(num_boost_round, bool) or not isinstance(num_boost_round, (int, np.integer)) \
            or num_boost_round < 0:
        raise ValueError(f"num_boost_round must be a non-negative integer, got {num_boost_round!r}")
    if evals is not None and not isinstance(evals, list):
        raise TypeError(f"evals must be a list of (data, name) pairs, got {type(evals).__name__}"
                        + ("; wrap a single pair in a list" if isinstance(evals, tuple) else ""))
    options = eval_options(params, bool(evals), early_stopping_rounds, early_stopping_metric,
                           maximize, custom_metric, metric_period)
    in_batches = batches.is_batches(data)
    if label is None and not in_batches:
        raise ValueError("train needs a label: a column name of data or an array")
    if obj is not None and not callable(obj):
        raise TypeError(f"obj must be a function (margins, data) -> (grad, hess), got "
                        f"{type(obj).__name__}")
    objective = params.loss if obj is None else Custom(params.loss, obj)
    callbacks = check_callbacks(callbacks)
    checkpoint = resume.as_checkpoint(checkpoint)
    if checkpoint is not None and xgb_model is not None:
        raise ValueError("checkpoint and xgb_model do not go together: a checkpoint resumes its "
                         "own training; continue a model with xgb_model alone")
    if on_worker_lost not in ("restart", "raise"):
        raise ValueError(f"on_worker_lost must be 'restart' or 'raise', got {on_worker_lost!r}")
    if params.loss.by_query and qid is None and not in_batches:
        _no_qid(params)
    if inputs.is_dask_collection(data):  # trained where its partitions live: gbflow.dask
        from .dask import driver
        return driver.train(data, label, params, int(num_boost_round), evals, options, weight,
                            verbose, client=client, objective=objective,
                            init_model=xgb_model, callbacks=callbacks, checkpoint=checkpoint,
                            on_worker_lost=on_worker_lost, base_margin=base_margin, qid=qid)
    if client is not None:
        raise TypeError(f"client= is for Dask collections; the training data is a "
                        f"{type(data).__name__}, trained in this process")
    if in_batches:
        dataset, data_on_gpu = batches.load(data, label, weight, "training data",
                                            missing=params.missing, base_margin=base_margin,
                                            qid=qid, enable_categorical=params.enable_categorical,
                                            feature_types=params.feature_types)
        if params.loss.by_query and dataset.qid is None:
            _no_qid(params, " (or each batch as (X, y, weight, qid))")
    else:
        dataset = inputs.load(data, label, weight, "training data", missing=params.missing,
                              base_margin=base_margin, qid=qid,
                              feature_types=params.feature_types)
        data_on_gpu = on_gpu(dataset.X)
        if not params.enable_categorical:
            inputs.check_categorical(data, dataset.feature_names, [], "training data",
                                     enabled=False)
        _warn_label_as_feature(data, label, dataset.feature_names)
    objective.check_label(dataset.label, f"label column {dataset.label_name!r}"
                          if dataset.label_name else "the training label")
    if dataset.weight is not None and not dataset.weight.sum() > 0:
        raise ValueError("weight: all training weights are zero")
    eval_sets = []
    for i, entry in enumerate(evals or []):
        if _is_training(entry, data, label, weight, qid, base_margin):
            eval_sets.append((TRAINING, entry[1]))
            continue
        d, name = _eval_dataset(entry, label, weight, dataset, i, params,
                                dataset.base_margin_name, dataset.qid_name)
        objective.check_label(d.label, f"evaluation set {name!r}")
        eval_sets.append((d, name))
    rows = dataset.n_rows
    state = resume.read(checkpoint)
    if state is not None:
        resume.check_matches(state, checkpoint.path, params, dataset.feature_names,
                             int(num_boost_round), [name for _, name in eval_sets], rows,
                             options)
        if state.finished:
            return resume.resumed_model(state)
    saver = None if checkpoint is None else resume.Saver(checkpoint, state.rounds if state else 0)
    cells = rows * len(dataset.feature_names)
    backend = get_backend(params.device, data_on_gpu=data_on_gpu, cells=cells)
    # CuPy's own pool, not the allocator cuDF's import sets (RMM's default: a cudaMalloc per
    # array), unless the user configured one
    with backend.limited_threads(params.nthread, cells=cells), \
            backend.own_memory_pool(unless_chosen=True):
        booster = boosting.fit(backend, [dataset], params,
                               int(num_boost_round) - (state.rounds if state else 0), eval_sets,
                               options, verbose, drop_features=True, objective=objective,
                               init_model=xgb_model, callbacks=callbacks, resume=state,
                               on_rounds=saver)
    if saver is not None:
        saver.finish(booster, int(num_boost_round), rows, options)
    return booster


def _model_to_continue(xgb_model) -> Booster:
    """``train``'s xgb_model as a Booster (a model file's path is loaded)."""
    if isinstance(xgb_model, Booster):
        return xgb_model
    if not isinstance(xgb_model, (str, os.PathLike)):
        foreign = type(xgb_model).__module__.startswith("xgboost")
        raise TypeError(f"xgb_model must be a gbflow Booster or a gbflow model file's path, got "
                        f"{'an xgboost.' if foreign else ''}{type(xgb_model).__name__}" +
                        ("; gbflow continues its own models only (an XGBoost model's trees "
                         "were cut on other bins)" if foreign else ""))
    return load_model(xgb_model)


def _pairs(params) -> list:
    """A user's params (a dict or (name, value) pairs; None) as (name, value) pairs; what
    make_params would refuse is left out here (it says what is wrong)."""
    if isinstance(params, dict):
        return list(params.items())
    return [p for p in params or () if isinstance(p, (tuple, list)) and len(p) == 2]


def _named(params) -> set:
    """The canonical names a user's params (a dict, (name, value) pairs, a ``Params`` or None)
    set; every name for a ``Params``."""
    if isinstance(params, Params):
        return set(KNOWN)
    return {ALIASES.get(name, name) for name, _ in _pairs(params) if isinstance(name, str)}


def _objective_named(params) -> str | None:
    """The objective a user's params name (None where they name none)."""
    if isinstance(params, Params):
        return params.objective
    named = [value for name, value in _pairs(params) if name == "objective"]
    return named[-1] if named and isinstance(named[-1], str) else None


def _no_qid(params, alternative: str = "") -> None:
    raise ValueError(f"objective {params.objective} ranks the rows of each query: give "
                     f"train(..., qid=) a column name or an array of query ids{alternative}")


def _warn_label_as_feature(data, label, feature_names: list) -> None:
    """Warn when the label, given as a Series, is also one of the feature columns (its name,
    the same values): the model would learn it from itself. Reads one column, no more."""
    name = getattr(label, "name", None)
    if name is None or isinstance(label, str) or name not in set(feature_names):
        return
    column = data[name]
    try:
        same = len(column) == len(label) and bool((column.to_numpy() == label.to_numpy()).all())
    except (AttributeError, TypeError, ValueError):
        return
    if same and VERBOSITY.get() >= 1:
        warnings.warn(f"the label is also the feature column {name!r} (the same values): the "
                      f"model will learn it from itself; give label={name!r} to train without "
                      f"it, or drop the column", UserWarning, stacklevel=3)


def _is_training(entry, data, label, weight, qid=None, base_margin=None) -> bool:
    """Whether an ``evals`` entry is the training data itself (the same objects)."""
    if not (isinstance(entry, (tuple, list)) and len(entry) == 2):
        return False  # _eval_dataset says what is wrong
    given = entry[0]
    if given is data:  # the same frame (with the same label/weight columns) or batches
        return isinstance(label, str) or batches.is_batches(data)
    if isinstance(given, tuple) and 2 <= len(given) <= 5 and given[0] is data:
        w, q, margin = (*given[2:], None, None, None)[:3]
        return given[1] is label and w is weight and (len(given) < 4 or q is qid) and \
            (len(given) < 5 or margin is base_margin)
    return False
