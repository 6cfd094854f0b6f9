"""RMS norms written out by an exporter, as one ``R.nn.rms_norm`` (`autosched.model.norms`)."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from autosched.model.norms import rms_norms_as_one_operator
from autosched.model.tasks import fuse
from autosched.target import parse_target, to_tvm_target

SHAPE = (1, 6, 16)


def _ops(mod: tvm.IRModule) -> list[str]:
    names: list[str] = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            names.append(expr.op.name.removeprefix("relax."))

    relax.analysis.post_order_visit(mod["main"], visit)
    return names


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


def _run(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    executable = tvm.compile(mod, target=to_tvm_target(parse_target(None)))
    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize(
    ("weighted", "rsqrt"), [(True, False), (False, False), (True, True)], ids=str
)
def test_an_rms_norm_written_out_is_one_operator_of_the_same_values(
    weighted: bool, rsqrt: bool
) -> None:
    mod = _rms_norm(weighted=weighted, rsqrt=rsqrt)
    rewritten = relax.transform.DeadCodeElimination()(rms_norms_as_one_operator(mod))
    assert "nn.rms_norm" in _ops(rewritten)
    assert not {"power", "mean", "sqrt", "rsqrt"} & set(_ops(rewritten))
    x = np.random.default_rng(0).uniform(-3, 3, SHAPE).astype(np.float32)
    np.testing.assert_allclose(_run(rewritten, x), _run(mod, x), rtol=1e-5, atol=1e-6)


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
