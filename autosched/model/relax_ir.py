"""Reading and rewriting a model's Relax functions: the static shape of a tensor, the number a
constant holds, and a rewrite applied to every Relax function of a module."""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import relax
from tvm.relax.dpl import DFPattern, rewrite_call


def static_shape(expr: relax.Expr) -> tuple[int, ...] | None:
    """The shape of a tensor-valued expression when every dimension of it is a known number."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    dims = ty.shape.values
    if not all(isinstance(dim, tvm.tirx.IntImm) for dim in dims):
        return None
    return tuple(int(dim) for dim in dims)


def constant_number(expr: object) -> float | None:
    """The number ``expr`` holds where it is a constant of one number: an integer or float
    immediate, or a tensor constant of one element (of any shape of ones)."""
    if isinstance(expr, tvm.tirx.IntImm | tvm.tirx.FloatImm):
        return float(expr.value)
    if not isinstance(expr, tvm.ir.expr.Constant):
        return None
    array = expr.value.numpy()
    return float(array.reshape(-1)[0]) if array.size == 1 else None


def rewrite_calls(
    mod: tvm.IRModule, pattern: DFPattern, rewriter: Callable[[relax.Call, dict], relax.Expr]
) -> tvm.IRModule:
    """``mod`` with every call of its Relax functions that matches ``pattern`` rewritten."""
    return each_function(mod, lambda func: rewrite_call(pattern, rewriter, func))


def each_function(
    mod: tvm.IRModule, transform: Callable[[relax.Function], relax.Function]
) -> tvm.IRModule:
    """``mod`` with ``transform`` applied to each of its Relax functions."""
    rewritten = mod.clone()
    for var, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewritten.update_func(var, transform(func))
    return rewritten
