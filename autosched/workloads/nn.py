"""Neural-network workloads: conv2d_nhwc and softmax.

Each is a TE definition with a numpy reference and a FLOP count.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx

from autosched.errors import UserError
from autosched.workload import Workload, workload_from_te
from autosched.workloads._common import (
    accumulation_dtype,
    compute_accumulated,
    dtype_param,
    to_accumulation,
)
from autosched.workloads._registry import Param, register_workload


@register_workload(
    "conv2d_nhwc",
    "2-D convolution, input NHWC, weight HWIO (KH, KW, CI, CO), output NHWC",
    Param("N", int, 1, "batch size"),
    Param("H", int, 56, "input height"),
    Param("W", int, 56, "input width"),
    Param("CI", int, 64, "input channels"),
    Param("CO", int, 64, "output channels"),
    Param("KH", int, 3, "kernel height"),
    Param("KW", int, 3, "kernel width"),
    Param("stride", int, 1, "stride in both spatial dimensions"),
    Param("padding", int, 1, "zero padding on each side, both spatial dimensions", min=0),
    dtype_param(),
)
def conv2d_nhwc(
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
    OH = (H + 2 * padding - KH) // stride + 1
    OW = (W + 2 * padding - KW) // stride + 1
    if OH < 1 or OW < 1:
        raise UserError(
            f"conv2d_nhwc: a {KH}x{KW} kernel does not fit the {H}x{W} input padded by {padding}"
        )
    acc = accumulation_dtype(dtype)
    data = te.placeholder((N, H, W, CI), dtype, name="data")
    weight = te.placeholder((KH, KW, CI, CO), dtype, name="weight")
    padded = data  # no pad stage when there is nothing to pad
    if padding:
        padded = te.compute(
            (N, H + 2 * padding, W + 2 * padding, CI),
            lambda n, h, w, c: tirx.if_then_else(
                tirx.all(h >= padding, h < H + padding, w >= padding, w < W + padding),
                data[n, h - padding, w - padding, c],
                tirx.const(0, dtype),
            ),
            name="pad",
        )
    rh = te.reduce_axis((0, KH), name="rh")
    rw = te.reduce_axis((0, KW), name="rw")
    rc = te.reduce_axis((0, CI), name="rc")
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

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, w = (to_accumulation(array) for array in inputs)
        x = np.pad(x, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
        result = np.zeros((N, OH, OW, CO), acc)
        for kh in range(KH):
            for kw in range(KW):
                window = x[:, kh : kh + stride * OH : stride, kw : kw + stride * OW : stride, :]
                result += np.tensordot(window, w[kh, kw], axes=([3], [0]))
        return [result.astype(dtype)]

    params: dict[str, object] = {
        "N": N, "H": H, "W": W, "CI": CI, "CO": CO, "KH": KH, "KW": KW,
        "stride": stride, "padding": padding, "dtype": dtype,
    }  # fmt: skip
    flops = 2 * N * OH * OW * CO * KH * KW * CI
    return workload_from_te(
        "conv2d_nhwc", params, [data, weight, out], flops=flops, reference=reference
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
    exp = te.compute(
        (rows, cols),
        lambda i, j: te.exp(x[i, j].astype(acc) - row_max[i].astype(acc)),
        name="exp",
    )
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
