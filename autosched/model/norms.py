"""Normalizations in one kernel where TVM's ``FuseOps`` makes two.

- `rms_norms_as_one_operator`: the RMS norm of LLaMA and T5 (``x * rsqrt(mean(x^2) + eps) *
  weight``) comes from PyTorch as a power, a mean, an addition, a square root, a reciprocal and
  two products, which ``FuseOps`` splits in two kernels (the squares, then the mean with the
  rest), so every norm wrote the squared activation out and read it back. As ``R.nn.rms_norm``
  it is one kernel (TOPI's: the row's sum of squares, then the scaled row).
- `layer_norms_with_their_sums`: a layer norm of a sum (BERT's and GPT-2's token and position
  embeddings, a residual added where no matmul's epilogue took it) is one kernel that adds and
  normalizes, ONNX Runtime's ``SkipLayerNormalization``: ``FuseOps`` fuses no producer into a
  layer norm (TVM marks it fusable like a matmul: with what follows it only).

Both kernels keep a layer norm's pattern, so the elementwise operators after them still fuse.
"""

from __future__ import annotations

import functools

import numpy as np
import tvm
from tvm import relax, topi
from tvm.relax.dpl import is_const, is_op, wildcard

from autosched.model.relax_ir import constant_number, rewrite_calls, static_shape

_FUSABLE_LIKE_A_NORM = 4  # relax's op pattern kOutEWiseFusable, as TVM marks a layer norm
_PRODUCERS_WITH_EPILOGUES = frozenset(
    {"relax.matmul", "relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d", "relax.add"}
)
"""Operators whose kernel already takes an addition after it as its epilogue (an addition:
one of the sum itself): a sum that reads one stays where ``FuseOps`` puts it."""


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
    if squared.op.name == "relax.power" and constant_number(squared.args[1]) != 2.0:
        return None
    averaged = matches[mean]
    ndim = len(static_shape(averaged) or ())
    axes = averaged.attrs.axis
    if not averaged.attrs.keepdims or axes is None or [int(a) % ndim for a in axes] != [ndim - 1]:
        return None
    reciprocal = matches[inverse]
    if reciprocal.op.name == "relax.divide" and constant_number(reciprocal.args[0]) != 1.0:
        return None
    epsilon = constant_number(matches[shifted].args[1])
    return epsilon if epsilon is not None and epsilon >= 0 else None


@tvm.transform.module_pass(opt_level=0, name="LayerNormsWithTheirSums")
def layer_norms_with_their_sums(
    mod: tvm.IRModule, _context: tvm.transform.PassContext
) -> tvm.IRModule:
    """Every ``layer_norm`` of a float32 sum of tensors (``add`` of ``add`` ..., each sum used
    by the next alone) as one kernel of the terms: TOPI's layer norm of TOPI's sum. A sum with
    a term that a matmul, a convolution or another sum computes is left as it is: its addition
    is that kernel's epilogue already. Run ``DeadCodeElimination`` after it."""
    rewriter = _SumsIntoNorms(mod)
    for var, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.graph = _bindings(func)
            rewriter.builder_.update_func(var, rewriter.visit_expr(func))
    return rewriter.builder_.finalize()


def _bindings(func: relax.Function) -> tuple[dict, dict]:
    """The value bound to each variable of ``func``, and how many bindings of its dataflow
    blocks use each (a variable used outside them counts twice)."""
    values: dict[relax.Var, relax.Expr] = {}
    uses: dict[relax.Var, int] = {}
    for block in func.body.blocks if isinstance(func.body, relax.SeqExpr) else []:
        for binding in block.bindings:
            values[binding.var] = binding.value
        if isinstance(block, relax.DataflowBlock):
            for var, users in relax.analysis.udchain(block).items():
                uses[var] = len(users) if isinstance(var, relax.DataflowVar) else 2
    return values, uses


@relax.expr_functor.mutator
class _SumsIntoNorms(relax.PyExprMutator):
    """Emits a layer norm of a sum as one kernel of the sum's terms."""

    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.graph: tuple[dict, dict] = ({}, {})

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        call = binding.value
        terms = self._terms(call.args[0]) if _is_op(call, "relax.nn.layer_norm") else None
        if not terms or len(terms) < 2 or str(call.args[0].ty.dtype) != "float32":
            super().visit_var_binding_(binding)
            return
        _, gamma, beta = call.args
        attrs = call.attrs
        axes = [int(axis) for axis in attrs.axes]
        fused = self.builder_.call_te(
            lambda *tensors: topi.nn.layer_norm(
                functools.reduce(topi.add, tensors[:-2]),
                tensors[-2],
                tensors[-1],
                axis=axes,
                epsilon=float(attrs.epsilon),
            ),
            *(self.visit_expr(expr) for expr in (*terms, gamma, beta)),
            primfunc_name_hint="layer_norm",
            primfunc_attrs={"op_pattern": _FUSABLE_LIKE_A_NORM},
        )
        self.set_var_remap(binding.var, self.builder_.emit(fused, binding.var.name))

    def _terms(self, expr: relax.Expr) -> list[relax.Expr] | None:
        """The terms of the sum ``expr``, each sum in it used by the next alone; None where a
        term is computed by a kernel that takes the addition as its epilogue."""
        values, uses = self.graph
        value = values.get(expr) if isinstance(expr, relax.Var) else None
        if not _is_op(value, "relax.add") or uses.get(expr) != 1:
            return [expr]
        terms = []
        for arg in value.args:
            inner = self._terms(arg)
            if inner is None:
                return None
            terms += inner
        for term in terms:
            producer = values.get(term) if isinstance(term, relax.Var) else None
            if _is_op(producer, *_PRODUCERS_WITH_EPILOGUES):
                return None
        return terms


def _is_op(expr: relax.Expr | None, *names: str) -> bool:
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name in names
