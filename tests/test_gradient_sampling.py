"""Gradient-based row sampling (``sampling_method="gradient_based"``, XGBoost's Minimal Variance
Sampling): the threshold keeps the subsample's share of rows in expectation, draws and weights
do not depend on how rows are split, and the model learns at least as well as uniform sampling
of the same share."""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import make_table

import gbflow
from gbflow import sampling
from gbflow.collective import LOCAL
from gbflow.metrics import auc


def _pairs(n=50_000, seed=0):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(n) * rng.exponential(1.0, n)  # heavy-tailed gradients
    h = rng.random(n) * 0.25
    g[:100] = h[:100] = 0.0  # rows sampled out before (zero pairs): never kept
    return g, h


def _combined(g, h):
    return np.sqrt(g * g + sampling.MVS_LAMBDA * (h * h)).astype(np.float32)


@pytest.mark.parametrize("rate", [0.9, 0.5, 0.2, 0.05, 0.001])
def test_the_threshold_keeps_the_subsample_share_in_expectation(rate):
    g, h = _pairs()
    c = _combined(g, h)
    mu = sampling.gradient_threshold(np, LOCAL, [c], len(g), rate)
    expected = np.minimum(1.0, c.astype(np.float64) / mu).sum()
    # at least the target, at most one bucket's relative width (2**-11) of the rows above it
    assert rate * len(g) <= expected * (1 + 1e-12) <= rate * len(g) * (1 + 2**-10)
    assert mu > 0


def test_sampled_pairs_are_reweighted_by_their_probability():
    """Kept rows of c < mu carry pair * mu / c, rows of c >= mu their own pair, the others 0;
    about the subsample's share is kept, none of the zero pairs, and the draws are unbiased
    (the sampled gradients' absolute sum close to the full one)."""
    g, h = _pairs(200_000, seed=1)
    gs, hs = g.copy(), h.copy()
    sampling.gradient_based_sample(np, LOCAL, [gs], [hs], [0], len(g), 7, 3, 0, 0.2)
    c = _combined(g, h).astype(np.float64)
    mu = sampling.gradient_threshold(np, LOCAL, [_combined(g, h)], len(g), 0.2)
    kept = gs != 0
    assert not kept[:100].any()
    assert abs(kept.mean() - 0.2) < 0.005
    sure = c >= mu
    assert kept[sure].all() and np.array_equal(gs[sure], g[sure])
    drawn = kept & ~sure
    assert np.array_equal(gs[drawn], g[drawn] * (mu / c[drawn]))
    assert np.array_equal(hs[drawn], h[drawn] * (mu / c[drawn]))
    assert np.all(hs[~kept] == 0)
    assert abs(np.abs(gs).sum() / np.abs(g).sum() - 1) < 0.02


def test_the_sample_does_not_depend_on_how_rows_are_split():
    g, h = _pairs(30_000, seed=2)
    whole_g, whole_h = g.copy(), h.copy()
    sampling.gradient_based_sample(np, LOCAL, [whole_g], [whole_h], [0], len(g), 5, 2, 1, 0.3)
    bounds = [0, 1, 7000, 7001, 20_000, len(g)]
    parts_g = [g[a:b].copy() for a, b in zip(bounds[:-1], bounds[1:])]
    parts_h = [h[a:b].copy() for a, b in zip(bounds[:-1], bounds[1:])]
    sampling.gradient_based_sample(np, LOCAL, parts_g, parts_h, bounds[:-1], len(g), 5, 2, 1,
                                   0.3)
    assert np.array_equal(np.concatenate(parts_g), whole_g)
    assert np.array_equal(np.concatenate(parts_h), whole_h)
    # nor on the blocks of rows its per-row steps take (an offset given as an int or as the
    # rows' global numbers)
    for offsets in ([0], [np.arange(len(g))]):
        blocked_g, blocked_h = g.copy(), h.copy()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sampling, "SAMPLE_BLOCK_ROWS", 4099)
            sampling.gradient_based_sample(np, LOCAL, [blocked_g], [blocked_h], offsets, len(g),
                                           5, 2, 1, 0.3)
        assert np.array_equal(blocked_g, whole_g) and np.array_equal(blocked_h, whole_h)
    # another round, output or seed draws other rows
    other_g, other_h = g.copy(), h.copy()
    sampling.gradient_based_sample(np, LOCAL, [other_g], [other_h], [0], len(g), 5, 3, 1, 0.3)
    assert not np.array_equal(other_g != 0, whole_g != 0)


def test_gradient_based_sampling_learns_at_least_as_well_as_uniform():
    """Binary, 20% of the rows a tree: held-out auc of gradient-based sampling at least uniform
    sampling's (less 0.002) and within 0.03 of no sampling; a subsample of 1 samples nothing
    (the unsampled model, byte for byte); the parameter is in the model file only when set."""
    df = make_table(n_rows=20_000, task="binary", seed=5)
    train, test = df.iloc[:15_000], df.iloc[15_000:]
    base = {"objective": "binary:logistic", "max_depth": 4, "learning_rate": 0.1}

    def fit(**params):
        return gbflow.train(train, label="y", params={**base, **params}, num_boost_round=80,
                            verbose=False)

    def held_out(booster):
        return auc(test["y"].to_numpy(), booster.predict(test).to_numpy())

    full = fit()
    uniform = held_out(fit(subsample=0.2))
    gradient = fit(subsample=0.2, sampling_method="gradient_based")
    assert held_out(gradient) >= uniform - 0.002
    assert held_out(gradient) >= held_out(full) - 0.03
    assert json.loads(gradient.to_json())["params"]["sampling_method"] == "gradient_based"
    assert "sampling_method" not in json.loads(full.to_json())["params"]
    unsampled = json.loads(fit(sampling_method="gradient_based").to_json())
    assert unsampled["trees"] == json.loads(full.to_json())["trees"]


@pytest.mark.parametrize("rate", [0.5, 0.1, 0.01])
def test_reweighted_pairs_stay_within_the_reweighted_bounds(rate):
    """A bounded loss's bounds (logistic's |g| <= 1, h <= 1/4) widened by ``reweighted_bounds``
    hold every sampled pair, also where mu lies beyond the largest c (tiny gradients
    everywhere but a few rows), so training keeps bound-derived fixed-point scales."""
    rng = np.random.default_rng(int(rate * 1000))
    n = 100_000
    p = rng.random(n) ** 8  # most probabilities near 0: tiny gradients
    g, h = p - (rng.random(n) < p), p * (1 - p)
    g[:3], h[:3] = 1.0, 0.25  # a few rows at the bounds
    bounds = sampling.reweighted_bounds(np.array([[1.0, 0.25]]), rate)
    for seed in range(3):
        gs, hs = g.copy(), h.copy()
        sampling.gradient_based_sample(np, LOCAL, [gs], [hs], [0], n, seed, 0, 0, rate)
        assert np.abs(gs).max() <= bounds[0, 0] and np.abs(hs).max() <= bounds[0, 1]
        assert np.any(np.abs(gs) > np.abs(g))  # pairs were scaled up
