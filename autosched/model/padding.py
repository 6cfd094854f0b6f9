"""Matmuls whose output columns no vector can tile, their constant weight padded ahead.

MetaSchedule tiles a loop by factors of its extent, so the columns of ``x @ W`` vectorize only
where their count N has a factor a vector takes. GPT-2's language-model head has N = 50,257 =
29 x 1,733: its 64x768 by 768x50,257 matmul ran at 126 GFLOP/s, 39 ms of the model's 66, where
its other matmuls ran near 190. Where ``W`` is a constant, it gets zero columns in front up to
the next multiple of `COLUMN_MULTIPLE`, once, as the model is prepared (the constant is folded:
nothing runs at inference); the matmul computes the padded columns, and a ``strided_slice``
keeps the model's N.

Why in front: a slice from column 0 reads ``out[i, j]`` for ``out[i, j]``, which TVM's pattern
analysis takes for an elementwise operator; ``FuseOps`` then fuses it into the matmul, whose
output loop has the indivisible N again. Sliced from an offset, it is an injective operator,
which stays out of the matmul's kernel: a copy of the output, small beside the product. Only
weights of at least `MIN_COLUMNS` columns are padded: the padding then adds under 4% of the
work.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, wildcard

from autosched.model.relax_ir import rewrite_calls, static_shape

COLUMN_MULTIPLE = 64
"""What a padded weight's column count is a multiple of: 64 float32 columns are four vectors of
16 lanes (AVX-512) or eight of 8 (AVX2), which tilings of the columns can take."""

MIN_COLUMNS = 2048
"""The fewest columns a weight must have to be padded."""


@tvm.transform.module_pass(opt_level=0, name="MatmulColumnsPadded")
def matmul_columns_padded(mod: tvm.IRModule, _context: tvm.transform.PassContext) -> tvm.IRModule:
    """Every ``matmul(x, W)`` of a 2-d float32 constant ``W`` whose columns (at least
    `MIN_COLUMNS`) are not a multiple of `COLUMN_MULTIPLE`, as the matmul by ``W`` with zero
    columns in front up to the next multiple, the output sliced past them."""

    def padded(call: relax.Call, _matches: object) -> relax.Expr:
        data, weight = call.args
        shape, rows = static_shape(weight), static_shape(data)
        if shape is None or rows is None or len(shape) != 2 or len(rows) < 2:
            return call
        columns = shape[1]
        if columns < MIN_COLUMNS or columns % COLUMN_MULTIPLE == 0:
            return call
        values = weight.value.numpy()
        if values.dtype != np.float32:
            return call
        pad = -columns % COLUMN_MULTIPLE
        product = relax.op.matmul(
            data, relax.const(np.pad(values, ((0, 0), (pad, 0)))), out_dtype=call.attrs.out_dtype
        )
        axis = len(rows) - 1
        return relax.op.strided_slice(product, axes=[axis], begin=[pad], end=[pad + columns])

    return rewrite_calls(mod, is_op("relax.matmul")(wildcard(), is_const()), padded)
