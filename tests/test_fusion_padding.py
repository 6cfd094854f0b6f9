"""Matmuls whose constant weight has many columns no vector can tile, or whose input has many
rows no register tile can split, padded ahead (`autosched.model.padding`)."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from helpers import relax_calls, relax_ops, run_relax
from tvm import relax

from autosched.model.padding import (
    COLUMN_MULTIPLE,
    MIN_COLUMNS,
    MIN_ROWS,
    ROW_MULTIPLE,
    matmuls_padded,
)
from autosched.model.relax_ir import static_shape
from autosched.model.tasks import fuse
from autosched.target import parse_target

TOKENS, FEATURES = 4, 16


def _head(columns: int, tokens: int = TOKENS) -> tvm.IRModule:
    """A language-model head: ``tokens`` tokens by a constant weight of ``columns`` columns, a
    bias added."""
    rng = np.random.default_rng(0)
    weight = relax.const(rng.uniform(-1, 1, (FEATURES, columns)).astype(np.float32))
    bias = relax.const(rng.uniform(-1, 1, columns).astype(np.float32))
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, tokens, FEATURES), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            logits = builder.emit(relax.op.matmul(x, weight))
            output = builder.emit_output(relax.op.add(logits, bias))
        builder.emit_func_output(output)
    return builder.get()


def test_a_head_of_indivisible_columns_multiplies_padded_columns_and_slices_them_off() -> None:
    columns = MIN_COLUMNS + 5  # as GPT-2's 50,257: no multiple of a vector's lanes
    mod = _head(columns)
    padded = matmuls_padded(mod)
    assert relax_ops(padded) == ["matmul", "strided_slice", "add"]
    (matmul,) = [call for call in relax_calls(padded) if call.op.name == "relax.matmul"]
    weight = matmul.args[1].value.numpy()
    pad = COLUMN_MULTIPLE - 5
    assert weight.shape == (FEATURES, MIN_COLUMNS + COLUMN_MULTIPLE)
    assert not weight[:, :pad].any()  # zero columns in front
    x = np.random.default_rng(1).uniform(-1, 1, (1, TOKENS, FEATURES)).astype(np.float32)
    got = run_relax(padded, x)
    assert got.shape == (1, TOKENS, columns)
    np.testing.assert_allclose(got, run_relax(mod, x), rtol=1e-5, atol=1e-5)


def test_the_slice_stays_out_of_the_padded_matmuls_kernel() -> None:
    fused = fuse(matmuls_padded(_head(MIN_COLUMNS + 5)), parse_target(None))
    kernels = sorted(
        (
            gv.name_hint
            for gv, func in fused.functions.items()
            if isinstance(func, tvm.tirx.PrimFunc)
        ),
        key=lambda name: "strided_slice" in name,
    )
    # the matmul alone, its output loop over the padded columns; the slice with the bias add
    assert len(kernels) == 2
    assert "strided_slice" not in kernels[0] and kernels[0].startswith("matmul")
    assert "strided_slice" in kernels[1] and "add" in kernels[1]


@pytest.mark.parametrize("columns", [MIN_COLUMNS, MIN_COLUMNS - 5, 10])
def test_a_head_of_divisible_or_few_columns_is_left_as_it_is(columns: int) -> None:
    mod = _head(columns)
    tvm.ir.assert_structural_equal(matmuls_padded(mod), mod)


def test_indivisible_tokens_are_multiplied_with_zero_rows_in_front_and_sliced_off() -> None:
    tokens, columns = MIN_ROWS + 5, MIN_COLUMNS + 5  # as ViT's 197 tokens: a prime
    mod = _head(columns, tokens)
    padded = matmuls_padded(mod)
    assert relax_ops(padded) == ["nn.pad", "matmul", "strided_slice", "add"]
    (matmul,) = [call for call in relax_calls(padded) if call.op.name == "relax.matmul"]
    rows = MIN_ROWS + ROW_MULTIPLE
    assert static_shape(matmul) == (1, rows, MIN_COLUMNS + COLUMN_MULTIPLE)
    x = np.random.default_rng(1).uniform(-1, 1, (1, tokens, FEATURES)).astype(np.float32)
    got = run_relax(padded, x)
    assert got.shape == (1, tokens, columns)
    np.testing.assert_allclose(got, run_relax(mod, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tokens", [MIN_ROWS, MIN_ROWS - 5])
def test_divisible_or_few_tokens_are_left_as_they_are(tokens: int) -> None:
    mod = _head(64, tokens)
    tvm.ir.assert_structural_equal(matmuls_padded(mod), mod)
