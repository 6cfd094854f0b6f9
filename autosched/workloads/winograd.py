"""Winograd's minimal filtering ``F(4x4, 3x3)`` (Lavin and Gray, "Fast Algorithms for
Convolutional Neural Networks", 2015): its matrices, and ``conv2d_nchw_winograd``, a 3x3 convolution
of stride 1 that takes and gives what ``conv2d_nchw`` does, computed with 4x fewer products.

Each ``m x m`` tile of the output comes from an ``(m + 2) x (m + 2)`` tile of the input with
``(m + 2)^2`` products per channel pair where the direct convolution takes ``9 m^2``. The
program has four stages, tuned together: the kernel transform ``U = G g G^T`` (inside the call,
so the program takes the kernel as given), the input transform ``V = B^T d B`` of every tile
(the tiles overlap by two rows and columns; padding and the ragged last tiles read zeros), one
batch of ``(m + 2)^2`` matrix products ``M = V U`` over the input channels, and the output
transform ``Y = A^T M A``. Each transform is separable: two passes of 1-d transforms, rows then
columns, whose coefficients are constants of the program (a schedule that unrolls the short
loops folds them). With the points 0, +-1, +-2 and infinity, ``B^T`` and ``A^T`` are small
integers, exact in float32.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx

from autosched.errors import UserError
from autosched.workload import Workload, workload_from_te
from autosched.workloads._common import to_accumulation
from autosched.workloads._registry import Param, register_workload
from autosched.workloads.nn import RESNET50_LAYERS

TILE = 4
"""``m``: the side of the output tile each transform computes (``F(4x4, 3x3)``)."""

ALPHA = TILE + 2
"""The side of an input tile and of its transform."""

# Lavin and Gray's F(4x4, 3x3): points 0, 1, -1, 2, -2 and infinity.
INPUT_TRANSFORM = np.array(
    [
        [4, 0, -5, 0, 1, 0],
        [0, -4, -4, 1, 1, 0],
        [0, 4, -4, -1, 1, 0],
        [0, -2, -1, 2, 1, 0],
        [0, 2, -1, -2, 1, 0],
        [0, 4, 0, -5, 0, 1],
    ],
    dtype=np.float64,
)
KERNEL_TRANSFORM = np.array(
    [
        [1 / 4, 0, 0],
        [-1 / 6, -1 / 6, -1 / 6],
        [-1 / 6, 1 / 6, -1 / 6],
        [1 / 24, 1 / 12, 1 / 6],
        [1 / 24, -1 / 12, 1 / 6],
        [0, 0, 1],
    ],
    dtype=np.float64,
)
OUTPUT_TRANSFORM = np.array(
    [
        [1, 1, 1, 1, 1, 0],
        [0, 1, -1, 2, -2, 0],
        [0, 1, 1, 4, 4, 0],
        [0, 1, -1, 8, -8, 1],
    ],
    dtype=np.float64,
)


def coefficient(matrix: np.ndarray, row: tirx.PrimExpr, col: tirx.PrimExpr, dtype: str):
    """``matrix[row, col]`` as an expression of constants: a chain of selects over the nonzero
    entries, which folds to one constant once both indices are known (an unrolled loop)."""
    value = tirx.const(0, dtype)
    for (i, j), entry in np.ndenumerate(matrix):
        if entry:
            value = tirx.Select(
                tirx.all(row == i, col == j), tirx.const(float(entry), dtype), value
            )
    return value


@register_workload(
    "conv2d_nchw_winograd",
    "3x3 convolution of stride 1 as Winograd's F(4x4, 3x3), input NCHW, weight (CO, CI, 3, 3), "
    "output NCHW: conv2d_nchw's arguments and result",
    Param("N", int, 1, "batch size"),
    Param("H", int, 56, "input height"),
    Param("W", int, 56, "input width"),
    Param("CI", int, 64, "input channels"),
    Param("CO", int, 64, "output channels"),
    Param("padding", int, 1, "zero padding on each side of H and W", min=0),
    presets={
        name: {key: layer[key] for key in ("H", "W", "CI", "CO", "padding")}
        for name, layer in RESNET50_LAYERS.items()
        if (layer["KH"], layer["KW"], layer["stride"]) == (3, 3, 1)
    },
)
def conv2d_nchw_winograd(N: int, H: int, W: int, CI: int, CO: int, padding: int) -> Workload:
    OH, OW = H + 2 * padding - 2, W + 2 * padding - 2
    if OH < 1 or OW < 1:
        raise UserError(
            f"conv2d_nchw_winograd: a 3x3 kernel does not fit the {H}x{W} input padded by {padding}"
        )
    dtype = "float32"
    rows, cols = -(-OH // TILE), -(-OW // TILE)
    tiles = N * rows * cols
    data = te.placeholder((N, CI, H, W), dtype, name="data")
    weight = te.placeholder((CO, CI, 3, 3), dtype, name="weight")

    # U[k = a * ALPHA + b, ci, co] = (G g G^T)[a, b]: the kernel's columns, then its rows
    kw = te.reduce_axis((0, 3), name="kw")
    kernel_cols = te.compute(
        (CO, CI, 3, ALPHA),
        lambda co, ci, kh, b: te.sum(
            weight[co, ci, kh, kw] * coefficient(KERNEL_TRANSFORM, b, kw, dtype), axis=kw
        ),
        name="kernel_cols",
    )
    kh = te.reduce_axis((0, 3), name="kh")
    kernel = te.compute(
        (ALPHA * ALPHA, CI, CO),
        lambda k, ci, co: te.sum(
            coefficient(KERNEL_TRANSFORM, k // ALPHA, kh, dtype)
            * kernel_cols[co, ci, kh, k % ALPHA],
            axis=kh,
        ),
        name="kernel_transform",
    )

    # V[k = a * ALPHA + b, ci, p] = (B^T d B)[a, b] of tile p: rows first, then columns
    def pixel(ci: tirx.PrimExpr, p: tirx.PrimExpr, y: tirx.PrimExpr, x: tirx.PrimExpr):
        n, tile = p // (rows * cols), p % (rows * cols)
        h = tile // cols * TILE + y - padding
        w = tile % cols * TILE + x - padding
        inside = tirx.all(h >= 0, h < H, w >= 0, w < W)
        return tirx.if_then_else(inside, data[n, ci, h, w], tirx.const(0, dtype))

    r = te.reduce_axis((0, ALPHA), name="r")
    input_rows = te.compute(
        (ALPHA, CI, tiles, ALPHA),
        lambda a, ci, p, x: te.sum(
            coefficient(INPUT_TRANSFORM, a, r, dtype) * pixel(ci, p, r, x), axis=r
        ),
        name="input_rows",
    )
    s = te.reduce_axis((0, ALPHA), name="s")
    transformed = te.compute(
        (ALPHA * ALPHA, CI, tiles),
        lambda k, ci, p: te.sum(
            input_rows[k // ALPHA, ci, p, s] * coefficient(INPUT_TRANSFORM, k % ALPHA, s, dtype),
            axis=s,
        ),
        name="input_transform",
    )

    # M[k, p, co] = sum over ci of V[k, ci, p] U[k, ci, co]
    ci = te.reduce_axis((0, CI), name="ci")
    products = te.compute(
        (ALPHA * ALPHA, tiles, CO),
        lambda k, p, co: te.sum(transformed[k, ci, p] * kernel[k, ci, co], axis=ci),
        name="products",
    )

    # Y[n, co, h, w] = (A^T M A)[h % m, w % m] of the tile holding (h, w): rows, then columns
    a = te.reduce_axis((0, ALPHA), name="a")
    output_rows = te.compute(
        (TILE, ALPHA, tiles, CO),
        lambda u, b, p, co: te.sum(
            coefficient(OUTPUT_TRANSFORM, u, a, dtype) * products[a * ALPHA + b, p, co], axis=a
        ),
        name="output_rows",
    )
    b = te.reduce_axis((0, ALPHA), name="b")
    out = te.compute(
        (N, CO, OH, OW),
        lambda n, co, h, w: te.sum(
            output_rows[h % TILE, b, (n * rows + h // TILE) * cols + w // TILE, co]
            * coefficient(OUTPUT_TRANSFORM, w % TILE, b, dtype),
            axis=b,
        ),
        name="output_transform",
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, g = (to_accumulation(array) for array in inputs)
        x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
        result = np.zeros((N, CO, OH, OW), dtype)
        for i in range(3):
            for j in range(3):
                result += np.einsum("nchw,oc->nohw", x[:, :, i : i + OH, j : j + OW], g[:, :, i, j])
        return [result]

    params: dict[str, object] = {"N": N, "H": H, "W": W, "CI": CI, "CO": CO, "padding": padding}
    flops = 2 * N * OH * OW * CO * 9 * CI  # the direct convolution's: rates compare with it
    return workload_from_te(
        "conv2d_nchw_winograd", params, [data, weight, out], flops=flops, reference=reference
    )
