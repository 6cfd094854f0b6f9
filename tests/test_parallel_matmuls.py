"""Linear layers that read the same input, combined into one matmul (`autosched.model.parallel`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tvm
from helpers import relax_calls
from model_files import write_token_block_pt2
from tvm import relax

from autosched.model.compile import check_outputs, compile_untuned
from autosched.model.load import load_model
from autosched.model.parallel import parallel_matmuls_combined
from autosched.target import parse_target, to_tvm_target


def _matmuls(mod: tvm.IRModule) -> list[relax.Call]:
    return [call for call in relax_calls(mod) if call.op.name == "relax.matmul"]


def _weight_columns(call: relax.Call) -> int | None:
    weight = call.args[1]
    return int(weight.value.shape[1]) if isinstance(weight, tvm.ir.expr.Constant) else None


def test_the_query_key_and_value_projections_become_one_matmul_of_the_same_values(
    tmp_path: Path,
) -> None:
    target = parse_target(None)
    model = load_model(write_token_block_pt2(tmp_path / "block.pt2"))
    # q, k and v (32 columns each) are one matmul of 96; the output projection and the
    # feed-forward pair stay as they were; the scores and the context are the attention kernel
    columns = sorted(_weight_columns(call) or 0 for call in _matmuls(model.mod))
    assert columns == [32, 32, 64, 96], columns
    check = check_outputs(model, compile_untuned(model, target), target)
    assert check.reference == "PyTorch eager" and check.max_abs_error < 1e-5


def _module(rng: np.random.Generator) -> tuple[tvm.IRModule, list[np.ndarray]]:
    """Six matmuls of one input: two with a bias (added after and before), two without (one of
    them read by a ReLU as well), one whose bias is a row that broadcasts, one by a parameter."""

    def const(*shape: int) -> relax.Expr:
        return relax.const(rng.uniform(-1, 1, shape).astype(np.float32))

    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    p = relax.Var("p", relax.TensorType((8, 5), "float32"))
    with builder.function("main", [x, p]):
        with builder.dataflow():
            first = builder.emit(relax.op.matmul(x, const(8, 6)))
            first = builder.emit(relax.op.add(first, const(6)))
            second = builder.emit(relax.op.matmul(x, const(8, 3)))
            second = builder.emit(relax.op.add(const(3), second))
            third = builder.emit(relax.op.matmul(x, const(8, 2)))
            fourth = builder.emit(relax.op.matmul(x, const(8, 7)))
            rectified = builder.emit(relax.op.nn.relu(fourth))
            broadcast = builder.emit(relax.op.matmul(x, const(8, 4)))
            broadcast = builder.emit(relax.op.add(broadcast, const(4, 4)))
            by_parameter = builder.emit(relax.op.matmul(x, p))
            outputs = (first, second, third, fourth, rectified, broadcast, by_parameter)
            result = builder.emit_output(relax.Tuple(outputs))
        builder.emit_func_output(result)
    inputs = [rng.uniform(-1, 1, shape).astype(np.float32) for shape in ((4, 8), (8, 5))]
    return builder.get(), inputs


def _run(mod: tvm.IRModule, inputs: list[np.ndarray]) -> list[np.ndarray]:
    executable = tvm.compile(mod, target=to_tvm_target(parse_target(None)))
    machine = relax.VirtualMachine(executable, tvm.cpu())
    outputs = machine["main"](*(tvm.runtime.tensor(array) for array in inputs))
    return [output.numpy() for output in outputs]


def test_a_group_shares_input_weight_rows_and_bias_or_none() -> None:
    mod, inputs = _module(np.random.default_rng(0))
    combined = parallel_matmuls_combined(mod)
    # the two with a (N,) bias are one matmul of 9 columns; the plain ones, a broadcasting
    # bias's matmul among them, one of 13; the parameter's matmul stays
    assert sorted(_weight_columns(call) or 0 for call in _matmuls(combined)) == [0, 9, 13]
    for before, after in zip(_run(mod, inputs), _run(combined, inputs), strict=True):
        np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-6)


def test_a_single_layer_or_layers_of_other_inputs_are_left_alone() -> None:
    rng = np.random.default_rng(1)
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    y = relax.Var("y", relax.TensorType((4, 8), "float32"))
    with builder.function("main", [x, y]):
        with builder.dataflow():
            weight = relax.const(rng.uniform(-1, 1, (8, 6)).astype(np.float32))
            first = builder.emit(relax.op.matmul(x, weight))
            second = builder.emit(relax.op.matmul(y, weight))
            result = builder.emit_output(relax.Tuple((first, second)))
        builder.emit_func_output(result)
    mod = builder.get()
    tvm.ir.assert_structural_equal(parallel_matmuls_combined(mod), mod)
