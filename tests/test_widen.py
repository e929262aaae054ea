"""One compiled signature for arrays of any layout: ``backend.cpu_widen.Widened``."""
import numpy as np
import pytest
from numba import njit

import gbflow
from gbflow.backend import cpu_round
from gbflow.backend.cpu_widen import ANY, ANY_READ_ONLY, READ_ONLY, Widened


@njit(cache=False)
def _row_sums(matrix, out):
    for i in range(matrix.shape[0]):
        total = 0.0
        for j in range(matrix.shape[1]):
            total += matrix[i, j]
        out[i] = total


def test_c_fortran_strided_and_read_only_matrices_share_one_compiled_signature():
    call = Widened(_row_sums, {0: ANY_READ_ONLY, 1: ANY})
    base = np.arange(24.0).reshape(4, 6)
    read_only = base.copy()
    read_only.flags.writeable = False
    expected = base.sum(axis=1)
    for matrix in (base, np.asfortranarray(base), np.hstack([base, base])[:, :6], read_only):
        out = np.zeros(4)
        call(matrix, out)
        assert np.array_equal(out, expected)
    strided_out = np.zeros(8)[::2]
    call(base, strided_out)
    assert np.array_equal(strided_out, expected)
    assert len(_row_sums.signatures) == 1
    (matrix_type, out_type), = _row_sums.signatures
    assert (matrix_type.layout, matrix_type.mutable) == ("A", False)
    assert (out_type.layout, out_type.mutable) == ("A", True)
    call(base.astype(np.float32), np.zeros(4))  # another dtype: a signature of its own
    assert len(_row_sums.signatures) == 2


def test_read_only_keeps_the_layout_and_refuses_unknown_widenings():
    @njit(cache=False)
    def first(values):
        return values[0]
    call = Widened(first, {0: READ_ONLY})
    assert call(np.arange(3.0)) == 0.0 and call(np.arange(3.0)[::-1]) == 2.0
    assert [(t.layout, t.mutable) for (t,) in first.signatures] == [("C", False), ("A", False)]
    with pytest.raises(ValueError, match="unknown widening"):
        Widened(first, {0: "C"})
    with pytest.raises(ValueError, match="outside the 1 parameters of first"):
        Widened(first, {1: READ_ONLY})


def test_values_numba_types_by_more_than_their_class_are_keyed_by_their_type():
    """A compiled entry is reused only for arguments of the same numba types: an int beyond
    int64 and a named tuple get entries of their own, not an int64's or a plain tuple's."""
    from collections import namedtuple

    @njit(cache=False)
    def echo(value):
        return value
    call = Widened(echo, {})
    assert call(3) == 3 and call(1 << 63) == 1 << 63
    Pair = namedtuple("Pair", "a b")
    assert type(call((1, 2))) is tuple and type(call(Pair(1, 2))) is Pair
    assert call(np.float32(1.5)) == 1.5 and call(True) is True


def test_padded_and_unpadded_bins_train_with_one_compiled_round():
    """28 features' bins are a strided view of 32-byte padded rows, 32 features' fill them (a
    C-contiguous matrix): the second training compiles no new round grower."""
    rng = np.random.default_rng(3)
    trained = []
    for n_features in (28, 32):
        X = rng.standard_normal((300, n_features)).astype(np.float32)
        y = (X[:, 0] > 0).astype(np.float32)
        gbflow.train(X, y, {"max_depth": 2, "objective": "binary:logistic"},
                     num_boost_round=2, verbose=False)
        trained.append(len(cpu_round._grow_round.signatures))
    assert trained[0] == trained[1]
    assert all((bins.layout, bins.mutable) == ("A", False)
               for bins, *_ in cpu_round._grow_round.signatures)
