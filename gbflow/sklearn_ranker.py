"""scikit-learn's learning-to-rank estimator on top of ``gbflow.train``: ``GBFlowRanker``."""
from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.utils.validation import check_is_fitted

from . import metrics
from .inputs import is_dask_collection
from .objectives import RANKING
from .sklearn import GBFlowRegressor, _store

__all__ = ["GBFlowRanker"]


def _group_qid(group, n_rows: int, what: str):
    """XGBoost's ``group`` (each query's row count, queries one after another) as (n,) query
    ids 0, 0, ..., 1, ...; ValueError unless the counts are whole numbers adding up to the
    rows."""
    sizes = np.asarray(group)
    if sizes.ndim != 1 or not np.issubdtype(sizes.dtype, np.number) or \
            (sizes.size and (not np.all(np.isfinite(sizes)) or sizes.min() < 0 or
                             not np.all(sizes == np.round(sizes)))) or \
            int(sizes.sum()) != n_rows:
        raise ValueError(f"group of {what} must hold each query's row count (whole numbers "
                         f"adding up to its {n_rows} rows), got {sizes.size} numbers adding up "
                         f"to {sizes.sum() if sizes.size else 0}")
    return np.repeat(np.arange(sizes.size), sizes.astype(np.int64))


def _check_group_weights(weight, group, what: str) -> None:
    """ValueError for weights with empty queries (group sizes of 0): XGBoost counts their
    weights in its query-weight normalisation, which gbflow's queries of rows cannot hold.
    (Otherwise ``group``'s query ids ascend in its order: ``_row_weights`` reads one weight a
    group as one a query.)"""
    if weight is not None and group is not None and (np.asarray(group) == 0).any():
        raise ValueError(f"{what} with group sizes of 0 (empty queries): give the queries "
                         f"without the empty ones, or qid= with a weight a row")


def _split_qid(X, qid, what: str, group=None):
    """(features, (n,) int64 query ids): ``qid`` as given, ``group``'s query sizes, or a
    DataFrame's "qid" column (XGBoost's XGBRanker takes any one), which then is not a
    feature."""
    column = isinstance(X, pd.DataFrame) and "qid" in X.columns
    given = [name for name, value in (("qid", qid), ("group", group)) if value is not None]
    if len(given) + column > 1:
        found = given + (["a 'qid' column in X"] if column else [])
        raise ValueError(f"{what}: give the queries once, as qid, group or a 'qid' column; "
                         f"got {' and '.join(found)}")
    if group is not None:
        return X, _group_qid(group, X.shape[0], what)
    if column:
        return X.drop(columns="qid"), X["qid"].to_numpy()
    if qid is None:
        raise ValueError(f"{what}: a ranker needs each row's query: pass qid= (or a DataFrame "
                         f"with a 'qid' column)")
    values = np.asarray(qid)
    if values.ndim != 1 or len(values) != X.shape[0]:
        raise ValueError(f"qid of {what} must have shape ({X.shape[0]},), got {values.shape}")
    return X, values


def _row_weights(weight, qid: np.ndarray, what: str):
    """XGBRanker's query weights as row weights: one weight per query (in ascending query id
    order, XGBoost's group weights), or one per row (the same within each query, checked by
    training; where every query has one row the two counts agree, and the weights are taken
    by row). None stays None."""
    if weight is None:
        return None
    weight = np.asarray(weight, dtype=np.float64)
    ids, position = np.unique(qid, return_inverse=True)
    if weight.ndim == 1 and len(weight) == len(qid):  # (one row a query: taken by row)
        return weight
    if weight.ndim == 1 and len(weight) == len(ids):
        return weight[position]
    raise ValueError(f"{what} must hold one weight per query ({len(ids)}, in ascending query "
                     f"id order) or one per row ({len(qid)}), got shape {weight.shape}")


def query_cost_metric(*functions):
    """XGBRanker's callable eval_metric ``f(y_true, y_score)``: each query's value from its rows
    (in row order; 1.0 for a query of one row, as XGBoost's), averaged weighted by the
    queries' row counts (XGBoost's ``ltr_metric_decorator`` weighs them by ``get_group()``, the
    counts). On the host, a call a query."""
    names = [getattr(f, "__name__", type(f).__name__) for f in functions]

    def custom_metric(prediction, data):
        qid = data.get_qid()
        if len(qid) != data.num_row():
            raise ValueError("a ranker's callable eval_metric needs each evaluation set's "
                             "query ids")
        _, query = np.unique(qid, return_inverse=True)
        order = np.argsort(query, kind="stable")
        sizes = np.bincount(query)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        y, score = data.get_label()[order], np.asarray(prediction)[order]
        out = []
        for name, f in zip(names, functions):
            values = [1.0 if b - a == 1 else float(f(y[a:b], score[a:b]))
                      for a, b in zip(bounds[:-1], bounds[1:])]
            out.append((name, float(np.average(values, weights=sizes))))
        return out
    return custom_metric


class GBFlowRanker(GBFlowRegressor):
    """Learning to rank (XGBoost's XGBRanker): LambdaMART trees that score documents so that
    sorting each query's documents by score orders them by relevance.

    Parameters: ``GBFlowRegressor``'s, with objective "rank:ndcg" (default; None too), "rank:map"
    or "rank:pairwise" (a callable is not taken: its gradients would not see the queries), and
    XGBoost's ranking parameters:

    lambdarank_pair_method : "topk", default "topk"
        Each of a query's first ``lambdarank_num_pair_per_sample`` documents (by the current
        scores) is paired with every document below it ("mean", sampled pairs, is not
        supported yet).
    lambdarank_num_pair_per_sample : int or None, default None (32)
    lambdarank_normalization, lambdarank_score_normalization : bool, default True
    ndcg_exp_gain : bool, default True
        NDCG's gain 2**label - 1 (labels 0..31), else the label itself.

    The default metric is "ndcg@32" ("map@32" for rank:map); ``score`` returns it. ``predict``,
    ``apply`` and ``score`` take X with a "qid" column too (dropped, as XGBRanker does, unless
    it was a training feature).
    """

    _OBJECTIVE = "rank:ndcg"

    def __init__(self, *, objective="rank:ndcg", n_estimators=100, max_depth=6, learning_rate=0.3,
                 min_child_weight=1.0, gamma=0.0, reg_lambda=1.0, reg_alpha=0.0, subsample=1.0,
                 sampling_method="uniform", colsample_bytree=1.0, colsample_bylevel=1.0,
                 colsample_bynode=1.0, max_bin=256, random_state=0, base_score=None,
                 eval_metric=None, early_stopping_rounds=None, device="auto", sparse_threshold=None,
                 verbose=False, n_jobs=None, enable_categorical=True, max_cat_to_onehot=4,
                 max_cat_threshold=64, cat_smooth=10.0, cat_l2=10.0,
                 cat_noise_penalty=1.0, feature_types=None, verbosity=1,
                 quantile_alpha=0.5, max_delta_step=None, monotone_constraints=None,
                 interaction_constraints=None, lambdarank_pair_method="topk",
                 lambdarank_num_pair_per_sample=None, lambdarank_normalization=True,
                 lambdarank_score_normalization=True, ndcg_exp_gain=True, max_leaves=0,
                 grow_policy="depthwise", missing=np.nan, scale_pos_weight=None,
                 tree_method="hist", importance_type="gain", callbacks=None, **kwargs):
        _store(self, locals())

    def _check_objective(self):
        if self.objective is not None and self.objective not in RANKING:
            raise ValueError(f"GBFlowRanker takes a ranking objective ({', '.join(RANKING)}), "
                             f"got {self.objective!r}; use GBFlowRegressor or GBFlowClassifier")

    _callable_metrics = staticmethod(query_cost_metric)  # XGBRanker's: per query

    def fit(self, X, y, *, group=None, qid=None, sample_weight=None, eval_set=None,
            eval_group=None, eval_qid=None, sample_weight_eval_set=None, verbose=None,
            base_margin=None, base_margin_eval_set=None, xgb_model=None):
        """Train the ranker.

        X : pandas DataFrame, array-like or scipy sparse matrix of shape (n_samples,
            n_features); a DataFrame may hold the query ids as a column named "qid".
        y : array-like of shape (n_samples,), each document's relevance (whole numbers
            0..31 for rank:ndcg, 0 or 1 for rank:map).
        qid : array-like of shape (n_samples,), each row's query id (whole numbers; a query's
            rows need not be adjacent). group: XGBoost's alternative, each query's row count
            (queries one after another); eval_group: the same per eval_set entry. The queries
            are given once: qid, group or a "qid" column.
        sample_weight : array-like, optional: one weight per query (ascending query id), as
            XGBoost's, or one per row, the same within each query.
        eval_set : list of (X, y) pairs, optional, named "validation_0", ...; eval_qid: their
            query ids (or a "qid" column of each X); sample_weight_eval_set: their weights.
        verbose : bool or int, optional.
        base_margin, base_margin_eval_set, xgb_model : as ``GBFlowRegressor.fit``'s (each row's
            starting score; a model to continue).

        Returns self. Dask DataFrames: use ``gbflow.train(ddf, label, qid=column)``.
        """
        if is_dask_collection(X):
            raise TypeError("GBFlowRanker trains on in-memory data; for a Dask DataFrame use "
                            "gbflow.train(ddf, label, params={'objective': 'rank:ndcg'}, "
                            "qid='query column')")
        X, qid = _split_qid(X, qid, "X", group)
        _check_group_weights(sample_weight, group, "sample_weight")
        sample_weight = _row_weights(sample_weight, qid, "sample_weight")
        eval_set = list(eval_set) if eval_set is not None else None
        for name, value in (("eval_qid", eval_qid), ("eval_group", eval_group)):
            if value is not None and eval_set is None:  # (the estimators' rule)
                raise ValueError(f"{name} was given without eval_set")
            if value is not None and len(value) != len(eval_set):
                raise ValueError(f"{name} has {len(value)} entries but eval_set has "
                                 f"{len(eval_set)}")
        eval_qid = list(eval_qid) if eval_qid is not None else [None] * len(eval_set or [])
        eval_group = list(eval_group) if eval_group is not None else \
            [None] * len(eval_set or [])
        weights = list(sample_weight_eval_set) if sample_weight_eval_set is not None else \
            [None] * len(eval_set or [])
        pairs, qids = [], []
        for i, (pair, q, g, w) in enumerate(zip(eval_set or [], eval_qid, eval_group,
                                                weights)):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise TypeError(f"eval_set[{i}] must be an (X, y) pair, got "
                                f"{type(pair).__name__}")
            data, q = _split_qid(pair[0], q, f"eval_set[{i}]", g)
            _check_group_weights(w, g, f"sample_weight_eval_set[{i}]")
            pairs.append((data, pair[1]))
            qids.append(q)
            weights[i] = _row_weights(w, q, f"sample_weight_eval_set[{i}]")
        return self._fit(X, y, sample_weight, pairs or None,
                         weights if sample_weight_eval_set is not None else None, verbose,
                         base_margin, qid=qid, eval_qid=qids or None,
                         base_margin_eval_set=base_margin_eval_set, xgb_model=xgb_model)

    def _features(self, X):
        """X without its "qid" column (XGBRanker's ``_get_qid``), unless that was a feature."""
        check_is_fitted(self)
        if isinstance(X, pd.DataFrame) and "qid" in X.columns and \
                "qid" not in getattr(self, "feature_names_in_", ()):
            return X.drop(columns="qid")
        return X

    def predict(self, X, output_margin=False, iteration_range=None, base_margin=None):
        """The scores (``GBFlowRegressor.predict``) of X, which may hold a "qid" column."""
        return super().predict(self._features(X), output_margin, iteration_range, base_margin)

    def apply(self, X, iteration_range=None) -> np.ndarray:
        """The leaves (``GBFlowRegressor.apply``) of X, which may hold a "qid" column."""
        return super().apply(self._features(X), iteration_range)

    def transform(self, X):
        """X's features with their scores appended (``GBFlowRegressor.transform``); a "qid"
        column of X is left out, as from ``get_feature_names_out``."""
        return super().transform(self._features(X))

    def score(self, X, y, qid=None, sample_weight=None) -> float:
        """The model's ranking metric (the last ``eval_metric``, else the objective's default,
        "ndcg@32") on X, y and its query ids (``qid``, or a "qid" column of X). Raises
        NotFittedError before fit."""
        check_is_fitted(self)
        X, qid = _split_qid(X, qid, "X")
        names = self.booster_.params.metrics
        name = names[-1] if names else self.booster_.params.loss.default_metric
        weight = _row_weights(sample_weight, qid, "sample_weight")
        return metrics.evaluate(name, np.asarray(y, dtype=np.float64), self.predict(X), weight,
                                self.booster_.params, qid=qid)
