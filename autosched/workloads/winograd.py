"""Winograd's minimal filtering ``F(4x4, 3x3)`` (Lavin and Gray, "Fast Algorithms for
Convolutional Neural Networks", 2015): its matrices, and ``conv2d_nchw_winograd``, a 3x3 convolution
of stride 1 that takes and gives what ``conv2d_nchw`` does, computed with 4x fewer products.

Each ``m x m`` tile of the output comes from an ``(m + 2) x (m + 2)`` tile of the input with
``(m + 2)^2`` products per channel pair where the direct convolution takes ``9 m^2``. The
program computes, in one call: the kernel transform ``U = G g G^T`` (so the program takes the
kernel as given; declared constant, ``-p weights=weight``, the kernel is timed transformed ahead,
as a model transforms it once: `autosched.weights`), the input transform ``V = B^T d B`` of
every tile (the tiles overlap by two rows and columns; padding and the ragged last tiles read
zeros), one batch of ``(m + 2)^2`` matrix products ``M = V U`` over the input channels, and the
output transform ``Y = A^T M A``. With the points 0, +-1, +-2 and infinity, ``B^T`` and ``A^T``
are small integers, exact in float32.

Each transform is separable, two passes of 1-d transforms (rows, then columns), and each pass is
a spatial stage whose sums are written out with the coefficients as constants of the program.
The search tiles the products; the transform stages are kept out of its rules (parallelized,
vectorized and unrolled with the rest of the program). Searched, their reductions were tiled like
the products, which made 2,187 design spaces and builds of up to minutes; their constant indices
also defeat MetaSchedule's fusion of a consumer into a tile, hence the copy of the products that
the search may fuse as their write cache.

The passes run tile-major, with no division of an index in their inner loops: the data is first
padded (a copy, so no pass tests bounds), the first input pass runs over rows and columns of
tiles, and the output tiles are put in their NCHW place by a last copy. Gathering the pixels of a
tile and scattering an output tile inside the passes, with the tile's position divided out of a
flat index in every vector lane, took half the time of the whole program (Zen 3, benchmarks).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tvm import te, tirx

from autosched.weights import WEIGHT_TRANSFORM
from autosched.workload import Workload, workload_from_te
from autosched.workloads._registry import Param, register_workload
from autosched.workloads.nn import RESNET50_LAYERS, correlate_nchw, output_size, zero_pad

_UNSEARCHED = {"schedule_rule": "None"}
"""The annotation that keeps MetaSchedule's rules off a stage."""

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


def coefficient(matrix: np.ndarray, row: tirx.PrimExpr, col: int) -> tirx.PrimExpr:
    """``matrix[row, col]`` for a column known when the program is written: a chain of selects
    over that column's nonzero entries, which folds to a constant where ``row`` is known (an
    unrolled loop), and otherwise costs a few scalar selects per vector where ``row`` is an
    outer loop's."""
    value = tirx.const(0, "float32")
    for i, number in enumerate(matrix[:, col]):
        if number:
            value = tirx.Select(row == i, tirx.const(float(number), "float32"), value)
    return value


def transform_stage(
    shape: tuple[int, ...],
    term: Callable[..., tirx.PrimExpr],
    length: int,
    name: str,
    *,
    of_weight: bool = False,
) -> te.Tensor:
    """A pass of 1-d transforms: each element the sum of ``term(*index, j)`` over ``j`` below
    ``length``, written out (no reduction loop), so that the stage is spatial and its innermost
    axis vectorizes. Kept out of the search's rules, which would inline it into its consumer (and
    so recompute it there) or tile it. A transform ``of_weight`` runs ahead of the timed program
    where the weight is declared constant (`autosched.weights`)."""

    def element(*index: tirx.PrimExpr) -> tirx.PrimExpr:
        total = term(*index, 0)
        for j in range(1, length):
            total = total + term(*index, j)
        return total

    attrs = {**_UNSEARCHED, WEIGHT_TRANSFORM: 1} if of_weight else _UNSEARCHED
    return te.compute(shape, element, name=name, attrs=attrs)


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
    OH, OW = output_size("conv2d_nchw_winograd", H, W, 3, 3, 1, padding)
    dtype = "float32"
    rows, cols = -(-OH // TILE), -(-OW // TILE)
    tiles = N * rows * cols
    data = te.placeholder((N, CI, H, W), dtype, name="data")
    weight = te.placeholder((CO, CI, 3, 3), dtype, name="weight")
    # U[a, b, ci, co] = (G g G^T)[a, b]: the kernel's columns, then its rows
    kernel_cols = transform_stage(
        (3, ALPHA, CI, CO),
        lambda kh, b, ci, co, j: coefficient(KERNEL_TRANSFORM, b, j) * weight[co, ci, kh, j],
        3,
        "kernel_cols",
        of_weight=True,
    )
    kernel = transform_stage(
        (ALPHA, ALPHA, CI, CO),
        lambda a, b, ci, co, j: coefficient(KERNEL_TRANSFORM, a, j) * kernel_cols[j, b, ci, co],
        3,
        "kernel_transform",
        of_weight=True,
    )

    # V[a, b, ci, p] = (B^T d B)[a, b] of tile p: the data padded, then rows, then columns
    sizes = (rows * TILE + 2, cols * TILE + 2)  # the ragged last tiles read zeros too
    padded = zero_pad(data, padding, (2, 3), dtype, "nchw", sizes=sizes, attrs=_UNSEARCHED)

    # rows of tiles t (of every image) by columns c: no division of an index in the inner loop
    input_rows = transform_stage(
        (ALPHA, ALPHA, CI, N * rows, cols),
        lambda a, x, ci, t, c, j: (
            coefficient(INPUT_TRANSFORM, a, j)
            * padded[t // rows, ci, t % rows * TILE + j, c * TILE + x]
        ),
        ALPHA,
        "input_rows",
    )
    transformed = transform_stage(
        (ALPHA, ALPHA, CI, tiles),
        lambda a, b, ci, p, j: (
            coefficient(INPUT_TRANSFORM, b, j) * input_rows[a, j, ci, p // cols, p % cols]
        ),
        ALPHA,
        "input_transform",
    )

    # M[a, b, p, co] = sum over ci of V[a, b, ci, p] U[a, b, ci, co]: the stage the search tiles
    ci = te.reduce_axis((0, CI), name="ci")
    products = te.compute(
        (ALPHA, ALPHA, tiles, CO),
        lambda a, b, p, co: te.sum(transformed[a, b, ci, p] * kernel[a, b, ci, co], axis=ci),
        name="products",
    )
    # a copy the search may fuse into the products' tiles as their write cache (see above)
    products = te.compute(
        products.shape, lambda *i: products(*i), name="products_written", attrs=_UNSEARCHED
    )

    # Y[u, v, p, co] = (A^T M A)[u, v] of tile p: rows, then columns; then each tile in its place
    output_rows = transform_stage(
        (TILE, ALPHA, tiles, CO),
        lambda u, b, p, co, j: coefficient(OUTPUT_TRANSFORM, u, j) * products[j, b, p, co],
        ALPHA,
        "output_rows",
    )
    output_tiles = transform_stage(
        (TILE, TILE, tiles, CO),
        lambda u, v, p, co, j: coefficient(OUTPUT_TRANSFORM, v, j) * output_rows[u, j, p, co],
        ALPHA,
        "output_transform",
    )
    out = te.compute(
        (N, CO, OH, OW),
        lambda n, co, h, w: output_tiles[
            h % TILE, w % TILE, (n * rows + h // TILE) * cols + w // TILE, co
        ],
        name="output",
        attrs=_UNSEARCHED,
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [correlate_nchw(*inputs, stride=1, padding=padding)]

    params: dict[str, object] = {"N": N, "H": H, "W": W, "CI": CI, "CO": CO, "padding": padding}
    flops = 2 * N * OH * OW * CO * 9 * CI  # the direct convolution's: rates compare with it
    return workload_from_te(
        "conv2d_nchw_winograd", params, [data, weight, out], flops=flops, reference=reference
    )
