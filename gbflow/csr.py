"""Sparse input: the compressed-sparse-row matrix gbflow takes, in the array namespace holding it.

Convention (XGBoost's): an entry absent from the matrix is a *missing* value, exactly like NaN in a
dense matrix; an explicitly stored 0.0 is the value zero. A CSR matrix and the dense matrix with
NaN in its absent places therefore train the same model and get the same predictions.
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class CSR:
    """A (n_rows, n_cols) matrix in canonical CSR form, arrays in one namespace (NumPy or CuPy).

    indptr: (n_rows + 1,) int64, row r's entries at ``indptr[r]:indptr[r + 1]``.
    indices: (nnz,) int32 column ids, strictly ascending within each row (no duplicates).
    data: (nnz,) float32 values (NaN allowed: a stored NaN is missing too).
    n_cols: number of columns. Built by ``backend.frames.csr_from_matrix`` from a scipy.sparse or
    cupyx.scipy.sparse matrix; never modified after that.
    """

    indptr: object
    indices: object
    data: object
    n_cols: int

    @property
    def n_rows(self) -> int:
        return int(self.indptr.shape[0]) - 1

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, int(self.n_cols))

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.indptr.nbytes + self.indices.nbytes + self.data.nbytes)

    def row_ids(self, xp):
        """(nnz,) int64: the row of every entry (in the matrix's namespace ``xp``)."""
        # entry e belongs to the row whose range holds it (xp.repeat with device counts is not
        # in every CuPy version)
        return xp.searchsorted(self.indptr[1:], xp.arange(self.nnz, dtype=xp.int64),
                               side="right").astype(xp.int64)

    def rows(self, start: int, stop: int) -> "CSR":
        """Rows start..stop-1 as a CSR sharing this matrix's entry arrays (indptr rebased)."""
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        return CSR(indptr=self.indptr[start : stop + 1] - lo, indices=self.indices[lo:hi],
                   data=self.data[lo:hi], n_cols=self.n_cols)

    def to_dense(self, xp):
        """(n_rows, n_cols) float32 with NaN in the absent places (a new array; for tests and
        small data)."""
        out = xp.full(self.shape, np.nan, dtype=np.float32)
        out[self.row_ids(xp), self.indices.astype(xp.int64)] = self.data
        return out
