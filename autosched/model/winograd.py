"""Winograd's minimal filtering for a model's 3x3 convolutions: ``F(m x m, 3 x 3)`` computes each
``m x m`` tile of the output from an ``(m + 2) x (m + 2)`` tile of the input with ``(m + 2)^2``
products per channel pair where the direct convolution takes ``9 m^2`` (Lavin and Gray, "Fast
Algorithms for Convolutional Neural Networks", 2015): ``F(4x4, 3x3)`` multiplies 4x fewer.

`winograd_convolutions` rewrites every channels-last 3x3 convolution of stride 1, no dilation and
one group whose kernel is a constant, with at least ``MIN_TILES`` output tiles, as three
operators, each a kernel that MetaSchedule tunes on its own:

1. the input transform ``V = B^T d B`` of every tile ``d`` (a TE program; the tiles overlap by two
   rows and columns): ``V[(m + 2)^2, tiles, in channels]``, the passes of the kernel's
   (`autosched.workloads.winograd.input_tiles`: the data padded first, so that no pass tests
   bounds, every pass along the channels, all kept out of the search's rules);
2. one batch of ``(m + 2)^2`` matrix products ``M = V U`` with the transformed kernel
   ``U = G g G^T``, computed here from the constant (so it is a weight the kernel may pack);
3. the output transform ``Y = A^T M A`` of every tile, written into the output's place
   (a TE program marked as fusable as the convolution was, so its bias, residual add and
   activation fuse into it; its last pass is left to the search, whose inlining puts that
   epilogue into the pass, one loop nest that writes the output once).

The matrices are those of `autosched.workloads.winograd`, whose ``conv2d_nhwc_winograd`` is the
same algorithm as one kernel. The transforms are separable: each is two passes of 1-d transforms,
rows then columns. With the interpolation points 0, +-1, +-2 and infinity, ``B^T`` and ``A^T``
are small integers, exact in float32; the kernel is transformed in float64 and rounded once. The
error added is of the order of the float32 rounding of the transforms' sums, checked against the
direct convolution by the tests and by every model's output check.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te

from autosched.model.relax_ir import static_shape
from autosched.workloads.nn import zero_pad
from autosched.workloads.winograd import (
    ALPHA,
    KERNEL_TRANSFORM,
    OUTPUT_TRANSFORM,
    TILE,
    UNSEARCHED,
    coefficient,
    input_tiles,
    transform_stage,
)

MIN_CHANNELS = 16
"""The fewest input and output channels of a convolution rewritten: the batch matmul reduces
over the input channels and vectorizes along the output channels, and fewer than a vector's
worth leave its transforms to dominate."""

MIN_TILES = 16
"""The fewest output tiles of a convolution rewritten. The products read each transformed weight
once per tile (2 flops per 4 bytes a tile), and the transformed kernel holds 4x the direct one's
weights, which the direct convolution reads once per output pixel. With few tiles the products
are bound by memory on any CPU: in ResNet-18 at batch 1 on a Zen 5, the 7x7x512 stage (4 tiles,
37.7 MB of transformed weights read for 2 flops a byte, out of the caches by the next call) took
0.14 to 0.86 ms longer per run of the model as Winograd's than direct, while Winograd's 14x14x256
stage (16 tiles) was faster than stock TVM's direct convolutions."""

# relax's op pattern kinds (``tvm/relax/transform``: kOutEWiseFusable, kOpaque)
_FUSABLE_LIKE_A_CONVOLUTION = 4
_OPAQUE = 8


def transformed_kernel(kernel: np.ndarray) -> np.ndarray:
    """``U[a * ALPHA + b, i, o] = (G g[:, :, i, o] G^T)[a, b]`` of an HWIO 3x3 kernel ``g``, in its
    dtype."""
    g = KERNEL_TRANSFORM
    transformed = np.einsum("ak,klio,bl->abio", g, kernel.astype(np.float64), g)
    return transformed.reshape(ALPHA * ALPHA, *kernel.shape[2:]).astype(kernel.dtype)


@tvm.transform.module_pass(opt_level=0, name="WinogradConvolutions")
def winograd_convolutions(mod: tvm.IRModule, _context: tvm.transform.PassContext) -> tvm.IRModule:
    """Every channels-last 3x3 convolution of stride 1 with a constant kernel as Winograd's
    ``F(4x4, 3x3)``: input transform, batch matmul with the transformed kernel, output transform.
    Run it after ``FoldConstant``, so that kernels bound to constants are constants."""
    rewriter = _Rewriter(mod)
    for var, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(var, rewriter.visit_expr(func))
    return rewriter.builder_.finalize()


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    """`winograd_convolutions`' mutator: the new kernels join the module through its builder."""

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not _applies(call):
            return call
        data, kernel = call.args
        batch, out_height, out_width = _output_shape(call)
        top, left, _bottom, _right = (int(pad) for pad in call.attrs.padding)
        tiles = _tiles(call)
        transformed = relax.const(transformed_kernel(kernel.value.numpy()))
        builder = self.builder_
        tiles_in = builder.emit(
            builder.call_te(
                _input_transform,
                data,
                tiles=tiles,
                pads=(top, left),
                primfunc_name_hint="winograd_input_transform",
                primfunc_attrs={"op_pattern": _OPAQUE},
            )
        )
        products = builder.emit(relax.op.matmul(tiles_in, transformed))
        return builder.call_te(
            _output_transform,
            products,
            shape=(batch, out_height, out_width),
            tiles=tiles,
            primfunc_name_hint="winograd_output_transform",
            primfunc_attrs={"op_pattern": _FUSABLE_LIKE_A_CONVOLUTION},
        )


def _output_shape(call: relax.Call) -> tuple[int, int, int]:
    """The batch, height and width of a channels-last 3x3 convolution's output."""
    batch, height, width, _ = static_shape(call.args[0])
    top, left, bottom, right = (int(pad) for pad in call.attrs.padding)
    return batch, height + top + bottom - 2, width + left + right - 2


def _tiles(call: relax.Call) -> tuple[int, int, int]:
    """How many output tiles a convolution has: per image, down and across."""
    batch, out_height, out_width = _output_shape(call)
    return batch, -(-out_height // TILE), -(-out_width // TILE)


def _applies(call: relax.Call) -> bool:
    """Whether ``call`` is a convolution `winograd_convolutions` rewrites."""
    if not isinstance(call.op, tvm.ir.Op) or call.op.name != "relax.nn.conv2d":
        return False
    data, kernel = call.args
    attrs = call.attrs
    shape, kernel_shape = static_shape(data), static_shape(kernel)
    if not (
        isinstance(kernel, tvm.ir.expr.Constant)
        and shape is not None
        and kernel_shape is not None
        and kernel_shape[:2] == (3, 3)
        and min(kernel_shape[2:]) >= MIN_CHANNELS
        and attrs.data_layout == "NHWC"
        and attrs.kernel_layout == "HWIO"
        and attrs.out_layout == "NHWC"
        and [int(s) for s in attrs.strides] == [1, 1]
        and [int(d) for d in attrs.dilation] == [1, 1]
        and int(attrs.groups) == 1
        and str(data.ty.dtype) == "float32"
        and str(kernel.ty.dtype) == "float32"
        and attrs.out_dtype in (None, "float32")
    ):
        return False
    batch, down, across = _tiles(call)
    return batch * down * across >= MIN_TILES


def _input_transform(
    data: te.Tensor, tiles: tuple[int, int, int], pads: tuple[int, int]
) -> te.Tensor:
    """``V[a * ALPHA + b, p, c] = (B^T d B)[a, b]`` of the tile ``d`` of tile number ``p`` (the
    images' rows of tiles, then their columns): the data padded into whole tiles (so no pass tests
    bounds), then `input_tiles`' passes, rows then columns, each along the channels."""
    batch, rows, cols = tiles
    channels = int(data.shape[3])
    sizes = (rows * TILE + 2, cols * TILE + 2)
    padded = zero_pad(data, pads, (1, 2), str(data.dtype), "nhwc", sizes=sizes, attrs=UNSEARCHED)
    return input_tiles(
        {"t": batch * rows, "c": cols, "ci": channels},
        lambda t, ci, c, y, x: padded[t // rows, t % rows * TILE + y, c * TILE + x, ci],
        matrices=True,
    )


def _output_transform(
    products: te.Tensor, shape: tuple[int, int, int], tiles: tuple[int, int, int]
) -> te.Tensor:
    """``Y[n, h, w, o] = (A^T M A)[h % m, w % m]`` of the products ``M`` of the tile holding
    ``(h, w)``: rows first (a pass kept out of the search), then columns, written into the
    output's place (a pass left to the search, so that the epilogue fused after it may be inlined
    into it), each along the channels with the coefficients as constants."""
    _, rows, cols = tiles
    count, channels = (int(dim) for dim in products.shape[1:])
    by_rows = transform_stage(
        (TILE, ALPHA, count, channels),
        lambda u, b, p, o, j: coefficient(OUTPUT_TRANSFORM, u, j) * products[j * ALPHA + b, p, o],
        ALPHA,
        "output_rows",
    )

    def by_columns(*index_and_j: tvm.tirx.PrimExpr) -> tvm.tirx.PrimExpr:
        n, h, w, o, j = index_and_j
        tile = (n * rows + h // TILE) * cols + w // TILE
        return coefficient(OUTPUT_TRANSFORM, w % TILE, j) * by_rows[h % TILE, j, tile, o]

    return transform_stage((*shape, channels), by_columns, ALPHA, "output_transform", searched=True)
