"""Winograd's minimal filtering ``F(4x4, 3x3)`` (Lavin and Gray, "Fast Algorithms for
Convolutional Neural Networks", 2015): its matrices, and ``conv2d_nchw_winograd`` and
``conv2d_nhwc_winograd``, 3x3 convolutions of stride 1 that take and give what ``conv2d_nchw``
and ``conv2d_nhwc`` do, computed with 4x fewer products.

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

Every stage runs over rows and columns of tiles, with no division of an index in its inner loop
and its inner loop over a contiguous axis: the data is first padded (a copy, so no pass tests
bounds), and the output tiles are put in their place by a last copy. With NHWC data the passes
run along the channels. With NCHW data they run along the columns of tiles, whose pixels lie a
tile apart in a row: the padded rows are first split by the columns' place in a tile, so that
each pass reads a contiguous run. Read a tile apart (as vector gathers), the first input pass
took 42% of the program's time (ResNet-50's 56x56 layer, Intel, benchmarks); gathered with the
tile's position divided out of a flat index in every vector lane, half (Zen 3).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tvm import te, tirx

from autosched.weights import WEIGHT_TRANSFORM
from autosched.workload import Reference, Workload, workload_from_te
from autosched.workloads._registry import Param, register_workload
from autosched.workloads.nn import (
    RESNET50_LAYERS,
    conv_flops,
    correlate_nchw,
    output_size,
    zero_pad,
)

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


_PARAMS = (
    Param("N", int, 1, "batch size"),
    Param("H", int, 56, "input height"),
    Param("W", int, 56, "input width"),
    Param("CI", int, 64, "input channels"),
    Param("CO", int, 64, "output channels"),
    Param("padding", int, 1, "zero padding on each side of H and W", min=0),
)
_PRESETS = {
    name: {key: layer[key] for key in ("H", "W", "CI", "CO", "padding")}
    for name, layer in RESNET50_LAYERS.items()
    if (layer["KH"], layer["KW"], layer["stride"]) == (3, 3, 1)
}


def kernel_transform(
    CI: int, CO: int, tap: Callable[[tirx.PrimExpr, tirx.PrimExpr, int, int], tirx.PrimExpr]
) -> te.Tensor:
    """``U[a, b, ci, co] = (G g G^T)[a, b]`` of the 3x3 kernel whose element at row ``kh``,
    column ``kw`` for channels ``ci`` to ``co`` is ``tap(ci, co, kh, kw)``: its columns, then its
    rows, both stages of a weight."""
    columns = transform_stage(
        (3, ALPHA, CI, CO),
        lambda kh, b, ci, co, j: coefficient(KERNEL_TRANSFORM, b, j) * tap(ci, co, kh, j),
        3,
        "kernel_cols",
        of_weight=True,
    )
    return transform_stage(
        (ALPHA, ALPHA, CI, CO),
        lambda a, b, ci, co, j: coefficient(KERNEL_TRANSFORM, a, j) * columns[j, b, ci, co],
        3,
        "kernel_transform",
        of_weight=True,
    )


def input_tiles(
    extents: dict[str, int], pixel: Callable[..., tirx.PrimExpr]
) -> Callable[..., tirx.PrimExpr]:
    """``V[a, b] = (B^T d B)[a, b]`` of every input tile ``d``, whose pixel at row ``y``, column
    ``x`` of the tile in row ``t`` (of every image) and column ``c`` of tiles, channel ``ci``, is
    ``pixel(t, ci, c, y, x)``: the rows, then the columns, each pass over the axes ``t``, ``ci``
    and ``c`` in the order of their ``extents`` (the last innermost, vectorized). Returns
    ``V(a, b, ci, t, c)``."""
    order = list(extents)
    shape = (ALPHA, ALPHA, *extents.values())

    def by_rows(a: tirx.PrimExpr, x: tirx.PrimExpr, *tile_and_j: tirx.PrimExpr) -> tirx.PrimExpr:
        *tile, j = tile_and_j
        at = dict(zip(order, tile, strict=True))
        return coefficient(INPUT_TRANSFORM, a, j) * pixel(at["t"], at["ci"], at["c"], j, x)

    rows = transform_stage(shape, by_rows, ALPHA, "input_rows")

    def by_columns(a: tirx.PrimExpr, b: tirx.PrimExpr, *tile_and_j: tirx.PrimExpr) -> tirx.PrimExpr:
        *tile, j = tile_and_j
        return coefficient(INPUT_TRANSFORM, b, j) * rows[(a, j, *tile)]

    transformed = transform_stage(shape, by_columns, ALPHA, "input_transform")

    def at(
        a: tirx.PrimExpr, b: tirx.PrimExpr, ci: tirx.PrimExpr, t: tirx.PrimExpr, c: tirx.PrimExpr
    ) -> tirx.PrimExpr:
        place = {"t": t, "ci": ci, "c": c}
        return transformed[(a, b, *(place[axis] for axis in order))]

    return at


def output_tiles(
    transformed: Callable[..., tirx.PrimExpr], kernel: te.Tensor, tile_rows: int, cols: int
) -> te.Tensor:
    """``Y[u, v, t, c, co] = (A^T M A)[u, v]`` of the tile in row ``t`` (of every image) and
    column ``c``, where ``M[a, b, t, c, co]`` sums ``transformed(a, b, ci, t, c) U[a, b, ci, co]``
    over the input channels: the batch of matrix products that the search tiles (their rows the
    tiles), then the output transform's rows and columns."""
    _, _, CI, CO = (int(d) for d in kernel.shape)
    ci = te.reduce_axis((0, CI), name="ci")
    products = te.compute(
        (ALPHA, ALPHA, tile_rows, cols, CO),
        lambda a, b, t, c, co: te.sum(transformed(a, b, ci, t, c) * kernel[a, b, ci, co], axis=ci),
        name="products",
    )
    # a copy the search may fuse into the products' tiles as their write cache (see above)
    products = te.compute(
        products.shape, lambda *i: products(*i), name="products_written", attrs=_UNSEARCHED
    )
    output_rows = transform_stage(
        (TILE, ALPHA, tile_rows, cols, CO),
        lambda u, b, t, c, co, j: coefficient(OUTPUT_TRANSFORM, u, j) * products[j, b, t, c, co],
        ALPHA,
        "output_rows",
    )
    return transform_stage(
        (TILE, TILE, tile_rows, cols, CO),
        lambda u, v, t, c, co, j: coefficient(OUTPUT_TRANSFORM, v, j) * output_rows[u, j, t, c, co],
        ALPHA,
        "output_transform",
    )


def _workload(
    name: str,
    params: dict[str, object],
    tensors: list[te.Tensor],
    pixels: tuple[int, int],
    reference: Reference,
) -> Workload:
    """The workload of a Winograd convolution (``tensors``: its data, weight and output, of
    ``pixels`` rows and columns), counted in the direct 3x3 convolution's FLOPs, so that its rates
    compare with the direct convolution's (``nominal_flops``)."""
    OH, OW = pixels
    N, CI, CO = (int(params[key]) for key in ("N", "CI", "CO"))
    flops = conv_flops(N, OH, OW, CO, 3, 3, CI)
    return workload_from_te(
        name, params, tensors, flops=flops, reference=reference, nominal_flops=True
    )


@register_workload(
    "conv2d_nchw_winograd",
    "3x3 convolution of stride 1 as Winograd's F(4x4, 3x3), input NCHW, weight (CO, CI, 3, 3), "
    "output NCHW: conv2d_nchw's arguments and result",
    *_PARAMS,
    presets=_PRESETS,
)
def conv2d_nchw_winograd(N: int, H: int, W: int, CI: int, CO: int, padding: int) -> Workload:
    OH, OW = output_size("conv2d_nchw_winograd", H, W, 3, 3, 1, padding)
    dtype = "float32"
    rows, cols = -(-OH // TILE), -(-OW // TILE)
    data = te.placeholder((N, CI, H, W), dtype, name="data")
    weight = te.placeholder((CO, CI, 3, 3), dtype, name="weight")
    kernel = kernel_transform(CI, CO, lambda ci, co, kh, kw: weight[co, ci, kh, kw])

    # V = B^T d B of each tile: the data padded (the ragged last tiles read zeros too, and the
    # columns reach a whole tile past the last for the split), each row's columns split by their
    # place in a tile (column c * TILE + x at [x, c]: column x of every tile of a row is then
    # contiguous), then rows and columns of tiles, with no division of an index in the inner loop
    # (the channels between the tiles' rows and columns, so that the vectorized loop of a pass
    # does not fuse them into lanes that divide a row's tiles out of a flat index)
    sizes = (rows * TILE + 2, (cols + 1) * TILE)
    padded = zero_pad(data, padding, (2, 3), dtype, "nchw", sizes=sizes, attrs=_UNSEARCHED)
    split = te.compute(
        (N, CI, rows * TILE + 2, TILE, cols + 1),
        lambda n, ci, h, x, c: padded[n, ci, h, c * TILE + x],
        name="pad_split",
        attrs=_UNSEARCHED,
    )
    transformed = input_tiles(
        {"t": N * rows, "ci": CI, "c": cols},
        lambda t, ci, c, y, x: split[t // rows, ci, t % rows * TILE + y, x % TILE, c + x // TILE],
    )
    tiles = output_tiles(transformed, kernel, N * rows, cols)
    out = te.compute(
        (N, CO, OH, OW),
        lambda n, co, h, w: tiles[h % TILE, w % TILE, n * rows + h // TILE, w // TILE, co],
        name="output",
        attrs=_UNSEARCHED,
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [correlate_nchw(*inputs, stride=1, padding=padding)]

    params: dict[str, object] = {"N": N, "H": H, "W": W, "CI": CI, "CO": CO, "padding": padding}
    return _workload("conv2d_nchw_winograd", params, [data, weight, out], (OH, OW), reference)


@register_workload(
    "conv2d_nhwc_winograd",
    "3x3 convolution of stride 1 as Winograd's F(4x4, 3x3), input NHWC, weight HWIO "
    "(3, 3, CI, CO), output NHWC: conv2d_nhwc's arguments and result",
    *_PARAMS,
    presets=_PRESETS,
)
def conv2d_nhwc_winograd(N: int, H: int, W: int, CI: int, CO: int, padding: int) -> Workload:
    OH, OW = output_size("conv2d_nhwc_winograd", H, W, 3, 3, 1, padding)
    dtype = "float32"
    rows, cols = -(-OH // TILE), -(-OW // TILE)
    data = te.placeholder((N, H, W, CI), dtype, name="data")
    weight = te.placeholder((3, 3, CI, CO), dtype, name="weight")
    kernel = kernel_transform(CI, CO, lambda ci, co, kh, kw: weight[kh, kw, ci, co])

    # V = B^T d B of each tile: the data padded (the ragged last tiles read zeros too), then rows
    # and columns of tiles, each pass along the channels, contiguous in this layout
    sizes = (rows * TILE + 2, cols * TILE + 2)
    padded = zero_pad(data, padding, (1, 2), dtype, "nhwc", sizes=sizes, attrs=_UNSEARCHED)
    transformed = input_tiles(
        {"t": N * rows, "c": cols, "ci": CI},
        lambda t, ci, c, y, x: padded[t // rows, t % rows * TILE + y, c * TILE + x, ci],
    )
    tiles = output_tiles(transformed, kernel, N * rows, cols)
    out = te.compute(
        (N, OH, OW, CO),
        lambda n, h, w, co: tiles[h % TILE, w % TILE, n * rows + h // TILE, w // TILE, co],
        name="output",
        attrs=_UNSEARCHED,
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, w = inputs  # NHWC data and HWIO weights, seen as NCHW and OIHW
        nchw = correlate_nchw(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), 1, padding)
        return [np.ascontiguousarray(nchw.transpose(0, 2, 3, 1))]

    params: dict[str, object] = {"N": N, "H": H, "W": W, "CI": CI, "CO": CO, "padding": padding}
    return _workload("conv2d_nhwc_winograd", params, [data, weight, out], (OH, OW), reference)
