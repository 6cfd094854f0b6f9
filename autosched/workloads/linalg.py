"""Linear-algebra workloads: matmul, batch_matmul and dense_bias_relu (a fused epilogue).

Each is a TE definition with a numpy reference and an exact FLOP count.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx

from autosched.workload import Workload, workload_from_te
from autosched.workloads._common import (
    accumulation_dtype,
    compute_accumulated,
    dtype_param,
    to_accumulation,
)
from autosched.workloads._registry import Param, register_workload


@register_workload(
    "matmul",
    "C = A @ B with A of shape MxK and B of shape KxN",
    Param("M", int, 512, "rows of A and C"),
    Param("N", int, 512, "columns of B and C"),
    Param("K", int, 512, "columns of A, rows of B (the reduction)"),
    dtype_param(),
)
def matmul(M: int, N: int, K: int, dtype: str) -> Workload:
    acc = accumulation_dtype(dtype)
    a = te.placeholder((M, K), dtype, name="A")
    b = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    c = compute_accumulated(
        (M, N), lambda i, j: te.sum(a[i, k].astype(acc) * b[k, j].astype(acc), axis=k), dtype, "C"
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        lhs, rhs = inputs
        return [(to_accumulation(lhs) @ to_accumulation(rhs)).astype(dtype)]

    params: dict[str, object] = {"M": M, "N": N, "K": K, "dtype": dtype}
    return workload_from_te("matmul", params, [a, b, c], flops=2 * M * N * K, reference=reference)


@register_workload(
    "batch_matmul",
    "C[b] = A[b] @ B[b] for B independent products of MxK by KxN matrices",
    Param("B", int, 8, "batch size"),
    Param("M", int, 128, "rows of each A and C"),
    Param("N", int, 128, "columns of each B and C"),
    Param("K", int, 128, "columns of each A, rows of each B (the reduction)"),
    dtype_param(),
)
def batch_matmul(B: int, M: int, N: int, K: int, dtype: str) -> Workload:
    acc = accumulation_dtype(dtype)
    a = te.placeholder((B, M, K), dtype, name="A")
    b = te.placeholder((B, K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    c = compute_accumulated(
        (B, M, N),
        lambda n, i, j: te.sum(a[n, i, k].astype(acc) * b[n, k, j].astype(acc), axis=k),
        dtype,
        "C",
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        lhs, rhs = inputs
        return [np.matmul(to_accumulation(lhs), to_accumulation(rhs)).astype(dtype)]

    params: dict[str, object] = {"B": B, "M": M, "N": N, "K": K, "dtype": dtype}
    return workload_from_te(
        "batch_matmul", params, [a, b, c], flops=2 * B * M * N * K, reference=reference
    )


@register_workload(
    "dense_bias_relu",
    "Y = relu(X @ W^T + bias): a fully connected layer (W is NxK, as nn.Linear stores it)",
    Param("M", int, 128, "rows of X and Y (tokens or batch)"),
    Param("N", int, 768, "output features: rows of W, columns of Y"),
    Param("K", int, 768, "input features (the reduction)"),
    dtype_param(),
)
def dense_bias_relu(M: int, N: int, K: int, dtype: str) -> Workload:
    acc = accumulation_dtype(dtype)
    x = te.placeholder((M, K), dtype, name="X")
    w = te.placeholder((N, K), dtype, name="W")
    bias = te.placeholder((N,), dtype, name="bias")
    k = te.reduce_axis((0, K), name="k")
    dense = te.compute(
        (M, N), lambda i, j: te.sum(x[i, k].astype(acc) * w[j, k].astype(acc), axis=k), "dense"
    )
    out = te.compute(
        (M, N),
        lambda i, j: tirx.max(dense[i, j] + bias[j].astype(acc), tirx.const(0, acc)).astype(dtype),
        name="Y",
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        lhs, weight, offset = (to_accumulation(array) for array in inputs)
        return [np.maximum(lhs @ weight.T + offset, 0).astype(dtype)]

    params: dict[str, object] = {"M": M, "N": N, "K": K, "dtype": dtype}
    # 2MNK for the products and sums, then per output one addition (bias) and one max (relu).
    flops = 2 * M * N * K + 2 * M * N
    return workload_from_te(
        "dense_bias_relu", params, [x, w, bias, out], flops=flops, reference=reference
    )
