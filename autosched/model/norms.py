"""Normalizations written out by an exporter, as the one operator each is: the RMS norm of
LLaMA and T5 (``x * rsqrt(mean(x^2) + eps) * weight``) comes from PyTorch as a power, a mean,
an addition, a square root, a reciprocal and two products.

TVM's ``FuseOps`` splits that chain in two kernels: the squares, then the mean with the rest,
so every norm writes the squared activation out and reads it back. As ``R.nn.rms_norm`` it is
one kernel (TOPI's: the row's sum of squares, then the scaled row), whose epilogue can take the
elementwise operators after it.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, wildcard

from autosched.model.relax_ir import rewrite_calls, static_shape


@tvm.transform.module_pass(opt_level=0, name="RmsNormsAsOneOperator")
def rms_norms_as_one_operator(
    mod: tvm.IRModule, _context: tvm.transform.PassContext
) -> tvm.IRModule:
    """Every ``x * (1 / sqrt(mean(x^2, axis=-1, keepdims) + eps))`` (the square a power of 2 or
    ``x * x``, the reciprocal of the root a division of 1 or an ``rsqrt``) of a float32 ``x``,
    times a constant weight of the last axis's extent or not, as ``R.nn.rms_norm(x, weight)``
    over the last axis (a weight of ones where it had none). Run ``DeadCodeElimination`` after
    it: the chain it replaces is left unused."""
    x = wildcard()
    square = is_op("relax.power")(x, is_const()) | is_op("relax.multiply")(x, x)
    mean = is_op("relax.mean")(square)
    shifted = is_op("relax.add")(mean, is_const())
    inverse = is_op("relax.divide")(is_const(), is_op("relax.sqrt")(shifted)) | is_op(
        "relax.rsqrt"
    )(shifted)
    normed = is_op("relax.multiply")(x, inverse) | is_op("relax.multiply")(inverse, x)
    weight = is_const()
    weighted = is_op("relax.multiply")(weight, normed) | is_op("relax.multiply")(normed, weight)

    def as_rms_norm(call: relax.Call, matches: dict) -> relax.Expr:
        data = matches[x]
        shape = static_shape(data)
        if shape is None or not shape or str(data.ty.dtype) != "float32":
            return call
        epsilon = _epsilon(matches, square, mean, shifted, inverse)
        if epsilon is None:
            return call
        scale = matches.get(weight) if weighted in matches else None
        if scale is None:
            scale = relax.const(np.ones(shape[-1], dtype="float32"))
        else:
            rows = (1,) * (len(shape) - 1)
            if static_shape(scale) not in ((shape[-1],), (*rows, shape[-1])):
                return call
            if str(scale.ty.dtype) != "float32":
                return call
            scale = relax.op.reshape(scale, [shape[-1]])
        return relax.op.nn.rms_norm(data, scale, axes=[-1], epsilon=epsilon)

    return rewrite_calls(mod, weighted | normed, as_rms_norm)


def _epsilon(
    matches: dict,
    square: relax.dpl.DFPattern,
    mean: relax.dpl.DFPattern,
    shifted: relax.dpl.DFPattern,
    inverse: relax.dpl.DFPattern,
) -> float | None:
    """The epsilon of a matched RMS norm, when its constants are those of one: the power 2, the
    mean over the last axis with its axis kept, the numerator 1, a non-negative epsilon."""
    squared = matches[square]
    if squared.op.name == "relax.power" and _scalar(squared.args[1]) != 2.0:
        return None
    averaged = matches[mean]
    ndim = len(static_shape(averaged) or ())
    axes = averaged.attrs.axis
    if not averaged.attrs.keepdims or axes is None or [int(a) % ndim for a in axes] != [ndim - 1]:
        return None
    reciprocal = matches[inverse]
    if reciprocal.op.name == "relax.divide" and _scalar(reciprocal.args[0]) != 1.0:
        return None
    epsilon = _scalar(matches[shifted].args[1])
    return epsilon if epsilon is not None and epsilon >= 0 else None


def _scalar(expr: relax.Expr) -> float | None:
    """The value of a constant of one element."""
    if not isinstance(expr, tvm.ir.expr.Constant) or isinstance(expr, tvm.tirx.IntImm):
        return None
    array = expr.value.numpy()
    return float(array.reshape(-1)[0]) if array.size == 1 else None
