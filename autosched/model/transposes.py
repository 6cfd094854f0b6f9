"""Transposes that only move axes of extent 1, as the reshapes they are.

PyTorch's ``nn.MultiheadAttention`` (in ``nn.TransformerEncoder`` and torchvision's ViT) works
on ``(tokens, batch, features)``: a batch-first input of batch 1 is transposed to
``(tokens, 1, features)`` before the input projection and back after the output projection.
Such a transpose keeps every element where it was; as a ``permute_dims`` it is a copy of the
activation, a kernel of its own, and ``FuseOps`` fuses no transpose into a matmul's epilogue, so
the residual add after the output projection ran as another (with the transpose). As a reshape
it costs nothing, and ``matmuls_in_their_batches`` (``autosched.model.prepare``) then multiplies
in the tokens' own shape, taking the residual add into the matmul's epilogue.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from autosched.model.relax_ir import rewrite_calls, static_shape


@tvm.transform.module_pass(opt_level=0, name="UnitTransposesAsReshapes")
def unit_transposes_as_reshapes(
    mod: tvm.IRModule, _context: tvm.transform.PassContext
) -> tvm.IRModule:
    """Every ``permute_dims`` of a static shape whose axes of extent other than 1 keep their
    order, as a ``reshape`` to its result's shape. Run ``RemoveRedundantReshape`` after it, so
    that reshapes in a row become one."""

    def as_reshape(call: relax.Call, _matches: object) -> relax.Expr:
        (data,) = call.args
        shape = static_shape(data)
        if shape is None:
            return call
        axes = call.attrs.axes
        order = range(len(shape) - 1, -1, -1) if axes is None else [int(a) for a in axes]
        moved = [axis % len(shape) for axis in order if shape[axis] != 1]
        if moved != sorted(moved):
            return call
        return relax.op.reshape(data, [shape[axis] for axis in order])

    return rewrite_calls(mod, is_op("relax.permute_dims")(wildcard()), as_reshape)
