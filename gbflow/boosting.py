"""The boosting loop: per round gradients, one tree per output group, margins, evaluation."""
from __future__ import annotations

import time

import numpy as np

from . import leaf_quantiles, predictor, prepare, ranking
from .booster import Booster
from .callback import Callbacks
from .categories import by_value_features, recode_part
from .categories import unify as unify_categories
from .category_splits import gradient_dispersions
from .continuation import check_continuation
from .evaluation import TRAINING, EvalOptions, EvalSet, Evaluation
from .grow import add_margins, finished_tree, grow_round_whole, grow_tree, grows_rounds_whole
from .memory_report import StageMemory
from .progress import Progress
from .resume import TrainingState, options_of
from .round_gradients import gradient_function, largest_gradients, round_gradients, tree_scales
from .rules import TreeRules
from .sampling import (
    FeatureSample,
    gradient_based_sample,
    reweighted_bounds,
    row_sample_mask,
)
from .shards import ShardSet


def _as_parts(entry) -> list:
    return list(entry) if isinstance(entry, (list, tuple)) else [entry]


def fit(backend, parts: list, params, num_boost_round: int, evals: list[tuple] = (),
        options: EvalOptions | None = None, verbose=True,
        keep_training_margins: bool = False, *, shardset: ShardSet | None = None,
        row_offsets: list | None = None, drop_features: bool = False, emit=None,
        after_quantize=None, objective=None, init_model: Booster | None = None,
        callbacks: list | None = None, resume=None, on_rounds=None) -> Booster:
    """The boosting loop over this process's parts, with every cross-part reduction done by
    ``shardset``'s collective. Inputs are already validated (each part on its own).

    parts: non-empty list of ``inputs.DataSet`` (one shard each; 0-row parts are allowed), the same
    feature names and label/weight presence everywhere. params: validated ``Params``. evals:
    (DataSet or list of DataSet, name) pairs; a list holds this process's parts of the set (possibly
    none); ``evaluation.TRAINING`` as data stands for the training data. options:
    ``evaluation.EvalOptions`` (metrics every round, no early stopping by default). shardset: an
    empty ``ShardSet`` whose collective reaches the other processes (default: this process only).
    row_offsets: global row number of each part's first row (default: the parts one after the other
    from 0), or for a part whose rows are not numbered consecutively an (n_i,) uint64 array of its
    rows' global numbers; row sampling follows them. drop_features: set each part's X (training and
    held-out parts) to None once binned, so the raw float32 matrices can be freed. emit: where
    progress lines go (default stderr). after_quantize: called without arguments once every process
    has binned its parts (the Dask driver then lets the raw partitions go). objective: an
    ``Objective`` in place of ``params.loss`` (``obj=``'s ``custom_objective.Custom``). init_model:
    a ``Booster`` to continue (XGBoost's ``xgb_model``): its cuts, base margin and trees are kept,
    every margin starts from its predictions, row and feature sampling continue from its round
    count, and the result holds its trees followed by the new ones; on the same data and parameters
    the same model as one run of all the rounds. callbacks: ``callback.TrainingCallback`` instances,
    run on the host in order (then each round is evaluated as it ends). resume: a
    ``resume.TrainingState`` of this training's first rounds (continued as ``init_model`` is,
    its evaluation history and early stopping state taken over, rounds numbered from its start:
    the model of a run that never stopped); num_boost_round is then the rounds left. on_rounds:
    called each time more rounds are complete (their trees built and, where due, evaluated)
    with their state as a ``resume.TrainingState`` whose history is the live one (copy what is
    kept). Every process must call
    ``fit`` with the same params, round count and evaluation set names, and gets the same model.

    The model depends only on the rows of the concatenated parts (over all processes), not on how
    they are split into parts or processes, nor (without ``subsample``, whose draws follow the
    global row number) on their order. With ``keep_training_margins`` the booster gets
    ``training_margins``: per part the (n_i, n_groups) float64 margins reached in training (for
    tests; not when early stopping cut trees off). The booster's ``memory_report`` says how much
    memory training held per stage and what holds it (``memory_report.StageMemory.report``).
    Side effects: progress lines unless ``verbose`` is False; a thread reading the memory in
    use while training runs.
    """
    shardset = ShardSet(backend) if shardset is None else shardset
    memory = StageMemory(backend, shardset.timers)  # a reading thread: stopped whatever happens
    try:
        return _fit(backend, parts, params, num_boost_round, evals, options, verbose,
                    keep_training_margins, shardset=shardset, row_offsets=row_offsets,
                    drop_features=drop_features, emit=emit, after_quantize=after_quantize,
                    objective=objective, init_model=init_model, callbacks=callbacks,
                    resume=resume, on_rounds=on_rounds, memory=memory)
    finally:
        memory.stop()
        # the recorded trees' graphs and the memory they hold go now, not when the shard
        # set is collected
        shardset.recorder.clear()
        shardset.margin_recorder.clear()
        shardset.eval_recorder.clear()


def _fit(backend, parts: list, params, num_boost_round: int, evals, options, verbose,
         keep_training_margins: bool, *, shardset: ShardSet, row_offsets, drop_features: bool,
         emit, after_quantize, objective, init_model, callbacks, resume, on_rounds,
         memory: StageMemory) -> Booster:
    """``fit``'s work; ``memory`` reads the memory in use while it runs (the booster's
    ``memory_report`` is made from it at the end)."""
    xp = backend.xp
    start = time.perf_counter()
    objective = params.loss if objective is None else objective
    n_groups = params.n_groups
    feature_names = parts[0].feature_names
    collective, timers = shardset.collective, shardset.timers
    if row_offsets is None:
        row_offsets = np.concatenate([[0], np.cumsum([p.n_rows for p in parts])[:-1]]).tolist()
    options = EvalOptions() if options is None else options
    metric_list = params.metric_list()
    # rows grouped by query: for a ranking objective, or a ranking metric
    by_query = params.loss.by_query or any(m.kind == "query" for m in metric_list)
    weighted = parts[0].weight is not None
    eval_parts = [(parts if d is TRAINING else _as_parts(d), name) for d, name in evals]
    eval_parts = [(e, name, e[0].weight is not None if e else weighted) for e, name in eval_parts]
    forest, first_round = None, 0
    if resume is not None:
        init_model = resume.model
    by_value = by_value_features(collective, parts, params.feature_types)
    if init_model is not None:
        check_continuation(init_model, params, feature_names, parts[0].categories, by_value)
    check_base_margins(parts, eval_parts, n_groups)
    # one category list per categorical feature over every process; the evaluation sets' codes
    # moved onto them (categories training never saw become missing there)
    categories = unify_categories(collective, parts, None if init_model is None else
                                  init_model.categories)
    for e, _, _ in eval_parts:
        for part in e:
            recode_part(part, categories)
    rules = TreeRules.of(params, feature_names, categories)
    if init_model is not None:
        forest = predictor.FlatForest.from_trees(init_model.trees)
        first_round = init_model.num_boosted_rounds()
        # the model's margins on the raw rows, before binning lets them go
        blocks = prepare.raw_block_rows(backend, params, parts, len(feature_names))
        start_margins = [predictor.predict_margin(backend, p.X, forest, init_model.base_margin,
                                                  p.base_margin, blocks)
                         for p in parts]
    with timers("quantize"):
        sizes = prepare.check_global_inputs(collective, parts, eval_parts, metric_list,
                                            multiclass=params.multiclass, by_query=by_query)
        n_rows, max_weight = sizes.n_rows, sizes.max_weight
        if resume is not None and resume.rows != n_rows:
            raise ValueError(f"the checkpoint resumed was written by a training on "
                             f"{resume.rows} rows; this one has {n_rows}: delete it to start "
                             f"afresh, or give this training another checkpoint path")
        cuts = prepare.bin_into(shardset, parts, params, n_rows, max_weight, row_offsets,
                                drop_features,
                                cuts=None if init_model is None else init_model.cuts)
    shards = shardset.shards
    weights = None if shards[0].weight is None else [s.weight for s in shards]
    base_margin = init_model.base_margin if init_model is not None else \
        objective.base_margin(xp, [s.label for s in shards], weights, params.base_score,
                              collective=collective)
    if after_quantize is not None:  # the reductions above passed: every process has binned
        after_quantize()
    for i, (part, whole) in enumerate(zip(parts, shardset.part_shards)):
        if init_model is not None:
            whole.margin = start_margins[i]
        else:
            whole.margin = xp.empty((whole.n_rows, n_groups), dtype=np.float64)
            row_margin = part.base_margin  # XGBoost's base_margin: the rows' own start
            whole.margin[:] = xp.asarray(base_margin)[None, :] if row_margin is None else \
                predictor.starting_margins(xp, backend.asarray(row_margin), n_groups)
    for shard, margin in zip(shards, shardset.shard_views([w.margin for w in
                                                           shardset.part_shards])):
        shard.margin = margin  # a view: the part's margins are the pages' together
    n_total = shardset.n_rows_total
    # the training data's queries: for a ranking objective, or a ranking metric of it
    train_queries = params.loss.by_query or \
        (by_query and any(d is TRAINING for d, _ in evals))
    if train_queries:
        _attach_queries(backend, shardset, parts, one_query=not params.loss.by_query)
    risk_sets = objective.risk_sets(backend, [s.label for s in shards], collective) \
        if objective.whole_set else None
    eval_sets = [EvalSet(backend, name, base_margin, w, shards=shards) if d is TRAINING else
                 EvalSet(backend, name, base_margin, w, parts=e, cuts=cuts, forest=forest,
                         block_rows=prepare.raw_block_rows(backend, params, e,
                                                           len(feature_names), cuts.bin_dtype)
                         if e else None)
                 for (d, _), (e, name, w) in zip(evals, eval_parts)]
    for s, (e, name, w) in zip(eval_sets, eval_parts):
        if by_query and s.X is not None:
            s.queries = ranking.part_queries(
                xp, [None if p.qid is None else backend.asarray(p.qid) for p in e],
                s.weights, collective, f"evaluation set {name!r}", normalize=False,
                n_rows=None if params.loss.by_query else [p.n_rows for p in e])
    if drop_features:  # the held-out sets hold their rows binned now: the raw matrices may go
        for e, _, _ in eval_parts:
            for part in e:
                part.X = None
    # metric_period and the progress lines count a resumed training's rounds from its run's
    # start, a continued model's from the continuation's (XGBoost's log lines); eval_rounds,
    # the callbacks' epochs and best_iteration count every round of the model
    resumed = 0 if resume is None else first_round
    evaluation = Evaluation(backend, eval_sets, sizes.eval_rows, sizes.eval_max_weights,
                            objective, metric_list, options, collective, num_boost_round,
                            offset=resumed, recorder=shardset.eval_recorder,
                            query_auc=sizes.eval_query_auc)
    if resume is not None:
        evaluation.restore(resume.history, resume.eval_rounds)
    progress = Progress(verbose, resumed + num_boost_round, emit, has_metrics=bool(evaluation))
    complete = [first_round]  # rounds whose trees are built and, where due, evaluated
    evaluated = [first_round]  # rounds whose values are in (reported once callbacks ran)

    def completed(rounds: int) -> None:
        if on_rounds is not None and rounds > complete[0]:
            complete[0] = rounds
            on_rounds(TrainingState(model_of(trees[:rounds * n_groups]), evaluation.history,
                                    [resumed + r for r in evaluation.rounds],
                                    resumed + num_boost_round, n_rows,
                                    options=options_of(options)))
    # Where the device queues work ahead of the host, a round is evaluated one round late, while
    # the device grows the next one: the host then never waits for a tree to evaluate it. When
    # early stopping ends training, the rounds grown after the stopping one are cut off: the
    # model is the same. Not with the training data as an evaluation
    # set: its margins already hold the next round's trees by then.
    # Callbacks see each round's values after it: no late evaluation with them.
    hooks = Callbacks(callbacks or [])
    late = backend.queues_ahead and not any(s.X is None for s in eval_sets) and not hooks

    def evaluate(round_index: int, round_trees: list, last: bool = False) -> bool:
        """Evaluate a round's (built) trees, report the rounds whose values are in, and say
        whether to stop (the model then ends at the best round: rounds evaluated after the
        stopping one are dropped, their trees cut off with the rest)."""
        with timers("evaluation"):
            done = evaluation.submit(round_index, round_trees)
            if last:
                done += evaluation.flush()
        for index, scores in done:
            progress.round(resumed + index, scores)
        if done and not evaluation.stopped:
            evaluated[0] = first_round + done[-1][0] + 1
        if evaluation.stopped:
            best = resumed + evaluation.best_iteration
            progress.say(f"early stopping at round {resumed + done[-1][0] + 1}: best round "
                         f"{best + 1}, {evaluation.sets[-1].name}-"
                         f"{evaluation.watched}={evaluation.best_score:.6f}")
        return evaluation.stopped
    trees = [] if init_model is None else list(init_model.trees)
    # a continued model keeps its string attributes (XGBoost's); an array's features have
    # gbflow's made-up names (f0, f1, ...), which the XGBoost export leaves out
    attributes = None if init_model is None else init_model.user_attributes
    made_up_names = parts[0].made_up_names

    def model_of(built: list) -> Booster:
        return Booster(list(built), cuts, feature_names, params, base_margin,
                       label_name=parts[0].label_name, weight_name=parts[0].weight_name,
                       categories=categories, by_value=by_value, attributes=attributes,
                       made_up_names=made_up_names)

    live: list = []  # the callbacks' model: one object for the whole training (XGBoost's)

    def snapshot() -> Booster:
        """The model so far, for the callbacks (pending device trees built first): the same
        object every time, its trees brought up to date (its forests are cached by tree range,
        and the trees before only ever gain more after them)."""
        trees[:] = [finished_tree(t) for t in trees]
        if not live:
            live.append(model_of(trees))
        live[0].trees = list(trees)
        return live[0]

    def after_callbacks() -> None:
        """Early stopping's best round so far on the callbacks' model, set after they ran (as
        XGBoost's EarlyStopping, the last callback, sets it)."""
        if live and options.early_stopping_rounds and evaluation.best_iteration is not None:
            live[0].best_iteration = first_round + evaluation.best_iteration
            live[0].best_score = evaluation.best_score

    hooks.before_training(snapshot)
    # Fixed-point scales from the loss's bounds on |g| and |h| where it has them (no per-round
    # reduction), else from the round's global max |g| and |h|.
    gradient_based = params.sampling_method == "gradient_based" and params.subsample < 1.0
    # The per-row work of a round (gradients, sampling, fixed point) runs on whole parts when
    # a part is several shards (pages; their rows' arrays are views of the part's): a kernel
    # call per part instead of one per page. Ranking's queries and whole-set losses keep shards.
    by_part = len(shards) > len(shardset.part_shards) and not train_queries and \
        not objective.whole_set
    row_sets = shardset.part_shards if by_part else shards

    def to_shards(arrays: list) -> list:
        return shardset.shard_views(arrays) if by_part else arrays

    gradients_of = gradient_function(backend, objective, weighted=shards[0].weight is not None)
    # The fixed-point gradients of every tree are written into the same arrays (one per row
    # set): a new array each tree, made while the float gradients took part of the freed one,
    # left the memory pool a second block of that size (on the device, 153 MiB of 10M rows).
    gh_buffers: list = []

    # category-set splits pay a noise penalty in units of each tree's sum g^2 / sum h
    penalised = rules.category.penalises([len(v) for v in categories.values()])
    bounds = objective.gradient_bounds(max_weight)
    if gradient_based and bounds is not None:  # a kept pair is divided by its probability
        bounds = reweighted_bounds(bounds, params.subsample)
    # a round's trees in one backend call where each would be grown whole, on one shard, with
    # no line search setting their leaves and no category-set penalty
    whole_rounds = objective.leaf_alphas is None and not penalised and not by_part and \
        len(row_sets) == 1 and grows_rounds_whole(shardset, rules, params.colsample_bynode)
    for round_index in range(num_boost_round):
        if hooks.before_iteration(snapshot, first_round + round_index, evaluation.history):
            break
        with timers("gradients"):
            grad_hess = objective.set_gradients(xp, risk_sets, [s.margin for s in shards],
                                                [s.weight for s in shards]) \
                if objective.whole_set else [round_gradients(xp, objective, s, gradients_of)
                                             for s in row_sets]
            if gradient_based:  # each output its own sample
                for k in range(n_groups):
                    gradient_based_sample(xp, collective, [g[:, k] for g, _ in grad_hess],
                                          [h[:, k] for _, h in grad_hess],
                                          [s.row_offset for s in row_sets], n_total, params.seed,
                                          first_round + round_index, k, params.subsample)
            elif params.subsample < 1.0:
                for shard, (g, h) in zip(row_sets, grad_hess):
                    keep = row_sample_mask(xp, shard.n_rows, shard.row_offset, params.seed,
                                           first_round + round_index, params.subsample)
                    g *= keep[:, None]  # in place: the gradients are this round's own
                    h *= keep[:, None]
            largest = bounds if bounds is not None else \
                largest_gradients(backend, collective, grad_hess, n_groups)
            if not np.isfinite(largest).all():
                raise FloatingPointError(
                    f"the {objective.name or 'objective'}'s gradients are not finite (NaN or "
                    f"infinite) at round {first_round + round_index}: the margins overflowed "
                    f"its link (exp of a margin above ~709); lower learning_rate, give a "
                    f"smaller base_score or base_margin, or set max_delta_step")
            dispersions = gradient_dispersions(backend, collective, grad_hess, largest,
                                               n_total) if penalised else None
        round_trees = []
        if whole_rounds:  # the round's trees in one call, each added to the margins there
            with timers("gradients"):
                scales = [tree_scales(largest, k, n_total) for k in range(n_groups)]
                samples = [FeatureSample.draw(len(feature_names), params,
                                              first_round + round_index, k)
                           for k in range(n_groups)]
                gh_buffers = gh_buffers or [xp.empty((shards[0].n_rows, 2), dtype=np.int64)]
            (g, h), = grad_hess
            grad_hess = None
            round_trees = grow_round_whole(shardset, g, h, scales, cuts, rules, samples,
                                           gh_buffers[0])
            g = h = None
        for k in range(0 if whole_rounds else n_groups):
            with timers("gradients"):
                scales = tree_scales(largest, k, n_total)
                gh_buffers = gh_buffers or [None] * len(grad_hess)
                gh_rows = gh_buffers = [
                    backend.kernels.quantise_gradients(g[:, k], h[:, k], scales.g, scales.h,
                                                       out=buffer)
                    for (g, h), buffer in zip(grad_hess, gh_buffers)]
                gh = to_shards(gh_rows)
                if objective.leaf_alphas is not None:  # the rows' weights (0: sampled out)
                    search_weights = to_shards([leaf_quantiles.integer_weights(
                        xp, h[:, k], float(largest[k, 1]), n_total) for _, h in grad_hess])
                if k == n_groups - 1:
                    grad_hess = None  # quantized: the float gradients' memory serves the tree
            allowed = FeatureSample.draw(len(feature_names), params, first_round + round_index,
                                         k)
            tree_rules = rules if dispersions is None else rules.with_dispersion(dispersions[k])
            tree, leaf_rows = grow_tree(shardset, gh, scales, cuts, tree_rules, allowed, k,
                                        part_gh=gh_rows if by_part else None)
            gh_rows = None
            if objective.leaf_alphas is not None:
                tree = finished_tree(tree)  # (a planned tree: the wait timed as "tree")
                with timers("line search"):
                    tree, leaf_rows = leaf_quantiles.line_search(
                        backend, collective, tree, leaf_rows, shards, k, search_weights,
                        objective.leaf_alphas[k], params.learning_rate)
            with timers("margins"):
                add_margins(backend.kernels, leaf_rows, [shard.margin[:, k] for shard in shards])
            # the next tree's fixed-point gradients overwrite these (``gh_buffers``): the
            # device's queued reads of them come first in stream order
            gh = leaf_rows = None
            round_trees.append(tree)
        # A tree may still be on its way from the device (``PendingTree``): the previous
        # round's are built now, while the device grows this round's.
        for i in range(max(len(trees) - n_groups, 0), len(trees)):
            trees[i] = finished_tree(trees[i])
        trees.extend(round_trees)
        if not evaluation:
            progress.round(resumed + round_index, [])
            evaluated[0] = first_round + round_index  # the rounds before this one are built
        elif late:  # the previous round's trees are built: evaluate them while the device grows
            if round_index and evaluate(round_index - 1, trees[-2 * n_groups:-n_groups]):
                break
        else:
            trees[-n_groups:] = [finished_tree(t) for t in trees[-n_groups:]]
            if evaluate(round_index, trees[-n_groups:],
                        last=round_index + 1 == num_boost_round or bool(hooks)):
                # the callbacks see the round that stops training (XGBoost runs its early
                # stopping after them)
                hooks.after_iteration(snapshot, first_round + round_index, evaluation.history)
                break
        if hooks.after_iteration(snapshot, first_round + round_index, evaluation.history):
            break
        after_callbacks()
        completed(evaluated[0])  # after the callbacks: a stop they ask for is never lost
    else:
        if evaluation and late and num_boost_round:
            trees[-n_groups:] = [finished_tree(t) for t in trees[-n_groups:]]
            evaluate(num_boost_round - 1, trees[-n_groups:], last=True)
    progress.close()
    trees = [finished_tree(t) for t in trees]
    stopping = bool(options.early_stopping_rounds)
    best_iteration = first_round + evaluation.best_iteration if stopping and \
        evaluation.best_iteration is not None else None
    # Every round up to the one that stopped training is kept (XGBoost's way: prediction stops
    # at best_iteration unless told not to). Rounds grown before a late evaluation said stop
    # are not (the model is the one an evaluation in step gives; the margins then hold more).
    dropped_round = bool(evaluation) and evaluation.stopped and \
        len(trees) > (first_round + evaluation.rounds[-1] + 1) * n_groups
    if dropped_round:
        trees = trees[: (first_round + evaluation.rounds[-1] + 1) * n_groups]
    best_score = evaluation.best_score if stopping else None
    if live:  # what the callbacks set on their model stays (XGBoost returns that object)
        attributes = live[0].user_attributes
        if not stopping:
            best_iteration, best_score = live[0].best_iteration, live[0].best_score
            if best_iteration is not None and best_iteration >= len(trees) // n_groups:
                best_iteration = best_score = None  # a round cut off with the late ones
    booster = Booster(trees, cuts, feature_names, params, base_margin,
                      label_name=parts[0].label_name, weight_name=parts[0].weight_name,
                      best_iteration=best_iteration, best_score=best_score,
                      categories=categories, by_value=by_value, attributes=attributes,
                      made_up_names=made_up_names)
    booster.evals_result = evaluation.history
    booster.eval_rounds = [first_round + r for r in evaluation.rounds]
    booster.timings = dict(timers.seconds, total=time.perf_counter() - start)
    if keep_training_margins and not dropped_round:
        margins = [backend.to_host(s.margin) for s in shards]  # a part's pages in order
        booster.training_margins = [
            np.concatenate([m for m, (i, _, _) in zip(margins, shardset.part_rows) if i == k])
            for k in range(len(parts))]
    if hooks:
        returned = hooks.after_training(booster)
        if not isinstance(returned, Booster):
            raise TypeError(f"a callback's after_training returned a {type(returned).__name__}, "
                            f"not the model")
        if returned is not booster and not returned.evals_result:
            # (a copy or a slice of the model: the history is still the training's, as
            # XGBoost's evals_result)
            returned.evals_result, returned.eval_rounds = booster.evals_result, \
                booster.eval_rounds
        booster = returned
    memory.stop()
    booster.memory_report = memory.report(shardset, evaluation.sets)
    return booster


def check_base_margins(parts: list, eval_parts: list, n_groups: int) -> None:
    """ValueError when the parts' base margins (XGBoost's base_margin) do not fit: given for
    some training parts only, or of a width other than 1 (one output) or n_groups."""
    given = {p.base_margin is not None for p in parts}
    if len(given) > 1:
        raise ValueError("base_margin: some parts of the training data have one and some do "
                         "not; give every row a base margin, or none")
    for part in [p for p in parts] + [p for e, _, _ in eval_parts for p in e]:
        if part.base_margin is not None:
            predictor.check_margin_width(part.base_margin, n_groups, "this training")


def _attach_queries(backend, shardset: ShardSet, parts: list, one_query: bool) -> None:
    """Give every shard its rows' ``ranking.QueryGroups`` (query weights normalised over every
    process). A part split into pages (``device_memory_limit``) is refused: a query's
    gradients need all its rows at once. one_query: data without ids is one query (the
    metrics' meaning, XGBoost's), else refused (a ranking objective needs the ids)."""
    if len(shardset.part_rows) != len(parts):
        if one_query:
            raise ValueError("a ranking metric of the training data needs it in device memory: "
                             "the training data is larger than device_memory_limit (or the "
                             "device's free memory), and paged training cannot rank a query "
                             "split between pages; raise the limit, or evaluate a copy of the "
                             "training data (a held-out set: (X.copy(), y)), which is ranked "
                             "as it is predicted")
        raise ValueError("ranking trains in device memory only: the training data is larger "
                         "than device_memory_limit (or the device's free memory), and paged "
                         "training cannot rank a query split between pages; raise the limit, "
                         "or use more workers")
    shards = shardset.shards
    qids = [None if parts[i].qid is None else backend.asarray(parts[i].qid[r0:r1])
            for i, r0, r1 in shardset.part_rows]
    weights = None if shards[0].weight is None else [s.weight for s in shards]
    for shard, queries in zip(shards, ranking.part_queries(
            backend.xp, qids, weights, shardset.collective, "the training data",
            n_rows=[r1 - r0 for _, r0, r1 in shardset.part_rows] if one_query else None)):
        shard.queries = queries
