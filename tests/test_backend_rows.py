"""The CPU backend's row blocks (``Backend.row_blocks``): a row-wise function run on blocks of
rows in threads gives the values of one call, bit for bit."""
from __future__ import annotations

import numba
import numpy as np
import pytest

from gbflow import objectives
from gbflow.backend import cpu
from gbflow.backend.cpu import CpuBackend
from gbflow.params import make_params

pytestmark = pytest.mark.skipif(numba.get_num_threads() < 2,
                                reason="row blocks need two threads for numba's kernels")


def _counted(function, lengths: list):
    def counted(*arrays):
        lengths.append(len(arrays[0]))
        return function(*arrays)
    return counted


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_row_blocks_give_one_calls_values(dtype):
    """Logistic gradients (weighted; a tuple of arrays back), the sigmoid and softmax
    transforms (2-D margins), on a row count that no block size divides: the same arrays as
    one call, and the work was split."""
    rng = np.random.default_rng(4)
    n = 3 * cpu.ROWS_PER_BLOCK + 1001
    margin = (rng.normal(size=(n, 1)) * 6).astype(dtype)
    margin[-1] = 900.0  # overflows exp in the last block
    label = (rng.random(n) < 0.3).astype(np.float64)
    weight = rng.random(n) + 0.5
    backend = CpuBackend()
    logistic = objectives.get_objective("binary:logistic")
    softmax = make_params({"objective": "multi:softprob", "num_class": 5}).loss
    wide = (rng.normal(size=(n, 5)) * 3).astype(dtype)
    cases = [(lambda m, y, w: logistic.row_gradients(np, m, y, w), (margin[:, 0], label, weight)),
             (lambda m: logistic.transform(np, m), (margin,)),
             (lambda m: softmax.eval_transform(np, m), (wide,))]
    for function, arrays in cases:
        lengths: list = []
        got = backend.row_blocks(_counted(function, lengths))(*arrays)
        expected = function(*arrays)
        assert len(lengths) >= 2 and sum(lengths) == n
        pairs = zip(got, expected) if isinstance(expected, tuple) else [(got, expected)]
        for g, e in pairs:
            assert g.dtype == e.dtype and g.shape == e.shape and np.array_equal(g, e)


def test_row_blocks_small_inputs_are_one_call():
    lengths: list = []
    x = np.arange(cpu.ROWS_PER_BLOCK, dtype=np.float64)
    out = CpuBackend().row_blocks(_counted(np.sqrt, lengths))(x)
    assert lengths == [len(x)] and np.array_equal(out, np.sqrt(x))


def test_row_blocks_keep_the_callers_errstate():
    """Blocks in other threads see the calling thread's NumPy error settings: an overflow the
    caller made an error is one in any block."""
    x = np.zeros(4 * cpu.ROWS_PER_BLOCK)
    x[-1] = 1000.0  # in the last block
    exp = CpuBackend().row_blocks(np.exp)
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        exp(x)
    with np.errstate(over="ignore"):
        assert np.isinf(exp(x)[-1])
