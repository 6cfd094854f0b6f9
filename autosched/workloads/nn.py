"""Neural-network workloads: convolutions (conv2d_nhwc, conv2d_nchw, depthwise_conv2d, conv1d_glu),
normalisations (softmax, layernorm) and pooling (global_avg_pool), with the layer shapes of
ResNet-50 and MobileNet-V2 as presets. Each is a TE definition with a numpy reference and a
FLOP count.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np
from tvm import te, tirx, topi

from autosched.errors import UserError
from autosched.workload import Workload, workload_from_te
from autosched.workloads._common import (
    accumulation_dtype,
    compute_accumulated,
    dtype_param,
    to_accumulation,
)
from autosched.workloads._registry import Param, register_workload

# Distinct convolution layers of ResNet-50 (batch 1, 224x224 input): the stem, the 3x3 convolution
# of each stage, and 1x1 projections (stage 2 expansion, stage 3 reduction, stage 4 down-sampling).
RESNET50_LAYERS: dict[str, dict[str, object]] = {
    "resnet50_conv1": {"H": 224, "W": 224, "CI": 3, "CO": 64, "KH": 7, "KW": 7, "stride": 2,
                       "padding": 3},
    "resnet50_res2_3x3": {"H": 56, "W": 56, "CI": 64, "CO": 64, "KH": 3, "KW": 3, "stride": 1,
                          "padding": 1},
    "resnet50_res2_1x1": {"H": 56, "W": 56, "CI": 64, "CO": 256, "KH": 1, "KW": 1, "stride": 1,
                          "padding": 0},
    "resnet50_res3_3x3": {"H": 28, "W": 28, "CI": 128, "CO": 128, "KH": 3, "KW": 3, "stride": 1,
                          "padding": 1},
    "resnet50_res3_1x1": {"H": 28, "W": 28, "CI": 512, "CO": 128, "KH": 1, "KW": 1, "stride": 1,
                          "padding": 0},
    "resnet50_res4_3x3": {"H": 14, "W": 14, "CI": 256, "CO": 256, "KH": 3, "KW": 3, "stride": 1,
                          "padding": 1},
    "resnet50_res4_down": {"H": 28, "W": 28, "CI": 512, "CO": 1024, "KH": 1, "KW": 1, "stride": 2,
                           "padding": 0},
    "resnet50_res5_3x3": {"H": 7, "W": 7, "CI": 512, "CO": 512, "KH": 3, "KW": 3, "stride": 1,
                          "padding": 1},
}  # fmt: skip

# Depthwise 3x3 layers of MobileNet-V2 (batch 1, 224x224 input): channels, input size, stride.
MOBILENET_V2_DEPTHWISE: dict[str, dict[str, object]] = {
    f"mobilenet_v2_{size}x{size}x{channels}_s{stride}": {
        "H": size, "W": size, "C": channels, "stride": stride,
    }
    for channels, size, stride in [
        (32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1), (192, 28, 2),
        (384, 14, 1), (576, 14, 1), (576, 14, 2), (960, 7, 1),
    ]
}  # fmt: skip


def _conv_params(layers: str) -> tuple[Param, ...]:
    return (
        Param("N", int, 1, "batch size"),
        Param("H", int, 56, "input height"),
        Param("W", int, 56, "input width"),
        Param("CI", int, 64, "input channels"),
        Param("CO", int, 64, "output channels"),
        Param("KH", int, 3, "kernel height"),
        Param("KW", int, 3, "kernel width"),
        Param("stride", int, 1, "stride in both spatial dimensions"),
        Param("padding", int, 1, f"zero padding on each side of {layers}", min=0),
        dtype_param(),
    )


def output_size(name: str, H: int, W: int, KH: int, KW: int, stride: int, padding: int):
    """The output height and width of workload ``name``'s convolution.

    Raises:
        UserError: the kernel does not fit the padded input.
    """
    OH = (H + 2 * padding - KH) // stride + 1
    OW = (W + 2 * padding - KW) // stride + 1
    if OH < 1 or OW < 1:
        raise UserError(
            f"{name}: a {KH}x{KW} kernel does not fit the {H}x{W} input padded by {padding}"
        )
    return OH, OW


def correlate_nchw(x: np.ndarray, w: np.ndarray, stride: int, padding: int) -> np.ndarray:
    """What a convolution layer computes of NCHW data ``x`` and an OIHW kernel ``w`` (a
    correlation), in numpy, in their dtype: the reference of the NCHW convolutions."""
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    KH, KW = w.shape[2:]
    OH, OW = (x.shape[2] - KH) // stride + 1, (x.shape[3] - KW) // stride + 1
    result = np.zeros((x.shape[0], w.shape[0], OH, OW), x.dtype)
    for kh in range(KH):
        for kw in range(KW):
            window = x[:, :, kh : kh + stride * OH : stride, kw : kw + stride * OW : stride]
            result += np.einsum("nchw,oc->nohw", window, w[:, :, kh, kw])
    return result


def zero_pad(
    data: te.Tensor,
    padding: int,
    axes: Sequence[int],
    dtype: str,
    layout: str,
    *,
    sizes: Sequence[int] | None = None,
    attrs: dict[str, object] | None = None,
) -> te.Tensor:
    """``data`` with ``padding`` zeros on each side of ``axes``; ``data`` itself when that adds
    nothing. ``sizes`` (one per axis of ``axes``) extend the padded axes with zeros after the
    data, to at least its size plus twice ``padding``; ``attrs`` annotate the stage.

    ``layout`` names the axes, one letter each (``"nhwc"``): the names of the loop variables.
    """
    shape = [int(d) for d in data.shape]
    padded = dict(zip(axes, sizes, strict=True)) if sizes else {}
    padded_shape = [padded.get(a, d + 2 * padding) if a in axes else d for a, d in enumerate(shape)]
    if padded_shape == shape:
        return data

    def fcompute(*index: tirx.Var) -> tirx.PrimExpr:
        inside = []
        for axis in axes:
            inside += [index[axis] >= padding, index[axis] < shape[axis] + padding]
        source = [i - padding if a in axes else i for a, i in enumerate(index)]
        return tirx.if_then_else(tirx.all(*inside), data[tuple(source)], tirx.const(0, dtype))

    return te.compute(padded_shape, fcompute, name="pad", varargs_names=list(layout), attrs=attrs)


def conv_flops(N: int, OH: int, OW: int, CO: int, KH: int, KW: int, CI: int) -> int:
    """A direct convolution's FLOPs: one multiply and one add per output element, kernel tap and
    input channel of its group (``CI``)."""
    return 2 * N * OH * OW * CO * KH * KW * CI


def correlate_nhwc(x: np.ndarray, w: np.ndarray, stride: int, padding: int) -> np.ndarray:
    """What a convolution layer computes of NHWC data ``x`` and an HWIO kernel ``w``, in numpy, in
    their dtype: the reference of the NHWC convolution."""
    x = np.pad(x, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    KH, KW = w.shape[:2]
    OH, OW = (x.shape[1] - KH) // stride + 1, (x.shape[2] - KW) // stride + 1
    result = np.zeros((x.shape[0], OH, OW, w.shape[3]), x.dtype)
    for kh in range(KH):
        for kw in range(KW):
            window = x[:, kh : kh + stride * OH : stride, kw : kw + stride * OW : stride, :]
            result += np.tensordot(window, w[kh, kw], axes=([3], [0]))
    return result


def _conv2d(
    layout: str,
    N: int,
    H: int,
    W: int,
    CI: int,
    CO: int,
    KH: int,
    KW: int,
    stride: int,
    padding: int,
    dtype: str,
) -> Workload:
    """The 2-D convolution ``conv2d_{layout}``: the same arithmetic over NHWC data and an HWIO
    kernel (``layout`` "nhwc") or NCHW data and an OIHW kernel ("nchw")."""
    name = f"conv2d_{layout}"
    OH, OW = output_size(name, H, W, KH, KW, stride, padding)
    acc = accumulation_dtype(dtype)
    rh = te.reduce_axis((0, KH), name="rh")
    rw = te.reduce_axis((0, KW), name="rw")
    rc = te.reduce_axis((0, CI), name="rc")
    if layout == "nhwc":
        data = te.placeholder((N, H, W, CI), dtype, name="data")
        weight = te.placeholder((KH, KW, CI, CO), dtype, name="weight")
        padded = zero_pad(data, padding, (1, 2), dtype, layout)
        out = compute_accumulated(
            (N, OH, OW, CO),
            lambda n, oh, ow, co: te.sum(
                padded[n, oh * stride + rh, ow * stride + rw, rc].astype(acc)
                * weight[rh, rw, rc, co].astype(acc),
                axis=[rh, rw, rc],
            ),
            dtype,
            "conv",
        )
        correlate = correlate_nhwc
    else:
        data = te.placeholder((N, CI, H, W), dtype, name="data")
        weight = te.placeholder((CO, CI, KH, KW), dtype, name="weight")
        padded = zero_pad(data, padding, (2, 3), dtype, layout)
        out = compute_accumulated(
            (N, CO, OH, OW),
            lambda n, co, oh, ow: te.sum(
                padded[n, rc, oh * stride + rh, ow * stride + rw].astype(acc)
                * weight[co, rc, rh, rw].astype(acc),
                axis=[rc, rh, rw],
            ),
            dtype,
            "conv",
        )
        correlate = correlate_nchw

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, w = (to_accumulation(array) for array in inputs)
        return [correlate(x, w, stride, padding).astype(dtype)]

    params: dict[str, object] = {
        "N": N, "H": H, "W": W, "CI": CI, "CO": CO, "KH": KH, "KW": KW,
        "stride": stride, "padding": padding, "dtype": dtype,
    }  # fmt: skip
    flops = conv_flops(N, OH, OW, CO, KH, KW, CI)
    return workload_from_te(name, params, [data, weight, out], flops=flops, reference=reference)


register_workload(
    "conv2d_nhwc",
    "2-D convolution, input NHWC, weight HWIO (KH, KW, CI, CO), output NHWC",
    *_conv_params("H and W"),
    presets=RESNET50_LAYERS,
)(partial(_conv2d, "nhwc"))
register_workload(
    "conv2d_nchw",
    "2-D convolution, input NCHW, weight OIHW (CO, CI, KH, KW), output NCHW (PyTorch's layout)",
    *_conv_params("H and W"),
    presets=RESNET50_LAYERS,
)(partial(_conv2d, "nchw"))


@register_workload(
    "depthwise_conv2d",
    "depthwise 2-D convolution (one filter per channel), input NCHW, weight (C, KH, KW)",
    Param("N", int, 1, "batch size"),
    Param("H", int, 112, "input height"),
    Param("W", int, 112, "input width"),
    Param("C", int, 32, "channels (in and out)"),
    Param("KH", int, 3, "kernel height"),
    Param("KW", int, 3, "kernel width"),
    Param("stride", int, 1, "stride in both spatial dimensions"),
    Param("padding", int, 1, "zero padding on each side of H and W", min=0),
    dtype_param(),
    presets=MOBILENET_V2_DEPTHWISE,
)
def depthwise_conv2d(
    N: int, H: int, W: int, C: int, KH: int, KW: int, stride: int, padding: int, dtype: str
) -> Workload:
    OH, OW = output_size("depthwise_conv2d", H, W, KH, KW, stride, padding)
    acc = accumulation_dtype(dtype)
    data = te.placeholder((N, C, H, W), dtype, name="data")
    weight = te.placeholder((C, KH, KW), dtype, name="weight")
    padded = zero_pad(data, padding, (2, 3), dtype, "nchw")
    rh = te.reduce_axis((0, KH), name="rh")
    rw = te.reduce_axis((0, KW), name="rw")
    out = compute_accumulated(
        (N, C, OH, OW),
        lambda n, c, oh, ow: te.sum(
            padded[n, c, oh * stride + rh, ow * stride + rw].astype(acc)
            * weight[c, rh, rw].astype(acc),
            axis=[rh, rw],
        ),
        dtype,
        "depthwise",
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, w = (to_accumulation(array) for array in inputs)
        x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
        result = np.zeros((N, C, OH, OW), acc)
        for kh in range(KH):
            for kw in range(KW):
                window = x[:, :, kh : kh + stride * OH : stride, kw : kw + stride * OW : stride]
                result += window * w[None, :, kh, kw, None, None]
        return [result.astype(dtype)]

    params: dict[str, object] = {
        "N": N, "H": H, "W": W, "C": C, "KH": KH, "KW": KW, "stride": stride,
        "padding": padding, "dtype": dtype,
    }  # fmt: skip
    flops = conv_flops(N, OH, OW, C, KH, KW, 1)
    return workload_from_te(
        "depthwise_conv2d", params, [data, weight, out], flops=flops, reference=reference
    )


@register_workload(
    "conv1d_glu",
    "gated convolution block of ConvS2S: x + GLU(conv1d(x)), sequence NLC, weight (KW, C, 2C)",
    Param("N", int, 1, "batch size"),
    Param("L", int, 128, "sequence length"),
    Param("C", int, 512, "channels (the GLU halves 2C back to C)"),
    Param("KW", int, 3, "kernel width (odd: the sequence is padded by KW // 2 on each side)"),
    dtype_param(),
)
def conv1d_glu(N: int, L: int, C: int, KW: int, dtype: str) -> Workload:
    if KW % 2 == 0:
        raise UserError(f"conv1d_glu: kernel width KW must be odd, got {KW}")
    acc = accumulation_dtype(dtype)
    pad = KW // 2
    x = te.placeholder((N, L, C), dtype, name="x")
    weight = te.placeholder((KW, C, 2 * C), dtype, name="weight")
    bias = te.placeholder((2 * C,), dtype, name="bias")
    padded = zero_pad(x, pad, (1,), dtype, "ntc")
    rk = te.reduce_axis((0, KW), name="rk")
    rc = te.reduce_axis((0, C), name="rc")
    conv = te.compute(
        (N, L, 2 * C),
        lambda n, t, o: te.sum(
            padded[n, t + rk, rc].astype(acc) * weight[rk, rc, o].astype(acc), axis=[rk, rc]
        ),
        name="conv",
    )
    out = te.compute(
        (N, L, C),
        lambda n, t, c: (
            (conv[n, t, c] + bias[c].astype(acc))
            * te.sigmoid(conv[n, t, c + C] + bias[c + C].astype(acc))
            + x[n, t, c].astype(acc)
        ).astype(dtype),
        name="glu",
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        seq, w, b = (to_accumulation(array) for array in inputs)
        padded_seq = np.pad(seq, ((0, 0), (pad, pad), (0, 0)))
        pre = sum(padded_seq[:, k : k + L, :] @ w[k] for k in range(KW)) + b
        gated = pre[..., :C] / (1 + np.exp(-pre[..., C:]))
        return [(gated + seq).astype(dtype)]

    params: dict[str, object] = {"N": N, "L": L, "C": C, "KW": KW, "dtype": dtype}
    # The convolution: a multiply and an add per tap; the bias, two additions per output channel
    # of the convolution; per output element of the block, a sigmoid (negation, exponential,
    # addition, division: 4), the gating multiply and the residual add.
    flops = 2 * N * L * 2 * C * KW * C + 2 * N * L * 2 * C + 6 * N * L * C
    return workload_from_te(
        "conv1d_glu", params, [x, weight, bias, out], flops=flops, reference=reference
    )


@register_workload(
    "softmax",
    "numerically stable softmax along each row of a rows x cols matrix",
    Param("rows", int, 256, "number of rows"),
    Param("cols", int, 1024, "row length (the reduction)"),
    dtype_param(),
)
def softmax(rows: int, cols: int, dtype: str) -> Workload:
    acc = accumulation_dtype(dtype)
    x = te.placeholder((rows, cols), dtype, name="x")
    k = te.reduce_axis((0, cols), name="k")
    row_max = te.compute((rows,), lambda i: te.max(x[i, k], axis=k), name="row_max")
    shifted = te.compute(
        (rows, cols), lambda i, j: x[i, j].astype(acc) - row_max[i].astype(acc), name="shifted"
    )
    # TOPI's fast_exp in float32: a polynomial that vectorizes (to float32 accuracy), where LLVM
    # would call libm's scalar expf once per element (the exact exp in other dtypes)
    exp = topi.fast_exp(shifted)
    k2 = te.reduce_axis((0, cols), name="k2")
    row_sum = te.compute((rows,), lambda i: te.sum(exp[i, k2], axis=k2), name="row_sum")
    out = te.compute(
        (rows, cols), lambda i, j: (exp[i, j] / row_sum[i]).astype(dtype), name="softmax"
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        values = to_accumulation(inputs[0])
        shifted = np.exp(values - values.max(axis=1, keepdims=True))
        return [(shifted / shifted.sum(axis=1, keepdims=True)).astype(dtype)]

    # Per element: one comparison for the max, a subtraction, an exponential, an addition for the
    # sum and a division, counting each as one operation.
    flops = 5 * rows * cols
    params: dict[str, object] = {"rows": rows, "cols": cols, "dtype": dtype}
    return workload_from_te("softmax", params, [x, out], flops=flops, reference=reference)


LAYERNORM_EPSILON = 1e-5


@register_workload(
    "layernorm",
    "layer normalisation of each row: (x - mean) / sqrt(var + 1e-5) * gamma + beta",
    Param("rows", int, 512, "number of rows (tokens)"),
    Param("cols", int, 768, "row length (the normalised features)"),
    dtype_param(),
)
def layernorm(rows: int, cols: int, dtype: str) -> Workload:
    acc = accumulation_dtype(dtype)
    x = te.placeholder((rows, cols), dtype, name="x")
    gamma = te.placeholder((cols,), dtype, name="gamma")
    beta = te.placeholder((cols,), dtype, name="beta")
    k = te.reduce_axis((0, cols), name="k")
    row_sum = te.compute((rows,), lambda i: te.sum(x[i, k].astype(acc), axis=k), name="row_sum")

    def centred(i: tirx.Var, j: tirx.Var) -> tirx.PrimExpr:
        return x[i, j].astype(acc) - row_sum[i] / cols

    k2 = te.reduce_axis((0, cols), name="k2")
    square_sum = te.compute(
        (rows,), lambda i: te.sum(centred(i, k2) * centred(i, k2), axis=k2), name="square_sum"
    )
    out = te.compute(
        (rows, cols),
        lambda i, j: (
            centred(i, j)
            * te.rsqrt(square_sum[i] / cols + tirx.const(LAYERNORM_EPSILON, acc))
            * gamma[j].astype(acc)
            + beta[j].astype(acc)
        ).astype(dtype),
        name="layernorm",
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        values, scale, shift = (to_accumulation(array) for array in inputs)
        centred = values - values.mean(axis=1, keepdims=True)
        variance = (centred**2).mean(axis=1, keepdims=True)
        return [(centred / np.sqrt(variance + LAYERNORM_EPSILON) * scale + shift).astype(dtype)]

    # Per element: an addition for the mean; a subtraction, a square and an addition for the
    # variance; a subtraction and three multiplications (by the reciprocal root, gamma) and an
    # addition (beta) for the output.
    flops = 8 * rows * cols
    params: dict[str, object] = {"rows": rows, "cols": cols, "dtype": dtype}
    return workload_from_te(
        "layernorm", params, [x, gamma, beta, out], flops=flops, reference=reference
    )


@register_workload(
    "global_avg_pool",
    "mean of each channel over the pixels of an NHWC tensor (a squeeze-and-excite mean, a "
    "classifier's pool)",
    Param("N", int, 1, "batch size"),
    Param("H", int, 112, "input height"),
    Param("W", int, 112, "input width"),
    Param("C", int, 32, "channels"),
    dtype_param(),
)
def global_avg_pool(N: int, H: int, W: int, C: int, dtype: str) -> Workload:
    acc = accumulation_dtype(dtype)
    x = te.placeholder((N, H, W, C), dtype, name="x")
    rh = te.reduce_axis((0, H), name="rh")
    rw = te.reduce_axis((0, W), name="rw")
    total = te.compute(
        (N, C), lambda n, c: te.sum(x[n, rh, rw, c].astype(acc), axis=[rh, rw]), name="total"
    )
    out = te.compute(
        (N, C), lambda n, c: (total[n, c] / tirx.const(H * W, acc)).astype(dtype), name="pool"
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [to_accumulation(inputs[0]).mean(axis=(1, 2)).astype(dtype)]

    # An addition per element and a division per channel.
    flops = N * H * W * C + N * C
    params: dict[str, object] = {"N": N, "H": H, "W": W, "C": C, "dtype": dtype}
    return workload_from_te("global_avg_pool", params, [x, out], flops=flops, reference=reference)
