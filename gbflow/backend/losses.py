"""The gradient expressions of the losses that have backend kernels, written once against the
array namespace: the NumPy twins, the GPU's kernels and the objectives compute these."""
from __future__ import annotations

import numpy as np

from .. import _dtypes
from .common import sigmoid_with


def weighted_rows(xp, grad, hess, weight):
    """float32 gradient and hessian, times ``weight`` (their shape) when given."""
    if weight is not None:
        grad = grad * weight
        hess = hess * weight
    return grad.astype(_dtypes.GRADIENT), hess.astype(_dtypes.GRADIENT)


def sigmoid_of(xp, x):
    """1 / (1 + exp(-x)), a new array of x's shape, dtype and device (x is not changed).

    On arrays the steps run in place in the one result array (``sigmoid_with``, the backends'
    ``sigmoid`` kernels' operations: a large array's temporaries fault their pages in again),
    and the operations and their order are the expression's, so the values are too. A value
    traced by ``Backend.fused`` (CuPy's fusion: one kernel, no temporaries) takes the plain
    expression, which the tracer reads, and so do a 0-d or whole-number array."""
    if not isinstance(x, xp.ndarray) or x.ndim == 0 or x.dtype.kind != "f":
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + xp.exp(-x))
    return sigmoid_with(xp, x, xp.empty_like(x))


def logistic_gradients_with(xp, margin, label, weight):
    """The logistic loss's float32 gradient p - label and hessian max(p (1 - p), MIN_HESSIAN),
    p = sigmoid(margin), each times ``weight`` when given (None: unweighted), in the array
    namespace ``xp``: new arrays of the arguments' (broadcast) shape. Arrays take the in-place
    steps; a value traced by ``Backend.fused`` the plain expressions (the same values: p (1 -
    p) and (1 - p) p are one product)."""
    p = sigmoid_of(xp, margin)
    if not isinstance(p, xp.ndarray):
        hess = xp.maximum(p * (1.0 - p), _dtypes.MIN_HESSIAN)
        return weighted_rows(xp, p - label, hess, weight)
    hess = xp.subtract(1.0, p)
    hess *= p
    xp.maximum(hess, _dtypes.MIN_HESSIAN, out=hess)
    in_place = p.shape == label.shape and np.result_type(p.dtype, label.dtype) == p.dtype
    grad = xp.subtract(p, label, out=p) if in_place else p - label
    return weighted_rows(xp, grad, hess, weight)


def softmax_with(xp, margin):
    """Each row's softmax of (n, k) float64 ``margin``: a new (n, k) float64 array; the row's
    largest margin is taken off first, and the row's sum is NumPy's (or CuPy's) sum."""
    shifted = margin - margin.max(axis=1, keepdims=True)
    e = xp.exp(shifted)
    return e / e.sum(axis=1, keepdims=True)


def softmax_gradients_with(xp, margin, label, weight):
    """multi:softprob's (n, k) float32 gradient p - onehot(label) and hessian max(2 p (1 - p),
    MIN_HESSIAN), p = ``softmax_with(margin)``, each row times its ``weight`` when given
    ((n,) or None), in the array namespace ``xp``: new arrays. label: (n,) class ids."""
    p = softmax_with(xp, margin)
    onehot = (label[:, None] == xp.arange(margin.shape[1])[None, :]).astype(xp.float64)
    grad = p - onehot
    hess = xp.maximum(2.0 * p * (1.0 - p), _dtypes.MIN_HESSIAN)
    return weighted_rows(xp, grad, hess, None if weight is None else weight[:, None])


def check_loss_arguments(margin, label, weight, ndim: int, name: str) -> None:
    """A gradient kernel's arguments, checked alike by every version (a fast kernel must not
    read past an array): ``margin`` of ``ndim`` dimensions (1: a column; 2: (n, k)), ``label``
    and ``weight`` (or None) (n,), on either device. ValueError naming the kernel otherwise."""
    shape = getattr(margin, "shape", ())
    if len(shape) != ndim:
        raise ValueError(f"{name}: margin must have {ndim} dimension(s), got shape {shape}")
    for what, array in (("label", label), ("weight", weight)):
        if array is not None and getattr(array, "shape", None) != shape[:1]:
            raise ValueError(f"{name}: {what} must have shape {shape[:1]} (margin's rows), got "
                             f"{getattr(array, 'shape', ())}")
