"""Transposes that only move axes of extent 1, as reshapes (`autosched.model.transposes`)."""

from __future__ import annotations

import numpy as np
import tvm
from helpers import relax_ops, run_relax
from tvm import relax

from autosched.model.prepare import for_inference
from autosched.model.tasks import fuse
from autosched.model.transposes import unit_transposes_as_reshapes
from autosched.target import parse_target

TOKENS, FEATURES = 8, 16


def _multihead_projection() -> tvm.IRModule:
    """``nn.MultiheadAttention``'s output projection on a batch-first input of batch 1, as
    PyTorch exports it: tokens moved first, a 2-d matmul with its bias, the batch moved back
    first, the residual added."""
    rng = np.random.default_rng(0)
    weight = relax.const(rng.uniform(-1, 1, (FEATURES, FEATURES)).astype(np.float32))
    bias = relax.const(rng.uniform(-1, 1, FEATURES).astype(np.float32))
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, TOKENS, FEATURES), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            emit = builder.emit
            tokens_first = emit(relax.op.permute_dims(x, [1, 0, 2]))
            flat = emit(relax.op.reshape(tokens_first, (TOKENS, FEATURES)))
            projected = emit(relax.op.add(relax.op.matmul(flat, weight), bias))
            unflat = emit(relax.op.reshape(projected, (TOKENS, 1, FEATURES)))
            batch_first = emit(relax.op.permute_dims(unflat, [1, 0, 2]))
            output = builder.emit_output(relax.op.add(x, batch_first))
        builder.emit_func_output(output)
    return builder.get()


def test_a_transpose_of_a_unit_axis_is_a_reshape_of_the_same_values() -> None:
    mod = _multihead_projection()
    rewritten = unit_transposes_as_reshapes(mod)
    assert "permute_dims" not in relax_ops(rewritten)
    x = np.random.default_rng(1).uniform(-1, 1, (1, TOKENS, FEATURES)).astype(np.float32)
    np.testing.assert_array_equal(run_relax(rewritten, x), run_relax(mod, x))


def test_the_residual_add_then_fuses_into_the_projection() -> None:
    target = parse_target(None)
    kernels = [
        name
        for name, func in fuse(for_inference()(_multihead_projection()), target).functions_items()
        if isinstance(func, tvm.tirx.PrimFunc)
    ]
    # one matmul with its bias and the residual add; the reshapes around it are views
    matmuls = [name.name_hint for name in kernels if "matmul" in name.name_hint]
    assert len(matmuls) == 1 and matmuls[0].startswith("fused_matmul_add_add"), kernels
    assert all("transpose" not in name.name_hint for name in kernels), kernels


def test_a_transpose_that_moves_elements_stays() -> None:
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, TOKENS, FEATURES), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            output = builder.emit_output(relax.op.permute_dims(x, [0, 2, 1]))
        builder.emit_func_output(output)
    mod = builder.get()
    tvm.ir.assert_structural_equal(unit_transposes_as_reshapes(mod), mod)
