"""Quantised LLM kernels: 4-bit weights with group scales and zeros (GPTQ, AWQ), int8 matmul (with
the layout of the CPU's VNNI dot products), table-lookup GEMV over 2-bit weights (T-MAC), and MXFP8
quantisation (blocks of 32 FP8 E4M3 values sharing a power-of-two scale).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from tvm import te, tirx

from autosched.errors import UserError
from autosched.workload import Workload, workload_from_te
from autosched.workloads._common import accumulation_dtype, dtype_param
from autosched.workloads._registry import Param, register_workload

INT4_PER_BYTE = 2
INT4_MASK = 0xF


def dequantize_int4(
    qweight: np.ndarray, scales: np.ndarray, zeros: np.ndarray, group: int
) -> np.ndarray:
    """The float64 weights (N, K) that packed 4-bit weights, group scales and zeros stand for."""
    N, K = qweight.shape[0], qweight.shape[1] * INT4_PER_BYTE
    q = np.empty((N, K), np.float64)
    q[:, 0::2] = qweight & INT4_MASK
    q[:, 1::2] = qweight >> 4
    return (q - np.repeat(zeros, group, axis=1)) * np.repeat(scales, group, axis=1)


def unpack_vnni(packed: np.ndarray) -> np.ndarray:
    """The (K, N) matrix of int8 weights packed (N/16, K/4, 16, 4) for VNNI."""
    blocks_n, blocks_k, lanes, depth = packed.shape
    return packed.transpose(1, 3, 0, 2).reshape(blocks_k * depth, blocks_n * lanes)


def _check_divides(name: str, divisor: int, what: str, value: int, of: str) -> None:
    if value % divisor:
        raise UserError(f"{name}: {what} {divisor} does not divide {of}={value}")


@register_workload(
    "matmul_int4_weight",
    "C = A @ dequant(W)^T with 4-bit weights W (N, K) packed two per byte, low nibble first, "
    "and per-group scales and zero points: w = (q - zero) * scale",
    Param("M", int, 16, "rows of A and C (tokens)"),
    Param("N", int, 4096, "output features: rows of W"),
    Param("K", int, 4096, "input features (the reduction)"),
    Param("group", int, 128, "weights of a row sharing one scale and zero point (divides K)"),
    dtype_param(),
)
def matmul_int4_weight(M: int, N: int, K: int, group: int, dtype: str) -> Workload:
    _check_divides("matmul_int4_weight", group, "group", K, "K")
    _check_divides("matmul_int4_weight", INT4_PER_BYTE, "packing", K, "K")
    acc = accumulation_dtype(dtype)
    groups = K // group
    a = te.placeholder((M, K), dtype, name="A")
    packed = te.placeholder((N, K // INT4_PER_BYTE), "uint8", name="qweight")
    scales = te.placeholder((N, groups), dtype, name="scales")
    zeros = te.placeholder((N, groups), "uint8", name="zeros")

    def weight(n: tirx.PrimExpr, k: tirx.PrimExpr) -> tirx.PrimExpr:
        nibble = (packed[n, k // INT4_PER_BYTE] >> ((k % INT4_PER_BYTE) * 4).astype("uint8")) & (
            tirx.const(INT4_MASK, "uint8")
        )
        centred = nibble.astype(acc) - zeros[n, k // group].astype(acc)
        return centred * scales[n, k // group].astype(acc)

    k = te.reduce_axis((0, K), name="k")
    product = te.compute(
        (M, N), lambda m, n: te.sum(a[m, k].astype(acc) * weight(n, k), axis=k), name="product"
    )
    out = te.compute((M, N), lambda m, n: product[m, n].astype(dtype), name="C")

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        lhs, qweight, scale, zero = inputs
        weight = dequantize_int4(qweight, scale, zero, group)
        return [(lhs.astype(np.float64) @ weight.T).astype(dtype)]

    # The product: a multiply and an add per (m, n, k); dequantising each weight once: a
    # subtraction and a multiply (the kernel may repeat it per row of A; that is not counted).
    flops = 2 * M * N * K + 2 * N * K
    params: dict[str, object] = {"M": M, "N": N, "K": K, "group": group, "dtype": dtype}
    return workload_from_te(
        "matmul_int4_weight",
        params,
        [a, packed, scales, zeros, out],
        flops=flops,
        reference=reference,
    )


VNNI_LANES = 16  # int32 accumulators of one 512-bit VNNI dot product
VNNI_DEPTH = 4  # int8 products summed into each accumulator


@register_workload(
    "matmul_int8",
    "C = A @ B in int32 of int8 operands; layout vnni: A uint8, B int8 packed "
    "(N/16, K/4, 16, 4) as the CPU's VNNI dot-product instructions (vpdpbusd) read it",
    Param("M", int, 1024, "rows of A and C"),
    Param("N", int, 1024, "columns of B and C"),
    Param("K", int, 1024, "columns of A, rows of B (the reduction)"),
    Param("layout", str, "plain", "plain: A int8 (M, K), B int8 (K, N); vnni: see above",
          ("plain", "vnni")),
)  # fmt: skip
def matmul_int8(M: int, N: int, K: int, layout: str) -> Workload:
    k = te.reduce_axis((0, K), name="k")
    if layout == "plain":
        a = te.placeholder((M, K), "int8", name="A")
        b = te.placeholder((K, N), "int8", name="B")

        def b_value(kk: tirx.PrimExpr, j: tirx.PrimExpr) -> tirx.PrimExpr:
            return b[kk, j]
    else:
        _check_divides("matmul_int8", VNNI_LANES, "the VNNI lane count", N, "N")
        _check_divides("matmul_int8", VNNI_DEPTH, "the VNNI depth", K, "K")
        a = te.placeholder((M, K), "uint8", name="A")
        b = te.placeholder(
            (N // VNNI_LANES, K // VNNI_DEPTH, VNNI_LANES, VNNI_DEPTH), "int8", name="B_packed"
        )

        def b_value(kk: tirx.PrimExpr, j: tirx.PrimExpr) -> tirx.PrimExpr:
            return b[j // VNNI_LANES, kk // VNNI_DEPTH, j % VNNI_LANES, kk % VNNI_DEPTH]

    out = te.compute(
        (M, N),
        lambda i, j: te.sum(a[i, k].astype("int32") * b_value(k, j).astype("int32"), axis=k),
        name="C",
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        lhs, rhs = inputs
        if layout == "vnni":
            rhs = unpack_vnni(rhs)
        # float64 holds every sum of int8 products exactly (|sum| < 2**15 * K).
        return [(lhs.astype(np.float64) @ rhs.astype(np.float64)).astype(np.int32)]

    # A multiply and an add per (i, j, k), in integers.
    params: dict[str, object] = {"M": M, "N": N, "K": K, "layout": layout}
    return workload_from_te(
        "matmul_int8", params, [a, b, out], flops=2 * M * N * K, reference=reference
    )


LUT_GROUP = 4  # activations per table: 2**4 = 16 entries, one per pattern of 4 weight bits
LUT_ENTRIES = 1 << LUT_GROUP
LOWBIT_BITS = 2
LOWBIT_ZERO = 2  # 2-bit weights q in 0..3 stand for q - 2


@register_workload(
    "gemv_lut_lowbit",
    "y = dequant(W) @ x for 2-bit weights by table lookup (T-MAC): per group of 4 activations a "
    "table of all 16 signed sums, indexed by each bit plane of the weights",
    Param("N", int, 4096, "rows of W (output features)"),
    Param("K", int, 4096, "columns of W, length of x (a multiple of 8)"),
    dtype_param(),
)
def gemv_lut_lowbit(N: int, K: int, dtype: str) -> Workload:
    _check_divides("gemv_lut_lowbit", 2 * LUT_GROUP, "two groups of", K, "K")
    acc = accumulation_dtype(dtype)
    groups = K // LUT_GROUP
    x = te.placeholder((K,), dtype, name="x")
    # Bit plane b of the weights of row n, group g: a 4-bit table index, two groups per byte.
    planes = te.placeholder((LOWBIT_BITS, N, groups // 2), "uint8", name="weight_planes")
    scale = te.placeholder((N,), dtype, name="scale")
    table = te.compute(
        (groups, LUT_ENTRIES),
        lambda g, t: sum(
            ((t >> i) & 1).astype(acc) * x[g * LUT_GROUP + i].astype(acc) for i in range(LUT_GROUP)
        ),
        name="table",
    )
    kx = te.reduce_axis((0, K), name="kx")
    x_sum = te.compute((1,), lambda _: te.sum(x[kx].astype(acc), axis=kx), name="x_sum")
    b = te.reduce_axis((0, LOWBIT_BITS), name="b")
    g = te.reduce_axis((0, groups), name="g")

    def index(bit: tirx.PrimExpr, n: tirx.PrimExpr, group: tirx.PrimExpr) -> tirx.PrimExpr:
        shift = ((group % 2) * LUT_GROUP).astype("uint8")
        return ((planes[bit, n, group // 2] >> shift) & tirx.const(0xF, "uint8")).astype("int32")

    lookup = te.compute(
        (N,),
        lambda n: te.sum(table[g, index(b, n, g)] * (1 << b).astype(acc), axis=[b, g]),
        name="lookup",
    )
    out = te.compute(
        (N,),
        lambda n: (
            scale[n].astype(acc) * (lookup[n] - tirx.const(LOWBIT_ZERO, acc) * x_sum[0])
        ).astype(dtype),
        name="y",
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        activations, weight_planes, row_scale = inputs
        weight = dequantize_lowbit(weight_planes, row_scale)
        return [(weight @ activations.astype(np.float64)).astype(dtype)]

    # Counted as the dense product it replaces, as T-MAC reports it: a multiply and an add per
    # weight.
    flops = 2 * N * K
    params: dict[str, object] = {"N": N, "K": K, "dtype": dtype}
    return workload_from_te(
        "gemv_lut_lowbit", params, [x, planes, scale, out], flops=flops, reference=reference
    )


def dequantize_lowbit(planes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The float64 weights (N, K) that bit planes of 2-bit weights and row scales stand for."""
    _, N, bytes_per_row = planes.shape
    groups = 2 * bytes_per_row
    nibbles = np.stack([planes & 0xF, planes >> 4], axis=-1).reshape(LOWBIT_BITS, N, groups)
    bits = (nibbles[..., None] >> np.arange(LUT_GROUP)) & 1  # (bit, N, group, i)
    q = sum(bits[bit].astype(np.float64) * (1 << bit) for bit in range(LOWBIT_BITS))
    return (q.reshape(N, groups * LUT_GROUP) - LOWBIT_ZERO) * scale.astype(np.float64)[:, None]


MX_BLOCK = 32
E4M3_MAX = 448.0  # 1.75 * 2**8, the largest finite FP8 E4M3 value
E4M3_MIN_NORMAL = 2.0**-6
E4M3_SUBNORMAL_STEPS = 2**9  # subnormals are multiples of 2**-9
FLOAT32_MANTISSA_BITS = 23
E4M3_MANTISSA_BITS = 3
# E4M3's largest mantissa, 1.75, as a float32 mantissa field: above it the scale rounds up.
_E4M3_MAX_MANTISSA_FIELD = 0x600000
E8M0_BIAS = 127


@register_workload(
    "mxfp8_quantize",
    "MXFP8 quantisation along rows: per block of 32 values an E8M0 scale 2**ceil(log2(amax / 448)) "
    "(rounded up, so nothing saturates) and FP8 E4M3 elements, both as bytes",
    Param("rows", int, 1024, "rows"),
    Param("cols", int, 4096, "columns (a multiple of 32)"),
)
def mxfp8_quantize(rows: int, cols: int) -> Workload:
    _check_divides("mxfp8_quantize", MX_BLOCK, "the block size", cols, "cols")
    blocks = cols // MX_BLOCK
    x = te.placeholder((rows, cols), "float32", name="x")
    j = te.reduce_axis((0, MX_BLOCK), name="j")
    amax = te.compute(
        (rows, blocks), lambda r, blk: te.max(te.abs(x[r, blk * MX_BLOCK + j]), axis=j), "amax"
    )
    scale = te.compute((rows, blocks), lambda r, blk: _e8m0_scale(amax[r, blk]), name="scale")
    elements = te.compute(
        (rows, cols),
        lambda r, c: _to_e4m3(x[r, c] * _reciprocal(scale[r, c // MX_BLOCK])),
        name="elements",
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        values = inputs[0].reshape(rows, blocks, MX_BLOCK)
        block_max = np.abs(values).max(axis=-1).astype(np.float64) / E4M3_MAX
        mantissa, exponent = np.frexp(block_max)  # block_max = mantissa * 2**exponent
        exponent = np.where(mantissa == 0.5, exponent - 1, exponent)  # ceil(log2(block_max))
        exponent = np.where(block_max == 0, -E8M0_BIAS, exponent)  # all zeros: the least scale
        biased = np.clip(exponent + E8M0_BIAS, 0, 2 * E8M0_BIAS).astype(np.uint8)
        scaled = values * np.exp2(E8M0_BIAS - biased.astype(np.float64))[..., None]
        fp8 = np.clip(scaled, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)
        return [fp8.view(np.uint8).reshape(rows, cols), biased]

    # Per element: an absolute value and a max for the block maximum, a scaling multiply and a
    # clamp (2) before the rounding to FP8 (bit operations, not counted).
    flops = 5 * rows * cols
    params: dict[str, object] = {"rows": rows, "cols": cols}
    return workload_from_te(
        "mxfp8_quantize", params, [x, elements, scale], flops=flops, reference=reference,
        num_outputs=2,
    )  # fmt: skip


def _e8m0_scale(amax: tirx.PrimExpr) -> tirx.PrimExpr:
    """The biased exponent of 2**ceil(log2(amax / 448)), from the bits of amax (exact)."""
    bits = tirx.reinterpret("int32", amax)
    exponent = (bits >> FLOAT32_MANTISSA_BITS) & 0xFF  # biased by 127, as E8M0 is
    mantissa = bits & ((1 << FLOAT32_MANTISSA_BITS) - 1)
    rounds_up = tirx.Select(mantissa > _E4M3_MAX_MANTISSA_FIELD, 1, 0)
    biased = exponent - 8 + rounds_up  # 448 = 1.75 * 2**8
    return tirx.max(tirx.min(biased, 2 * E8M0_BIAS), 0).astype("uint8")


def _reciprocal(scale: tirx.PrimExpr) -> tirx.PrimExpr:
    """2**(127 - scale) as float32 bits; exact, and finite for every scale amax can give."""
    biased = 2 * E8M0_BIAS - scale.astype("int32")
    return tirx.reinterpret("float32", biased << FLOAT32_MANTISSA_BITS)


def _to_e4m3(value: tirx.PrimExpr) -> tirx.PrimExpr:
    """FP8 E4M3 bits of ``value`` clamped to +-448, rounded to nearest even."""
    clamped = tirx.max(tirx.min(value, tirx.const(E4M3_MAX, "float32")), -E4M3_MAX)
    bits = tirx.reinterpret("uint32", clamped)
    sign = (bits >> 31).astype("uint8") << tirx.const(7, "uint8")
    magnitude = bits & tirx.const(0x7FFFFFFF, "uint32")
    absolute = tirx.reinterpret("float32", magnitude)
    dropped = FLOAT32_MANTISSA_BITS - E4M3_MANTISSA_BITS
    half_even = (magnitude >> dropped) & tirx.const(1, "uint32")
    rounded = (magnitude + tirx.const((1 << (dropped - 1)) - 1, "uint32") + half_even) >> dropped
    # Rebias the exponent from float32's 127 to E4M3's 7: subtract 120 from the exponent field.
    normal = rounded - tirx.const(120 << E4M3_MANTISSA_BITS, "uint32")
    subnormal = tirx.nearbyint(absolute * E4M3_SUBNORMAL_STEPS).astype("uint32")
    code = tirx.Select(absolute < E4M3_MIN_NORMAL, subnormal, normal).astype("uint8")
    return sign | code
