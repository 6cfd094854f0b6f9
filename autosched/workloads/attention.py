"""Attention workloads: Luong's general score, Bahdanau's additive score, plain scaled dot-product
attention, and the same computed in chunks of keys whose summaries are combined (Rabe and Staats),
which a schedule can run without keeping a query's L scores at once.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import te, tirx

from autosched.errors import UserError
from autosched.workload import Workload, workload_from_te
from autosched.workloads._common import accumulation_dtype, dtype_param, to_accumulation
from autosched.workloads._registry import Param, register_workload


def _softmax_context(
    scores: te.Tensor, values: te.Tensor, dtype: str, name: str = "context", scale: float = 1.0
) -> te.Tensor:
    """``softmax(scale * scores) @ values`` for scores (B, T, S) and values (B, S, D).

    The scale (positive) is applied after the max is subtracted, where it costs nothing extra.
    """
    B, T_, S = (int(d) for d in scores.shape)
    D = int(values.shape[2])
    acc = scores.dtype
    s1 = te.reduce_axis((0, S), name="s1")
    row_max = te.compute((B, T_), lambda b, t: te.max(scores[b, t, s1], axis=s1), name="score_max")
    exp = te.compute(
        (B, T_, S),
        lambda b, t, s: te.exp((scores[b, t, s] - row_max[b, t]) * tirx.const(scale, acc)),
        name="score_exp",
    )
    s2 = te.reduce_axis((0, S), name="s2")
    row_sum = te.compute((B, T_), lambda b, t: te.sum(exp[b, t, s2], axis=s2), name="score_sum")
    # Normalise the weights before the weighted sum, so the last stage has a single producer:
    # MetaSchedule's tiling of the weighted sum moves its consumer under its loops, which fails
    # when that consumer also reads the row sums.
    weights = te.compute(
        (B, T_, S), lambda b, t, s: exp[b, t, s] / row_sum[b, t], name="score_weight"
    )
    s3 = te.reduce_axis((0, S), name="s3")
    weighted = te.compute(
        (B, T_, D),
        lambda b, t, d: te.sum(weights[b, t, s3] * values[b, s3, d].astype(acc), axis=s3),
        name="weighted",
    )
    return te.compute((B, T_, D), lambda b, t, d: weighted[b, t, d].astype(dtype), name=name)


def _projection(
    rows: te.Tensor, weight: te.Tensor, acc: str, name: str, loops: str, reduce: str
) -> te.Tensor:
    """``rows @ weight^T`` in ``acc``: rows (B, N, D) by a weight (out, D), a projection of an
    attention's states. ``loops`` names its three loops and ``reduce`` its reduction."""
    B, N, D = (int(d) for d in rows.shape)
    e = te.reduce_axis((0, D), name=reduce)

    def project(b: tirx.Var, n: tirx.Var, o: tirx.Var) -> tirx.PrimExpr:
        return te.sum(weight[o, e].astype(acc) * rows[b, n, e].astype(acc), axis=e)

    return te.compute(
        (B, N, int(weight.shape[0])),
        lambda *index: project(*index),
        name=name,
        varargs_names=list(loops),
    )


def _softmax_rows(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def _softmax_context_flops(B: int, T_: int, S: int, D: int) -> int:
    # Per score: max, subtraction, exponential, addition and division (5); per score and feature
    # a multiply and an add for the context.
    return 5 * B * T_ * S + 2 * B * T_ * S * D


@register_workload(
    "attention_luong",
    "Luong's general attention: softmax(h_t W_a h_s^T) h_s, targets (B, T, D), sources (B, S, D)",
    Param("B", int, 8, "batch size"),
    Param("T", int, 32, "target positions (decoder states)"),
    Param("S", int, 64, "source positions (encoder states)"),
    Param("D", int, 512, "hidden size"),
    dtype_param(),
)
def attention_luong(B: int, T: int, S: int, D: int, dtype: str) -> Workload:
    acc = accumulation_dtype(dtype)
    target = te.placeholder((B, T, D), dtype, name="target")
    source = te.placeholder((B, S, D), dtype, name="source")
    w_a = te.placeholder((D, D), dtype, name="W_a")
    projected = _projection(source, w_a, acc, "projected", "bsd", "e")
    k = te.reduce_axis((0, D), name="k")
    scores = te.compute(
        (B, T, S),
        lambda b, t, s: te.sum(target[b, t, k].astype(acc) * projected[b, s, k], axis=k),
        name="score",
    )
    context = _softmax_context(scores, source, dtype)

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        h_t, h_s, weight = (to_accumulation(array) for array in inputs)
        score = h_t @ (h_s @ weight.T).transpose(0, 2, 1)
        return [(_softmax_rows(score) @ h_s).astype(dtype)]

    # W_a h_s and the scores: a multiply and an add each; then the softmax and the context.
    flops = 2 * B * S * D * D + 2 * B * T * S * D + _softmax_context_flops(B, T, S, D)
    params: dict[str, object] = {"B": B, "T": T, "S": S, "D": D, "dtype": dtype}
    return workload_from_te(
        "attention_luong", params, [target, source, w_a, context], flops=flops, reference=reference
    )


@register_workload(
    "attention_bahdanau",
    "Bahdanau's additive attention: softmax(v . tanh(W_q q + W_k h)) h, queries (B, T, D)",
    Param("B", int, 8, "batch size"),
    Param("T", int, 32, "query positions (decoder states)"),
    Param("S", int, 64, "source positions (annotations h)"),
    Param("D", int, 256, "hidden size of queries and annotations"),
    Param("A", int, 256, "size of the alignment model's hidden layer"),
    dtype_param(),
)
def attention_bahdanau(B: int, T: int, S: int, D: int, A: int, dtype: str) -> Workload:
    acc = accumulation_dtype(dtype)
    query = te.placeholder((B, T, D), dtype, name="query")
    source = te.placeholder((B, S, D), dtype, name="source")
    w_q = te.placeholder((A, D), dtype, name="W_q")
    w_k = te.placeholder((A, D), dtype, name="W_k")
    v = te.placeholder((A,), dtype, name="v")
    query_proj = _projection(query, w_q, acc, "query_proj", "bta", "e1")
    source_proj = _projection(source, w_k, acc, "source_proj", "bsa", "e2")
    r = te.reduce_axis((0, A), name="r")
    scores = te.compute(
        (B, T, S),
        lambda b, t, s: te.sum(
            v[r].astype(acc) * te.tanh(query_proj[b, t, r] + source_proj[b, s, r]), axis=r
        ),
        name="score",
    )
    context = _softmax_context(scores, source, dtype)

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        q, h, wq, wk, weights = (to_accumulation(array) for array in inputs)
        hidden = np.tanh((q @ wq.T)[:, :, None, :] + (h @ wk.T)[:, None, :, :])
        return [(_softmax_rows(hidden @ weights) @ h).astype(dtype)]

    # The two projections (multiply and add); per score and alignment unit an addition, a tanh,
    # a multiply and an add; then the softmax and the context.
    flops = (
        2 * B * T * D * A
        + 2 * B * S * D * A
        + 4 * B * T * S * A
        + _softmax_context_flops(B, T, S, D)
    )
    params: dict[str, object] = {"B": B, "T": T, "S": S, "D": D, "A": A, "dtype": dtype}
    return workload_from_te(
        "attention_bahdanau",
        params,
        [query, source, w_q, w_k, v, context],
        flops=flops,
        reference=reference,
    )


def _dot_product_attention_reference(dtype: str):
    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        q, k, v = (to_accumulation(array) for array in inputs)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
        return [(_softmax_rows(scores) @ v).astype(dtype)]

    return reference


def _dot_product_attention_flops(B: int, L: int, D: int) -> int:
    # Q K^T (a multiply and an add), the 1/sqrt(D) scaling of each score, then the softmax and
    # the context. Work that chunking adds (rescaling partial sums) is not counted.
    return 2 * B * L * L * D + B * L * L + _softmax_context_flops(B, L, L, D)


_DOT_PRODUCT_PARAMS = (
    Param("B", int, 8, "batch size times heads"),
    Param("L", int, 1024, "sequence length (queries and keys)"),
    Param("D", int, 64, "head size"),
)


@register_workload(
    "attention_naive",
    "scaled dot-product self-attention softmax(Q K^T / sqrt(D)) V with the L x L scores in memory",
    *_DOT_PRODUCT_PARAMS,
    dtype_param(),
)
def attention_naive(B: int, L: int, D: int, dtype: str) -> Workload:
    acc = accumulation_dtype(dtype)
    q = te.placeholder((B, L, D), dtype, name="Q")
    k = te.placeholder((B, L, D), dtype, name="K")
    v = te.placeholder((B, L, D), dtype, name="V")
    d = te.reduce_axis((0, D), name="d")
    scores = te.compute(
        (B, L, L),
        lambda b, i, j: te.sum(q[b, i, d].astype(acc) * k[b, j, d].astype(acc), axis=d),
        name="score",
    )
    out = _softmax_context(scores, v, dtype, name="O", scale=1 / math.sqrt(D))
    params: dict[str, object] = {"B": B, "L": L, "D": D, "dtype": dtype}
    return workload_from_te(
        "attention_naive",
        params,
        [q, k, v, out],
        flops=_dot_product_attention_flops(B, L, D),
        reference=_dot_product_attention_reference(dtype),
    )


@register_workload(
    "attention_chunked",
    "attention_naive over chunks of keys: per-chunk max, sum and partial output, then combined",
    *_DOT_PRODUCT_PARAMS,
    Param("chunk", int, 128, "keys per chunk (divides L)"),
    dtype_param(),
)
def attention_chunked(B: int, L: int, D: int, chunk: int, dtype: str) -> Workload:
    """Rabe and Staats's chunked attention: each chunk of ``chunk`` keys is summarised by its
    scores' max, the sum of their exponentials and the weighted sum of its values; the summaries
    are then rescaled to the row's max and combined. Every stage is a block MetaSchedule can tile.

    A query's scores are needed one chunk at a time: a schedule that computes a chunk's scores
    and weights under the loops of its summaries keeps only that chunk alive (TVM compacts a
    buffer to the region one iteration touches), where attention_naive keeps all L of them. The
    summaries take ``L / chunk * (D + 2)`` numbers per query. The search chooses on time alone,
    and may compute every stage at the root, with all the scores in memory at once.
    """
    if L % chunk:
        raise UserError(f"attention_chunked: chunk {chunk} does not divide L={L}")
    acc = accumulation_dtype(dtype)
    chunks = L // chunk
    scale = tirx.const(1 / math.sqrt(D), acc)
    q = te.placeholder((B, L, D), dtype, name="Q")
    k = te.placeholder((B, L, D), dtype, name="K")
    v = te.placeholder((B, L, D), dtype, name="V")
    d = te.reduce_axis((0, D), name="d")
    # The scale (positive) applies after the max is subtracted, as in _softmax_context.
    scores = te.compute(
        (B, L, chunks, chunk),
        lambda b, i, c, j: te.sum(
            q[b, i, d].astype(acc) * k[b, c * chunk + j, d].astype(acc), axis=d
        ),
        name="chunk_score",
    )
    j1 = te.reduce_axis((0, chunk), name="j1")
    chunk_max = te.compute(
        (B, L, chunks), lambda b, i, c: te.max(scores[b, i, c, j1], axis=j1), name="chunk_max"
    )
    weights = te.compute(
        (B, L, chunks, chunk),
        lambda b, i, c, j: te.exp((scores[b, i, c, j] - chunk_max[b, i, c]) * scale),
        name="chunk_weight",
    )
    j2 = te.reduce_axis((0, chunk), name="j2")
    chunk_sum = te.compute(
        (B, L, chunks), lambda b, i, c: te.sum(weights[b, i, c, j2], axis=j2), name="chunk_sum"
    )
    j3 = te.reduce_axis((0, chunk), name="j3")
    chunk_out = te.compute(
        (B, L, chunks, D),
        lambda b, i, c, e: te.sum(
            weights[b, i, c, j3] * v[b, c * chunk + j3, e].astype(acc), axis=j3
        ),
        name="chunk_out",
    )
    c1 = te.reduce_axis((0, chunks), name="c1")
    row_max = te.compute((B, L), lambda b, i: te.max(chunk_max[b, i, c1], axis=c1), name="row_max")
    rescale = te.compute(
        (B, L, chunks),
        lambda b, i, c: te.exp((chunk_max[b, i, c] - row_max[b, i]) * scale),
        name="chunk_rescale",
    )
    c2 = te.reduce_axis((0, chunks), name="c2")
    row_sum = te.compute(
        (B, L),
        lambda b, i: te.sum(chunk_sum[b, i, c2] * rescale[b, i, c2], axis=c2),
        name="row_sum",
    )
    c3 = te.reduce_axis((0, chunks), name="c3")
    combined = te.compute(
        (B, L, D),
        lambda b, i, e: te.sum(chunk_out[b, i, c3, e] * rescale[b, i, c3], axis=c3),
        name="combined",
    )
    out = te.compute(
        (B, L, D), lambda b, i, e: (combined[b, i, e] / row_sum[b, i]).astype(dtype), name="O"
    )
    params: dict[str, object] = {"B": B, "L": L, "D": D, "chunk": chunk, "dtype": dtype}
    return workload_from_te(
        "attention_chunked",
        params,
        [q, k, v, out],
        flops=_dot_product_attention_flops(B, L, D),
        reference=_dot_product_attention_reference(dtype),
    )
