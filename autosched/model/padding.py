"""Matmuls by a constant weight whose rows or columns no tiling can split, padded ahead.

MetaSchedule tiles a loop by factors of its extent. The columns of ``x @ W`` vectorize only
where their count N has a factor a vector takes: GPT-2's language-model head has N = 50,257 =
29 x 1,733, and its 64x768 by 768x50,257 matmul ran at 126 GFLOP/s, 39 ms of the model's 66,
where its other matmuls ran near 190. The rows M of ``x`` are the other axis of the register
tile that each loaded vector of ``W`` is used across: ViT-B/16's 197 tokens (a prime) leave one
row a tile, and its dense layers ran at 90 GFLOP/s.

Where ``W`` is a constant, it gets zero columns in front up to the next multiple of
`COLUMN_MULTIPLE`, once, as the model is prepared (the constant is folded: nothing runs at
inference); where ``x`` has an indivisible row count, a ``pad`` gives it zero rows in front up
to the next multiple of `ROW_MULTIPLE` (a copy of ``x``: in the kernel that computes ``x``
where that kernel is elementwise, as an activation's, else a kernel of its own, as after a layer
norm). The matmul computes the padded product, and a ``strided_slice`` keeps the model's M and
N.

Why in front: a slice from index 0 reads ``out[i, j]`` for ``out[i, j]``, which TVM's pattern
analysis takes for an elementwise operator; ``FuseOps`` then fuses it into the matmul, whose
output loops have the indivisible extents again. Sliced from an offset, it is an injective
operator, which stays out of the matmul's kernel: a copy of the output, with the bias and
activation after it, small beside the product. Only weights of at least `MIN_COLUMNS` columns
and inputs of at least `MIN_ROWS` rows are padded: the padding then adds under 4% of the work.
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

ROW_MULTIPLE = 8
"""What a padded input's row count is a multiple of: register tiles of 2, 4 or 8 rows."""

MIN_ROWS = 192
"""The fewest rows an input must have to be padded (fewer rows pad relatively more, and their
products are small)."""


def _pad(extent: int, multiple: int, least: int) -> int:
    """How many zeros pad ``extent`` to a multiple of ``multiple``; 0 below ``least``."""
    return 0 if extent < least else -extent % multiple


@tvm.transform.module_pass(opt_level=0, name="MatmulsPadded")
def matmuls_padded(mod: tvm.IRModule, _context: tvm.transform.PassContext) -> tvm.IRModule:
    """Every ``matmul(x, W)`` of a 2-d float32 constant ``W``, whose columns (at least
    `MIN_COLUMNS`) are not a multiple of `COLUMN_MULTIPLE` or whose input's rows (at least
    `MIN_ROWS`) are not a multiple of `ROW_MULTIPLE`, as the matmul of both with zero rows and
    columns in front up to the next multiples, the output sliced past them."""

    def padded(call: relax.Call, _matches: object) -> relax.Expr:
        data, weight = call.args
        shape, data_shape = static_shape(weight), static_shape(data)
        if shape is None or data_shape is None or len(shape) != 2 or len(data_shape) < 2:
            return call
        values = weight.value.numpy()
        if values.dtype != np.float32:
            return call
        rows, columns = data_shape[-2], shape[1]
        row_pad = _pad(rows, ROW_MULTIPLE, MIN_ROWS)
        column_pad = _pad(columns, COLUMN_MULTIPLE, MIN_COLUMNS)
        if not row_pad and not column_pad:
            return call
        if row_pad:
            widths = [0] * (2 * len(data_shape))
            widths[2 * (len(data_shape) - 2)] = row_pad
            data = relax.op.nn.pad(data, widths)
        if column_pad:
            weight = relax.const(np.pad(values, ((0, 0), (column_pad, 0))))
        product = relax.op.matmul(data, weight, out_dtype=call.attrs.out_dtype)
        last = len(data_shape) - 1
        axes, begin, end = [], [], []
        for axis, pad, extent in ((last - 1, row_pad, rows), (last, column_pad, columns)):
            if pad:
                axes.append(axis)
                begin.append(pad)
                end.append(pad + extent)
        return relax.op.strided_slice(product, axes=axes, begin=begin, end=end)

    return rewrite_calls(mod, is_op("relax.matmul")(wildcard(), is_const()), padded)
