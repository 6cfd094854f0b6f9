"""Attention as one kernel (`autosched.model.attention`): the chain becomes one call of one kernel
that computes what the chain did, and graphs that are not an attention are left alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tvm
from helpers import relax_calls
from model_files import write_token_block_pt2
from tvm import relax
from tvm.s_tir.meta_schedule import ScheduleRule
from tvm.s_tir.meta_schedule.schedule_rule import AutoInline

from autosched.admission import program_json
from autosched.model.attention import attention_kernels
from autosched.model.compile import check_outputs, compile_untuned
from autosched.model.load import load_model
from autosched.search.space import design_space
from autosched.target import parse_target, to_tvm_target
from autosched.workload import workload_from_ir_json

TOKENS, HEADS, DEPTH = 8, 2, 4
WIDTH = HEADS * DEPTH

Emit = Callable[[relax.Expr], relax.Var]


def _ops(mod: tvm.IRModule) -> list[str]:
    """The operators ``main`` calls, and for each call of a kernel its name."""
    return [
        f"call_tir {call.args[0].name_hint}"
        if call.op.name == "relax.call_tir"
        else call.op.name.removeprefix("relax.")
        for call in relax_calls(mod)
    ]


def _run(mod: tvm.IRModule, inputs: list[np.ndarray]) -> list[np.ndarray]:
    executable = tvm.compile(mod, target=to_tvm_target(parse_target(None)))
    machine = relax.VirtualMachine(executable, tvm.cpu())
    outputs = machine["main"](*(tvm.runtime.tensor(array) for array in inputs))
    if isinstance(outputs, tvm.runtime.Tensor):
        outputs = [outputs]
    return [output.numpy() for output in outputs]


def _prepared(mod: tvm.IRModule) -> tvm.IRModule:
    return relax.transform.DeadCodeElimination()(attention_kernels(mod))


def _self_attention(
    *,
    tokens: int = TOKENS,
    mask: np.ndarray | None = None,
    guard: str | None = "nan",
    axis: int = -1,
    probabilities_out: bool = False,
) -> tvm.IRModule:
    """PyTorch's export of self-attention on a combined projection ``(1, tokens, 3 * WIDTH)``:
    the query, keys and values sliced out and split into heads, the query and keys each
    scaled by ``DEPTH ** -0.25``, the mask added, the softmax (over ``axis``) with its guard
    (``"nan"``: ONNX exports' ``where(isnan(p), 0, p)``, ``"rows"``: torch.export's
    ``_safe_softmax``, zero where a row is all minus infinity), the weighted sum of the values
    and the heads merged back. With ``probabilities_out`` the softmax is an output of the
    function too."""
    builder = relax.BlockBuilder()
    qkv = relax.Var("qkv", relax.TensorType((1, tokens, 3 * WIDTH), "float32"))
    quarter = relax.const(np.float32(DEPTH**-0.25))
    with builder.function("main", [qkv]):
        with builder.dataflow():
            emit: Emit = builder.emit

            def heads(part: int) -> relax.Var:
                sliced = emit(
                    relax.op.strided_slice(
                        qkv, axes=[2], begin=[part * WIDTH], end=[(part + 1) * WIDTH]
                    )
                )
                split = emit(relax.op.reshape(sliced, (1, tokens, HEADS, DEPTH)))
                return emit(relax.op.permute_dims(split, [0, 2, 1, 3]))

            query = emit(relax.op.multiply(heads(0), quarter))
            keys = emit(relax.op.permute_dims(heads(1), [0, 1, 3, 2]))
            keys = emit(relax.op.multiply(keys, quarter))
            scores = emit(relax.op.matmul(query, keys))
            if mask is not None:
                scores = emit(relax.op.add(scores, relax.const(mask)))
            probabilities = emit(relax.op.nn.softmax(scores, axis=axis))
            weights = probabilities
            if guard == "nan":
                nan = emit(relax.op.isnan(probabilities))
                weights = emit(relax.op.where(nan, relax.const(np.float32(0)), probabilities))
            elif guard == "rows":
                masked = emit(relax.op.equal(scores, relax.const(np.float32(-np.inf))))
                seen = emit(relax.op.astype(relax.op.logical_not(masked), "int8"))
                any_seen = emit(relax.op.max(seen, axis=[3], keepdims=True))
                empty = emit(relax.op.logical_not(relax.op.astype(any_seen, "bool")))
                zeros = relax.const(np.zeros((1, HEADS, tokens, tokens), np.float32))
                weights = emit(relax.op.where(empty, zeros, probabilities))
            context = emit(relax.op.matmul(weights, heads(2)))
            merged = emit(relax.op.permute_dims(context, [0, 2, 1, 3]))
            result: relax.Expr = emit(relax.op.reshape(merged, (1, tokens, WIDTH)))
            if probabilities_out:
                result = relax.Tuple([result, probabilities])
            output = builder.emit_output(result)
        builder.emit_func_output(output)
    return builder.get()


def _causal_mask() -> np.ndarray:
    """Minus infinity above the diagonal, as GPT-2's and LLaMA's exports fold their masks."""
    upper = np.triu(np.ones((TOKENS, TOKENS), dtype=bool), k=1)
    return np.where(upper, -np.inf, 0).astype(np.float32).reshape(1, 1, TOKENS, TOKENS)


def _qkv(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, (1, TOKENS, 3 * WIDTH)).astype(np.float32)


@pytest.mark.parametrize(
    ("mask", "guard"),
    [(None, "nan"), (_causal_mask(), "nan"), (_causal_mask(), None), (_causal_mask(), "rows")],
    ids=["unmasked", "causal", "causal-unguarded", "causal-rows-guarded"],
)
def test_an_attention_becomes_one_kernel_of_the_same_values(
    mask: np.ndarray | None, guard: str | None
) -> None:
    mod = _self_attention(mask=mask, guard=guard)
    fused = _prepared(mod)
    # the slices, transposes, scalings, matmuls, softmax and guard are one kernel; the reshape
    # that merges the heads is all that is left around it
    assert _ops(fused) == ["call_tir attention", "reshape"]
    inputs = [_qkv()]
    (expected,) = _run(mod, inputs)
    (computed,) = _run(fused, inputs)
    np.testing.assert_allclose(computed, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("guard", ["nan", "rows"])
def test_a_row_masked_out_weighs_nothing_as_the_guard_says(guard: str) -> None:
    mask = _causal_mask()
    mask[..., 3, :] = -np.inf  # the fourth query sees no key: its softmax is NaN, then zero
    mod = _self_attention(mask=mask, guard=guard)
    (expected,) = _run(mod, [_qkv()])
    (computed,) = _run(_prepared(mod), [_qkv()])
    assert not np.isnan(computed).any()
    np.testing.assert_array_equal(computed[0, 3], np.zeros(WIDTH, np.float32))
    np.testing.assert_allclose(computed, expected, rtol=1e-5, atol=1e-6)


def test_each_exponential_is_computed_once_and_rows_normalised_after_the_weighted_sum() -> None:
    kernel = _prepared(_self_attention(mask=_causal_mask()))["attention"]
    script = kernel.script()
    # one fast exponential (2^n built by reinterpreting its exponent bits) in the whole kernel;
    # the exponentials a stage of their own, weighted into a sum that the result divides
    assert script.count("T.reinterpret") == 1, script
    assert [
        block for block in ("score_exp", "weighted_sum", "context") if block not in script
    ] == []


def test_a_softmax_over_another_axis_or_probabilities_used_elsewhere_stay_as_they_are() -> None:
    for mod in (_self_attention(axis=2), _self_attention(probabilities_out=True)):
        tvm.ir.assert_structural_equal(attention_kernels(mod), mod)


def test_the_kernel_is_a_program_the_search_admits_and_schedules() -> None:
    fused = _prepared(_self_attention(mask=_causal_mask()))
    target = parse_target(None)
    kernel = fused["attention"].without_attr("op_pattern")
    workload = workload_from_ir_json(program_json(kernel), name="attention")
    assert design_space(workload, target, seed=1).schedules


@pytest.mark.parametrize("tokens", [TOKENS, 16])
def test_the_keys_are_copied_next_to_each_other_in_whole_vectors(tokens: int) -> None:
    kernel = _prepared(_self_attention(tokens=tokens))["attention"].without_attr("op_pattern")
    sch = tvm.s_tir.Schedule(kernel)
    (keys,) = sch.get(sch.get_sblock("keys_t")).writes
    assert [int(extent) for extent in keys.source.shape] == [1, HEADS, DEPTH, 16]
    # MetaSchedule's inlining leaves the copy, a transpose, where it is: the scores read it
    inline = next(rule for rule in ScheduleRule.create("llvm") if isinstance(rule, AutoInline))
    (inlined,) = inline.apply(sch, sch.get_sblock("keys_t"))
    assert inlined.get_sblock("keys_t")


def test_a_transformer_block_from_pytorch_runs_its_attention_as_one_kernel(
    tmp_path: Path,
) -> None:
    target = parse_target(None)
    model = load_model(write_token_block_pt2(tmp_path / "block.pt2"))
    ops = _ops(model.mod)
    assert "call_tir attention" in ops and "nn.softmax" not in ops, ops
    check = check_outputs(model, compile_untuned(model, target), target)
    assert check.reference == "PyTorch eager" and check.max_abs_error < 1e-5
