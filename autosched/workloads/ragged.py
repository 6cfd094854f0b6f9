"""Ragged batch matmul (CoRa): a batch of sequences of different lengths, packed without padding.

Row r of the packed input belongs to the sequence whose static offset range holds it; the program
is specialised to the lengths, as a ragged-tensor compiler specialises it to their bounds.
"""

from __future__ import annotations

import itertools

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

MAX_SEQUENCES = 64


def parse_lengths(text: str) -> list[int]:
    """Sequence lengths from ``"L1,L2,..."``.

    Raises:
        UserError: not a comma-separated list of 1..64 positive integers.
    """
    try:
        lengths = [int(part) for part in text.split(",")]
    except ValueError:
        raise UserError(
            f"ragged_batch_matmul: lengths must be like 512,128,64; got {text!r}"
        ) from None
    if not 1 <= len(lengths) <= MAX_SEQUENCES or min(lengths) < 1:
        raise UserError(
            f"ragged_batch_matmul: lengths must be 1 to {MAX_SEQUENCES} positive integers; "
            f"got {text!r}"
        )
    return lengths


@register_workload(
    "ragged_batch_matmul",
    "C_b = A_b @ B_b for sequences A_b of lengths L_b x K, packed row after row without padding; "
    "B_b of shape K x N per sequence",
    Param("lengths", str, "512,384,256,128,448,64,320,192", "comma-separated sequence lengths"),
    Param("K", int, 256, "columns of A_b, rows of B_b (the reduction)"),
    Param("N", int, 256, "columns of B_b and C_b"),
    dtype_param(),
)
def ragged_batch_matmul(lengths: str, K: int, N: int, dtype: str) -> Workload:
    sizes = parse_lengths(lengths)
    offsets = np.cumsum([0, *sizes]).tolist()
    rows = offsets[-1]
    acc = accumulation_dtype(dtype)
    a = te.placeholder((rows, K), dtype, name="A")
    b = te.placeholder((len(sizes), K, N), dtype, name="B")

    def sequence(row: tirx.PrimExpr) -> tirx.PrimExpr:
        """The sequence that packed row ``row`` belongs to: how many offsets it has passed."""
        passed = [(row >= start).astype("int32") for start in offsets[1:-1]]
        return sum(passed, tirx.const(0, "int32"))

    k = te.reduce_axis((0, K), name="k")
    out = compute_accumulated(
        (rows, N),
        lambda r, n: te.sum(a[r, k].astype(acc) * b[sequence(r), k, n].astype(acc), axis=k),
        dtype,
        "C",
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        packed, weights = (to_accumulation(array) for array in inputs)
        parts = [
            packed[start:end] @ weights[index]
            for index, (start, end) in enumerate(itertools.pairwise(offsets))
        ]
        return [np.concatenate(parts).astype(dtype)]

    # A multiply and an add per real (unpadded) row, column and reduction step.
    params: dict[str, object] = {"lengths": lengths, "K": K, "N": N, "dtype": dtype}
    return workload_from_te(
        "ragged_batch_matmul", params, [a, b, out], flops=2 * rows * N * K, reference=reference
    )
