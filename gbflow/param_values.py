"""Parsing and checking parameter values: numbers, byte counts, flags, quantiles, lists of pairs."""
from __future__ import annotations

import math
import numbers

import numpy as np


def as_number(name, value, kind=float):
    """A parameter's value as a finite int/float: TypeError for non-numbers (bools and strings
    included), ValueError for NaN/inf and for fractional values of integer parameters."""
    noun = "an integer" if kind is int else "a number"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"parameter {name} must be {noun}, got {type(value).__name__} {value!r}")
    if isinstance(value, numbers.Integral):  # exact, however large
        if kind is int:
            return int(value)
        try:
            float(value)
        except OverflowError:
            raise ValueError(f"parameter {name} must be finite, got an integer beyond the "
                             f"range of floats") from None
    if not math.isfinite(float(value)):
        raise ValueError(f"parameter {name} must be finite, got {value!r}")
    if kind is int and not float(value).is_integer():
        raise ValueError(f"parameter {name} must be a whole number, got {value!r}")
    return kind(float(value)) if kind is float else int(float(value))


_BYTE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(name: str, value) -> int:
    """A byte count from an int or a string such as "8GB", "512 MiB", "1.5e9" (dask's units:
    KB/MB/GB decimal, KiB/MiB/GiB binary); errors name the parameter."""
    text = str(value).strip().lower().replace(" ", "")
    number = text.rstrip("kmgtib")
    unit = text[len(number):]
    try:
        count = float(number) * _BYTE_UNITS[unit]
    except (KeyError, ValueError):
        raise ValueError(f"parameter {name} must be a byte count such as 8000000000 or '8GB', "
                         f"got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(count) or count < 1:
        raise ValueError(f"parameter {name} must be at least 1 byte, got {value!r}")
    return int(count)


def quantile_alphas(value) -> tuple[float, ...]:
    """quantile_alpha's quantiles: a number, or a list, tuple or 1-D array of k >= 1 of them
    (XGBoost's list), each in (0, 1]; errors name the parameter and the value at fault."""
    several = isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and
                                                   value.ndim > 0)
    if isinstance(value, np.ndarray) and value.ndim > 1:
        raise ValueError(f"parameter quantile_alpha must be a number or a flat list of them, got "
                         f"an array of shape {value.shape}")
    entries = list(value) if several else [value]
    # a float32 as the decimal it prints as (XGBoost reads its parameters as text: 0.3, not
    # the float32's 0.30000001192...)
    entries = [float(str(e)) if isinstance(e, np.floating) and e.itemsize < 8 else
               e.item() if isinstance(e, np.generic) else e for e in entries]
    if not entries:
        raise ValueError("parameter quantile_alpha is an empty list; give at least one quantile "
                         "in (0, 1], e.g. 0.5 or [0.1, 0.5, 0.9]")
    alphas = []
    for i, entry in enumerate(entries):
        name = f"quantile_alpha (entry {i} of {len(entries)})" if several else "quantile_alpha"
        alpha = as_number(name, entry)
        if not 0 < alpha <= 1:
            raise ValueError(f"parameter {name} must lie in (0, 1], got {entry!r}")
        alphas.append(alpha)
    return tuple(alphas)


def flag_value(merged: dict, name: str):
    """A True/False parameter's value (XGBoost's 0/1 too), or None when not given."""
    if name not in merged:
        return None
    flag = merged[name]
    if flag not in (True, False, 0, 1) or isinstance(flag, float):
        raise TypeError(f"parameter {name} must be True or False, got {flag!r}")
    return bool(flag)


def params_from_pairs(pairs) -> dict:
    """XGBoost's other form of params, a list of (name, value) pairs: a name given again
    replaces its value, except eval_metric, whose values are collected (XGBoost's way to ask
    for several metrics)."""
    out: dict = {}
    for pair in pairs:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
            raise TypeError(f"params given as a list must hold (name, value) pairs, got "
                            f"{pair!r}")
        name, value = pair
        if name == "eval_metric" and name in out:
            before = out[name]
            out[name] = [*(before if isinstance(before, (list, tuple)) else [before]),
                         *(value if isinstance(value, (list, tuple)) else [value])]
        else:
            out[name] = value
    return out


def device_name(value, devices: tuple) -> str:
    """The device parameter's value as one of ``devices`` ("auto", "cpu", "cuda"), taking
    XGBoost's "gpu" for "cuda"; an ordinal ("cuda:1") is refused, naming the way to pick a GPU."""
    if value == "gpu":
        return "cuda"
    if isinstance(value, str) and value.startswith(("cuda:", "gpu:")):
        raise ValueError(f"parameter device={value!r}: gbflow trains on the current CUDA device "
                         f"and takes no ordinal; give device='cuda' and pick the GPU with "
                         f"cupy.cuda.Device(i).use() or CUDA_VISIBLE_DEVICES (on Dask, each "
                         f"worker uses its own)")
    if not isinstance(value, str) or value not in devices:
        raise ValueError(f"parameter device must be one of {', '.join(map(repr, devices))} "
                         f"(or XGBoost's 'gpu'), got {value!r}")
    return value
