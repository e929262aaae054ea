"""Cross-part reductions that the Dask collective relies on: exact sums and the sketch do not
depend on how rows are split, and evaluation sets split into parts give the same model file."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import make_table

from gbflow import boosting, collective, fixed_point, inputs
from gbflow.backend import get_backend
from gbflow.evaluation import EvalOptions
from gbflow.params import make_params


def _splits(n: int, rng, k: int) -> list[np.ndarray]:
    cuts = np.sort(rng.choice(np.arange(1, n), size=k - 1, replace=False))
    return np.split(np.arange(n), cuts)


def test_exact_sum_with_a_collective_matches_the_local_one():
    class Recorder(collective.LocalCollective):
        """One process, but counts the reductions made."""
        calls = 0

        def allreduce_sum(self, array):
            Recorder.calls += 1
            return array

    values = [np.array([0.1, 0.2]), np.array([], dtype=np.float64), np.array([1e-3])]
    recorded = fixed_point.exact_sum(np, values, collective=Recorder())
    assert recorded == fixed_point.exact_sum(np, values)
    assert Recorder.calls == 2  # the count and the total: every process makes the same calls


@pytest.mark.parametrize("task, metric", [("regression", "rmse"), ("regression", "mae"),
                                          ("binary", "auc"), ("binary", "aucpr"),
                                          ("multiclass", "mlogloss"), ("multiclass", "auc")])
def test_an_evaluation_set_split_into_parts_gives_the_same_model(task, metric):
    params = {"regression": {}, "binary": {"objective": "binary:logistic"},
              "multiclass": {"objective": "multi:softprob", "num_class": 3}}[task]
    params = make_params({**params, "max_depth": 3, "eval_metric": metric})
    df = make_table(n_rows=2000, task=task, seed=2)
    train = [inputs.load(df.iloc[:1500], "y")]
    valid = df.iloc[1500:]
    one = boosting.fit(get_backend("cpu"), train, params, 12,
                       [(inputs.load(valid, "y"), "v")], EvalOptions(early_stopping_rounds=2),
                       verbose=False)
    pieces = [inputs.load(valid.iloc[a:b], "y") for a, b in [(0, 1), (1, 260), (260, 500)]]
    split = boosting.fit(get_backend("cpu"), train, params, 12, [(pieces, "v")],
                         EvalOptions(early_stopping_rounds=2), verbose=False)
    assert split.to_json() == one.to_json()
    assert split.evals_result == one.evals_result


def test_the_sketch_gathers_few_values_and_still_cuts_exactly():
    """The middle radix pass keeps the fine summary (what Dask workers exchange) to about 1/256
    of the candidate buckets' values, and the cuts stay the exact quantiles."""
    from test_sketch import _reference_cuts

    from gbflow import sketch

    rng = np.random.default_rng(3)
    n = 100_000
    X = np.stack([rng.normal(size=n), 1.0 + rng.integers(0, 50_000, n) * 1e-9,  # one bucket
                  rng.integers(0, 255, n), rng.integers(0, 256, n),
                  np.round(rng.standard_cauchy(n), 2)], axis=1).astype(np.float32)
    cuts = sketch.compute_cuts(np, [X], None, 256)
    for f in range(X.shape[1]):
        assert np.array_equal(cuts.feature_cuts(f), _reference_cuts(X[:, f], None, 256)), f
    coarse = sketch.coarse_summary(np, X, None)
    candidates = sketch.candidate_buckets(coarse, 255)
    slots = sketch.bucket_slots(candidates)
    middle = sketch.middle_summary(np, X, None, slots)
    fine = sketch.fine_summary(np, X, None, slots,
                               sketch.candidate_sub_buckets(coarse, slots, middle, 255))
    assert len(fine.key) < 0.05 * X.size


@pytest.mark.parametrize("name,num_class", [("binary:logistic", None), ("multi:softprob", 3)])
def test_gradient_bounds_hold_for_any_margin(name, num_class):
    """Training takes its fixed-point scales from these bounds (no per-round max): a gradient
    or hessian above them could overflow the exact int64 sums."""
    from gbflow import objectives
    objective = objectives.get_objective(name, num_class)
    rng = np.random.default_rng(5)
    n = 4000
    margin = rng.normal(scale=30.0, size=(n, objective.n_groups))
    margin[:10] = 700.0  # exp overflows in the sigmoid
    margin[10:20] = -700.0
    label = rng.integers(0, num_class or 2, size=n).astype(np.float64)
    weight = rng.uniform(0.0, 3.0, size=n)
    for w in (None, weight):
        g, h = objective.gradients(np, margin, label, w)
        bounds = objective.gradient_bounds(1.0 if w is None else float(w.max()))
        assert bounds.shape == (objective.n_groups, 2)
        assert (np.abs(g) <= bounds[:, 0]).all() and (np.abs(h) <= bounds[:, 1]).all()
        assert np.abs(g).max() > 0.5 * bounds[:, 0].max()  # not uselessly loose
    assert objectives.get_objective("reg:squarederror", None).gradient_bounds(1.0) is None


def test_aligned_slots_pack_arrays_in_8_byte_slots():
    """The one layout of packed uploads, split results and to_host_all's buffer: each array
    starts 8-byte aligned right after the previous one's padded end."""
    from gbflow.backend.common import aligned_slots
    offsets, total = aligned_slots([8, 3, 0, 16, 1])
    assert offsets == [0, 8, 16, 16, 32] and total == 40
    assert aligned_slots([]) == ([], 0)


def test_packed_empty_lays_arrays_out_in_aligned_slots():
    """Views of one allocation at aligned_slots' offsets, of the shapes and dtypes asked, each
    its own memory (writing one leaves the others as they are)."""
    from gbflow.backend.common import aligned_slots, packed_empty
    layout = [((3,), np.bool_), ((2, 2), np.int64), ((0,), np.float64), ((5,), np.int32)]
    arrays = packed_empty(np, layout)
    base = arrays[0].base
    offsets, _ = aligned_slots([3, 32, 0, 20])
    for a, (shape, dtype), offset in zip(arrays, layout, offsets):
        assert a.shape == shape and a.dtype == dtype
        if a.size:
            assert np.shares_memory(a, base) and \
                a.__array_interface__["data"][0] - base.__array_interface__["data"][0] == offset
    for i, a in enumerate(arrays):
        a[...] = i + 1
    assert [int(a.sum()) for a in arrays] == [3, 8, 0, 20]


def test_a_staged_forest_walks_as_the_flat_forest_and_keeps_its_arrays(device):
    """The evaluation's staged forest (each tree at a fixed stride, padded; written into the
    same device arrays round after round) adds the same margins, bit for bit, as the flat
    forest of the same trees; its arrays move only when the tree count or the stride grows
    (a single leaf first: the stride then grows to the real trees')."""
    import dataclasses

    from gbflow import binning, predictor

    backend = get_backend(device)
    df = make_table(n_rows=600, task="multiclass", seed=5)
    params = {"objective": "multi:softprob", "num_class": 3, "max_depth": 4, "device": device}
    data = inputs.load(df, "y")
    booster = boosting.fit(backend, [data], make_params(params), 6, verbose=False)
    trees = booster.trees
    assert len({t.n_nodes for t in trees}) > 1  # trees of several sizes share a stride
    leaf = dataclasses.replace(
        trees[0], feature=np.array([-1], np.int32), bin_threshold=trees[0].bin_threshold[:1],
        threshold=trees[0].threshold[:1], default_left=trees[0].default_left[:1],
        left=np.array([-1], np.int32), right=np.array([-1], np.int32),
        value=trees[0].value[:1], gain=trees[0].gain[:1], cover=trees[0].cover[:1])
    rounds = [[leaf, leaf, leaf]] + [trees[r:r + 3] for r in range(0, len(trees), 3)]
    X = predictor.BinnedRows(binning.quantize(backend, data.X, booster.cuts))
    staged = predictor.StagedForest(backend)
    flat_margin = backend.xp.zeros((len(df), 3))
    staged_margin = backend.xp.zeros((len(df), 3))
    sizes = []
    for r, round_trees in enumerate(rounds):  # a round's three trees, as evaluation stages
        assert staged.can_stage(round_trees)
        predictor.add_trees(backend, X, predictor.FlatForest.from_trees(round_trees),
                            flat_margin)
        before = staged.forest
        forest = staged.write(round_trees)
        predictor.add_trees(backend, X, forest, staged_margin)
        assert np.array_equal(backend.to_host(staged_margin), backend.to_host(flat_margin)), r
        grew = before is None or len(forest.feature) != len(before.feature)
        assert (forest is before) != grew, r  # the same arrays unless the stride grew
        sizes.append(len(forest.feature))
    assert sizes == sorted(sizes) and sizes[0] == 3 and sizes[-1] > 3
    assert not staged.can_stage([])
    staged.MAX_SLOTS = sizes[-1] - 1  # more padded slots than allowed: the flat forest serves
    assert not staged.can_stage(rounds[-1])
