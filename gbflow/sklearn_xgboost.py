"""XGBoost's scikit-learn wrapper conventions of the estimators: parameters, kwargs, accessors."""
from __future__ import annotations

import inspect
import numbers

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .params import ALIASES

# Constructor parameters that are not entries of gbflow.train's params: its own arguments
# (num_boost_round, early_stopping_rounds, verbose, callbacks), what feature_importances_ reads
# (importance_type), and random_state, which becomes the params' "seed" through seed().
NOT_PARAMS = ("n_estimators", "early_stopping_rounds", "verbose", "callbacks",
              "importance_type", "random_state")
DEFAULT_ROUNDS = 100  # n_estimators=None: XGBoost's default


def seed(random_state) -> int:
    """``random_state`` as gbflow's integer ``seed``: None -> 0 (gbflow is deterministic), an
    int as is, a ``np.random.RandomState``/``Generator`` -> one draw from it."""
    if random_state is None:
        return 0
    if isinstance(random_state, numbers.Integral) and \
            not isinstance(random_state, (bool, np.bool_)):
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(np.iinfo(np.int32).max))
    raise ValueError(f"random_state must be None, an int, a numpy RandomState or Generator, "
                     f"got {random_state!r}")


def rounds(n_estimators) -> int:
    """``n_estimators`` as gbflow.train's ``num_boost_round`` (None: XGBoost's default, 100),
    checked here so that the error names the estimator's parameter."""
    if n_estimators is None:
        return DEFAULT_ROUNDS
    if isinstance(n_estimators, (bool, np.bool_)) or \
            not isinstance(n_estimators, numbers.Integral) or n_estimators < 0:
        raise ValueError(f"n_estimators must be a non-negative integer (or None for "
                         f"{DEFAULT_ROUNDS}), got {n_estimators!r}")
    return int(n_estimators)


def _same(a, b) -> bool:
    try:
        return bool(a is b or a == b)
    except (TypeError, ValueError):  # e.g. arrays: not one truth value
        return False


def train_params(estimator, default_objective: str | None, fixed: dict) -> dict:
    """The ``params`` dict for ``gbflow.train`` (validated there): the constructor's parameters
    but ``NOT_PARAMS``, ``random_state`` as ``seed``, XGBoost's extra keyword arguments
    (``estimator.kwargs``) and ``fixed`` (what follows from y: the classifier's objective and
    num_class).

    As in XGBoost's wrapper, None means the default: such parameters are left out. Callables
    are left out too (a callable objective or eval_metric goes to train's ``obj=`` or
    ``custom_metric=``); a callable or None objective is ``default_objective``. A keyword
    argument that is an alias of a constructor parameter (eta, seed, nthread, ...) takes its
    place while that parameter keeps its default; both set is an error naming them."""
    extra = {k: v for k, v in (getattr(estimator, "kwargs", None) or {}).items()
             if v is not None}
    defaults = {name: p.default for name, p in
                inspect.signature(type(estimator).__init__).parameters.items()}
    params = {}
    for name in estimator._get_param_names():
        value = getattr(estimator, name)
        if name == "objective" and (value is None or callable(value)):
            value = default_objective
        if name == "eval_metric" and isinstance(value, (list, tuple)):
            value = [m for m in value if not callable(m)] or None  # callables: custom_metric
        if value is None or callable(value) or (name in NOT_PARAMS and name != "random_state"):
            continue
        canonical = ALIASES.get(name, name)
        alias = next((k for k in extra if ALIASES.get(k, k) == canonical), None)
        if alias is not None:
            if _same(value, defaults.get(name)):
                continue  # the keyword argument says it (XGBoost's wrapper leaves it None)
            raise ValueError(f"{type(estimator).__name__} got {name}={value!r} and "
                             f"{alias}={extra[alias]!r}, the same parameter twice; keep one")
        if name == "random_state":
            name, value = "seed", seed(value)
        params[name] = value
    for name, value in fixed.items():
        if name in extra and not _same(extra.pop(name), value):
            raise ValueError(f"{type(estimator).__name__} sets {name}={value!r} itself (from "
                             f"y), which the keyword argument {name}= contradicts; leave it out")
    return {**params, **extra, **fixed}


class XGBoostConventions:
    """What the estimators take from XGBoost's wrapper beyond scikit-learn's contract.

    ``**kwargs``: further training parameters by gbflow's or XGBoost's names, kept in
    ``self.kwargs`` (set only when given, as XGBoost's wrapper does). ``get_params`` lists them
    beside the constructor's, so ``clone`` keeps them, and ``set_params`` takes any name: one
    that gbflow does not know fails at fit, in ``gbflow.train``'s parameter check, which names
    it. And the fitted model's accessors: ``best_iteration``, ``best_score``,
    ``evals_result()``, ``feature_importances_``."""

    def get_params(self, deep: bool = True) -> dict:
        params = super().get_params(deep)
        params.update(getattr(self, "kwargs", None) or {})
        return params

    def __setstate__(self, state):
        # an estimator pickled by an earlier gbflow lacks the constructor parameters added
        # since: they take their defaults
        for name, parameter in inspect.signature(type(self).__init__).parameters.items():
            if parameter.kind == parameter.KEYWORD_ONLY and name not in state:
                state[name] = parameter.default
        super().__setstate__(state)

    def set_params(self, **params):
        known = set(self._get_param_names())
        extra = {name: params.pop(name) for name in list(params) if name not in known}
        super().set_params(**params)
        if extra:
            self.kwargs = {**(getattr(self, "kwargs", None) or {}), **extra}
        return self

    @property
    def best_iteration(self) -> int:
        """XGBoost's name for ``best_iteration_`` (AttributeError without early stopping)."""
        return self.best_iteration_

    @property
    def best_score(self) -> float:
        """XGBoost's name for ``best_score_`` (AttributeError without early stopping)."""
        return self.best_score_

    def evals_result(self) -> dict:
        """Metric history of the eval_set, as XGBoost gives it:
        ``{"validation_0": {"rmse": [round 1, round 2, ...]}, ...}``. Raises NotFittedError
        before fit and, as XGBoost (whose XGBoostError is a ValueError), ValueError when fit
        had no eval_set (``evals_result_`` is then {})."""
        check_is_fitted(self)
        if not self.evals_result_:
            raise ValueError("no evaluation result: fit was not given an eval_set (pass "
                             "eval_set=[(X_valid, y_valid)] to fit)")
        return self.evals_result_

    @property
    def feature_importances_(self) -> np.ndarray:
        """(n_features_in_,) float64 importances of ``importance_type`` (XGBoost's; None or
        "gain": the mean loss reduction of the feature's splits; "weight", "cover",
        "total_gain", "total_cover"), in training column order, 0.0 for features no split
        uses, normalized to sum to 1 (all zeros when the model has no split). Raises
        NotFittedError before fit, ValueError naming an unknown importance_type."""
        check_is_fitted(self)
        booster = self.booster_
        scores = booster.feature_importances(self.importance_type or "gain")
        values = np.array([scores.get(name, 0.0) for name in booster.feature_names],
                          dtype=np.float64)
        total = values.sum()
        return values / total if total > 0 else values


class SklearnObjective:
    """A callable ``objective``, XGBoost's scikit-learn signature ``obj(y_true, y_pred) ->
    (grad, hess)`` (with a ``sample_weight`` parameter when fit has weights), as
    ``gbflow.train``'s ``obj(margins, data)``, as XGBoost's ``_objective_decorator`` adapts it:
    y_true the encoded labels, y_pred the raw margins ((n,) or (n, n_classes)), both float
    arrays where training runs (NumPy on the CPU), and the weights passed only when there are
    some. A class, not a closure: on Dask it must pickle."""

    def __init__(self, function):
        self.function = function
        try:
            self.takes_weight = "sample_weight" in inspect.signature(function).parameters
        except (TypeError, ValueError):  # a callable without a readable signature
            self.takes_weight = False

    def __call__(self, margins, data):
        weight, label = data.get_weight(), data.get_label()
        if weight.size == 0:
            return self.function(label, margins)
        if not self.takes_weight:
            raise ValueError("the custom objective has no sample_weight parameter, but fit was "
                             "given sample_weight: add one (obj(y_true, y_pred, "
                             "sample_weight)), as XGBoost requires")
        return self.function(label, margins, sample_weight=weight)
