"""The counter-based Philox4x32-10 generator (Salmon et al., "Parallel random numbers: as easy as
1, 2, 3"), written twice: in numpy for references and as TIR expressions for kernels, and the
dropout_philox workload that draws its mask from it.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx

from autosched.errors import UserError
from autosched.workload import Workload, workload_from_te
from autosched.workloads._common import dtype_param
from autosched.workloads._registry import Param, register_workload

ROUNDS = 10
MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
# The Weyl sequence that bumps the key between rounds: the golden ratio and sqrt(3) - 1.
KEY_BUMPS = (0x9E3779B9, 0xBB67AE85)
WORDS = 4  # 32-bit words per counter and per output block


def philox4x32_numpy(counters: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Philox4x32-10 of ``counters`` (n, 4) under ``key`` (2,): n blocks of 4 words, uint32."""
    x = [counters[:, word].astype(np.uint64) for word in range(WORDS)]
    k0, k1 = (np.uint64(int(word)) for word in key)
    mask = np.uint64(0xFFFFFFFF)
    for round_index in range(ROUNDS):
        if round_index:
            k0 = (k0 + np.uint64(KEY_BUMPS[0])) & mask
            k1 = (k1 + np.uint64(KEY_BUMPS[1])) & mask
        product0 = x[0] * np.uint64(MULTIPLIERS[0])
        product1 = x[2] * np.uint64(MULTIPLIERS[1])
        x = [
            (product1 >> np.uint64(32)) ^ x[1] ^ k0,
            product1 & mask,
            (product0 >> np.uint64(32)) ^ x[3] ^ k1,
            product0 & mask,
        ]
    return np.stack(x, axis=1).astype(np.uint32)


def philox4x32_tir(counter: list[tirx.PrimExpr], key: list[tirx.PrimExpr]) -> list[tirx.PrimExpr]:
    """Philox4x32-10 as TIR expressions of uint32 words; the 32x32->64-bit products use uint64.

    Each round's words are let-bound, so an expression grows linearly with the rounds. Every
    output word binds its own variables (a variable may be defined once in a function); the
    repeated rounds are common subexpressions that the compiler computes once.
    """
    return [_philox_word(counter, key, word) for word in range(WORDS)]


def _philox_word(
    counter: list[tirx.PrimExpr], key: list[tirx.PrimExpr], output: int
) -> tirx.PrimExpr:
    uint32 = "uint32"
    x = [tirx.Cast(uint32, word) for word in counter]
    k0, k1 = (tirx.Cast(uint32, word) for word in key)
    bindings: list[tuple[tirx.Var, tirx.PrimExpr]] = []

    def bind(name: str, value: tirx.PrimExpr, dtype: str = uint32) -> tirx.Var:
        var = tirx.Var(f"{name}_w{output}", dtype)
        bindings.append((var, value))
        return var

    for round_index in range(ROUNDS):
        if round_index:
            k0 = bind(f"k0_{round_index}", k0 + tirx.const(KEY_BUMPS[0], uint32))
            k1 = bind(f"k1_{round_index}", k1 + tirx.const(KEY_BUMPS[1], uint32))
        product0 = bind(
            f"p0_{round_index}",
            x[0].astype("uint64") * tirx.const(MULTIPLIERS[0], "uint64"),
            "uint64",
        )
        product1 = bind(
            f"p1_{round_index}",
            x[2].astype("uint64") * tirx.const(MULTIPLIERS[1], "uint64"),
            "uint64",
        )
        x = [
            bind(f"x0_{round_index}", (product1 >> 32).astype(uint32) ^ x[1] ^ k0),
            bind(f"x1_{round_index}", _low_word(product1)),
            bind(f"x2_{round_index}", (product0 >> 32).astype(uint32) ^ x[3] ^ k1),
            bind(f"x3_{round_index}", _low_word(product0)),
        ]
    expr: tirx.PrimExpr = x[output]
    for var, value in reversed(bindings):
        expr = tirx.Let(var, value, expr)
    return expr


def _low_word(product: tirx.PrimExpr) -> tirx.PrimExpr:
    """The low 32 bits of a uint64; masked first, as TVM's constant folding of a narrowing cast
    rejects values that do not fit (which loop partitioning can make of a product)."""
    return (product & tirx.const(0xFFFFFFFF, "uint64")).astype("uint32")


def _drop_threshold(drop_percent: int) -> int:
    """A 32-bit random word below this drops its element: probability drop_percent / 100."""
    return drop_percent * 2**32 // 100


@register_workload(
    "dropout_philox",
    "dropout of a rows x cols tensor; element e keeps if word e % 4 of Philox4x32-10 block e // 4 "
    "(counter (e // 4, 0, 0, 0), key from the seed buffer) is at or above the drop threshold",
    Param("rows", int, 4096, "rows"),
    Param("cols", int, 1024, "columns"),
    Param("drop_percent", int, 10, "probability of dropping an element, in percent", min=0, max=99),
    dtype_param(),
)
def dropout_philox(rows: int, cols: int, drop_percent: int, dtype: str) -> Workload:
    if rows * cols >= 2**34:
        raise UserError("dropout_philox: at most 2**34 elements (32-bit block counter)")
    blocks = -(-rows * cols // WORDS)
    threshold = _drop_threshold(drop_percent)
    keep_scale = 100 / (100 - drop_percent)
    x = te.placeholder((rows, cols), dtype, name="x")
    seed = te.placeholder((2,), "uint32", name="seed")
    zero = tirx.const(0, "uint32")
    words = te.compute(
        (blocks,),
        lambda block: philox4x32_tir([block, zero, zero, zero], [seed[0], seed[1]]),
        name="philox",
    )

    def keep(r: tirx.Var, c: tirx.Var) -> tirx.PrimExpr:
        element = r * cols + c
        block, word = element // WORDS, element % WORDS
        bits = tirx.Select(
            word == 0,
            words[0][block],
            tirx.Select(
                word == 1,
                words[1][block],
                tirx.Select(word == 2, words[2][block], words[3][block]),
            ),
        )
        return bits >= tirx.const(threshold, "uint32")

    mask = te.compute((rows, cols), lambda r, c: keep(r, c).astype("uint8"), name="keep")
    out = te.compute(
        (rows, cols),
        lambda r, c: tirx.Select(
            mask[r, c] == tirx.const(1, "uint8"),
            x[r, c] * tirx.const(keep_scale, dtype),
            tirx.const(0, dtype),
        ),
        name="dropout",
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        values, key = inputs
        counters = np.zeros((blocks, WORDS), np.uint32)
        counters[:, 0] = np.arange(blocks, dtype=np.uint32)
        bits = philox4x32_numpy(counters, key).reshape(-1)[: rows * cols].reshape(rows, cols)
        kept = bits >= np.uint32(threshold)
        scaled = values * np.asarray(keep_scale, dtype=values.dtype)
        return [kept.astype(np.uint8), np.where(kept, scaled, 0).astype(dtype)]

    # Per block of four elements: ten rounds of two 32x32-bit products, four xors; nine key
    # bumps of two additions (78); per element one comparison and one multiply.
    flops = 78 * blocks + 2 * rows * cols
    params: dict[str, object] = {
        "rows": rows, "cols": cols, "drop_percent": drop_percent, "dtype": dtype,
    }  # fmt: skip
    return workload_from_te(
        "dropout_philox",
        params,
        [x, seed, mask, out],
        flops=flops,
        reference=reference,
        num_outputs=2,
    )
