"""Winograd's minimal filtering for a model's 3x3 convolutions: ``F(m x m, 3 x 3)`` computes each
``m x m`` tile of the output from an ``(m + 2) x (m + 2)`` tile of the input with ``(m + 2)^2``
products per channel pair where the direct convolution takes ``9 m^2`` (Lavin and Gray, "Fast
Algorithms for Convolutional Neural Networks", 2015): ``F(4x4, 3x3)`` multiplies 4x fewer.

`winograd_convolutions` rewrites every channels-last 3x3 convolution of stride 1, no dilation and
one group whose kernel is a constant, with at least ``MIN_TILES`` output tiles, as three
operators, each a kernel that MetaSchedule tunes on its own:

1. the input transform ``V = B^T d B`` of every tile ``d`` (a TE program; the tiles overlap by two
   rows and columns, the padding is read as zeros): ``V[(m + 2)^2, tiles, in channels]``;
2. one batch of ``(m + 2)^2`` matrix products ``M = V U`` with the transformed kernel
   ``U = G g G^T``, computed here from the constant (so it is a weight the kernel may pack);
3. the output transform ``Y = A^T M A`` of every tile, written into the output's place
   (a TE program marked as fusable as the convolution was, so its bias, residual add and
   activation fuse into it).

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
from autosched.workloads.winograd import (
    ALPHA,
    INPUT_TRANSFORM,
    KERNEL_TRANSFORM,
    OUTPUT_TRANSFORM,
    TILE,
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
        coefficients = relax.const(INPUT_TRANSFORM.astype(str(data.ty.dtype)))
        inverse = relax.const(OUTPUT_TRANSFORM.astype(str(data.ty.dtype)))
        builder = self.builder_
        tiles_in = builder.emit(
            builder.call_te(
                _input_transform,
                data,
                coefficients,
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
            inverse,
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
    data: te.Tensor, bt: te.Tensor, tiles: tuple[int, int, int], pads: tuple[int, int]
) -> te.Tensor:
    """``V[a * ALPHA + b, p, c] = (B^T d B)[a, b]`` of the tile ``d`` of tile number ``p``: rows
    first, then columns."""
    batch, rows, cols = tiles
    count = batch * rows * cols
    height, width, channels = (int(dim) for dim in data.shape[1:])
    top, left = pads

    def pixel(p: tvm.tirx.PrimExpr, y: tvm.tirx.PrimExpr, x: tvm.tirx.PrimExpr, c):
        n, tile = p // (rows * cols), p % (rows * cols)
        h = tile // cols * TILE + y - top
        w = tile % cols * TILE + x - left
        inside = tvm.tirx.all(h >= 0, h < height, w >= 0, w < width)
        return tvm.tirx.if_then_else(inside, data[n, h, w, c], tvm.tirx.const(0, data.dtype))

    r = te.reduce_axis((0, ALPHA), name="r")
    by_rows = te.compute(
        (ALPHA, ALPHA, count, channels),
        lambda a, x, p, c: te.sum(bt[a, r] * pixel(p, r, x, c), axis=r),
        name="by_rows",
    )
    s = te.reduce_axis((0, ALPHA), name="s")
    return te.compute(
        (ALPHA * ALPHA, count, channels),
        lambda k, p, c: te.sum(by_rows[k // ALPHA, s, p, c] * bt[k % ALPHA, s], axis=s),
        name="tiles_in",
    )


def _output_transform(
    products: te.Tensor,
    at: te.Tensor,
    shape: tuple[int, int, int],
    tiles: tuple[int, int, int],
) -> te.Tensor:
    """``Y[n, h, w, o] = (A^T M A)[h % m, w % m]`` of the products ``M`` of the tile holding
    ``(h, w)``: rows first, then columns."""
    _, rows, cols = tiles
    count, channels = (int(dim) for dim in products.shape[1:])
    a = te.reduce_axis((0, ALPHA), name="a")
    by_rows = te.compute(
        (TILE, ALPHA, count, channels),
        lambda u, b, p, o: te.sum(at[u, a] * products[a * ALPHA + b, p, o], axis=a),
        name="by_rows",
    )
    b = te.reduce_axis((0, ALPHA), name="b")

    def tile(n, h, w):
        return (n * rows + h // TILE) * cols + w // TILE

    return te.compute(
        (*shape, channels),
        lambda n, h, w, o: te.sum(by_rows[h % TILE, b, tile(n, h, w), o] * at[w % TILE, b], axis=b),
        name="tiles_out",
    )
