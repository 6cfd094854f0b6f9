"""RMS norms written out by an exporter, as one ``R.nn.rms_norm`` (`autosched.model.norms`)."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from helpers import relax_ops, run_relax
from tvm import relax

from autosched.model.norms import layer_norms_with_their_sums, rms_norms_as_one_operator
from autosched.model.tasks import fuse
from autosched.target import parse_target

SHAPE = (1, 6, 16)


def _rms_norm(*, weighted: bool = True, exponent: float = 2.0, rsqrt: bool = False) -> tvm.IRModule:
    """PyTorch's export of LLaMA's RMS norm: ``weight * (x * (1 / sqrt(mean(x^2) + eps)))``."""
    const = relax.const
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(SHAPE, "float32"))
    weight = np.random.default_rng(1).uniform(0.5, 1.5, SHAPE[-1]).astype(np.float32)
    with builder.function("main", [x]):
        with builder.dataflow():
            squared = builder.emit(relax.op.power(x, const(np.float32(exponent))))
            mean = builder.emit(relax.op.mean(squared, axis=[2], keepdims=True))
            shifted = builder.emit(relax.op.add(mean, const(np.float32(1e-6))))
            if rsqrt:
                inverse = builder.emit(relax.op.rsqrt(shifted))
            else:
                root = builder.emit(relax.op.sqrt(shifted))
                inverse = builder.emit(relax.op.divide(const(np.float32(1)), root))
            result = builder.emit(relax.op.multiply(x, inverse))
            if weighted:
                result = builder.emit(relax.op.multiply(const(weight), result))
            output = builder.emit_output(result)
        builder.emit_func_output(output)
    return builder.get()


@pytest.mark.parametrize(
    ("weighted", "rsqrt"), [(True, False), (False, False), (True, True)], ids=str
)
def test_an_rms_norm_written_out_is_one_operator_of_the_same_values(
    weighted: bool, rsqrt: bool
) -> None:
    mod = _rms_norm(weighted=weighted, rsqrt=rsqrt)
    rewritten = relax.transform.DeadCodeElimination()(rms_norms_as_one_operator(mod))
    assert "nn.rms_norm" in relax_ops(rewritten)
    assert not {"power", "mean", "sqrt", "rsqrt"} & set(relax_ops(rewritten))
    x = np.random.default_rng(0).uniform(-3, 3, SHAPE).astype(np.float32)
    np.testing.assert_allclose(run_relax(rewritten, x), run_relax(mod, x), rtol=1e-5, atol=1e-6)


def test_it_is_one_kernel_where_fuse_ops_made_two() -> None:
    target = parse_target(None)
    kernels = [
        sum(isinstance(func, tvm.tirx.PrimFunc) for _, func in fuse(mod, target).functions_items())
        for mod in (_rms_norm(), rms_norms_as_one_operator(_rms_norm()))
    ]
    assert kernels == [2, 1]


def test_another_power_is_not_a_norm() -> None:
    mod = _rms_norm(exponent=3.0)
    tvm.ir.assert_structural_equal(rms_norms_as_one_operator(mod), mod)


def _layer_norm_of_sum(*, projected: bool) -> tvm.IRModule:
    """``layer_norm(x + position + kind)`` as BERT's embeddings sum them, or, ``projected``,
    ``layer_norm(x @ w + x)``: a residual added to a matmul's result."""
    rng = np.random.default_rng(2)

    def const(*shape: int) -> relax.Expr:
        return relax.const(rng.uniform(-1, 1, shape).astype(np.float32))

    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(SHAPE, "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            if projected:
                first = builder.emit(relax.op.matmul(x, const(SHAPE[-1], SHAPE[-1])))
                total = builder.emit(relax.op.add(first, x))
            else:
                total = builder.emit(relax.op.add(x, const(*SHAPE[1:])))
                total = builder.emit(relax.op.add(total, const(SHAPE[-1])))
            gamma, beta = const(SHAPE[-1]), const(SHAPE[-1])
            output = builder.emit_output(relax.op.nn.layer_norm(total, gamma, beta, axes=[-1]))
        builder.emit_func_output(output)
    return builder.get()


def _kernels(mod: tvm.IRModule) -> list[str]:
    fused = fuse(mod, parse_target(None))
    return sorted(
        var.name_hint
        for var, func in fused.functions_items()
        if isinstance(func, tvm.tirx.PrimFunc)
    )


def test_a_layer_norm_of_a_sum_is_one_kernel_of_the_same_values() -> None:
    mod = _layer_norm_of_sum(projected=False)
    rewritten = relax.transform.DeadCodeElimination()(layer_norms_with_their_sums(mod))
    assert len(_kernels(mod)) == 2 and len(_kernels(rewritten)) == 1
    x = np.random.default_rng(0).uniform(-3, 3, SHAPE).astype(np.float32)
    np.testing.assert_allclose(run_relax(rewritten, x), run_relax(mod, x), rtol=1e-5, atol=1e-5)


def test_a_residual_a_matmul_takes_as_its_epilogue_stays_there() -> None:
    mod = _layer_norm_of_sum(projected=True)
    tvm.ir.assert_structural_equal(layer_norms_with_their_sums(mod), mod)
