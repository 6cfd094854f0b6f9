"""Conventions shared by the built-in workload definitions: the float dtypes they accept and the
precision they accumulate in. The registry machinery itself lives in ``_registry``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tvm import te
from tvm.tirx import Expr

from autosched.workloads._registry import Param

FLOAT_DTYPES = ("float32", "float64", "float16")


def dtype_param() -> Param:
    return Param("dtype", str, "float32", "element type of inputs and outputs", FLOAT_DTYPES)


def accumulation_dtype(dtype: str) -> str:
    """float16 sums and exponentials run in float32, as half-precision kernels do in practice."""
    return "float32" if dtype == "float16" else dtype


def to_accumulation(array: np.ndarray) -> np.ndarray:
    """``array`` in its accumulation dtype, for numpy references."""
    return array.astype(accumulation_dtype(str(array.dtype)))


def compute_accumulated(
    shape: tuple[int, ...], fcompute: Callable[..., Expr], dtype: str, name: str
) -> te.Tensor:
    """``te.compute`` of ``fcompute`` (a reduction in the accumulation dtype), cast to ``dtype``.

    When the two dtypes differ the reduction is its own stage, ``{name}_acc``, followed by a cast
    stage ``name``: TE allows no cast around a reduction.
    """
    if accumulation_dtype(dtype) == dtype:
        return te.compute(shape, fcompute, name=name)
    partial = te.compute(shape, fcompute, name=f"{name}_acc")
    return te.compute(shape, lambda *i: partial(*i).astype(dtype), name=name)
