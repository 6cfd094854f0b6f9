"""Philox4x32-10 in numpy and in TIR against the Random123 known-answer vectors, and the dropout
mask drawn from it."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te, tirx

from autosched.workloads import get_workload
from autosched.workloads.philox import philox4x32_numpy, philox4x32_tir

# Random123's kat_vectors for philox4x32 with 10 rounds: counter (4 words), key (2), result (4).
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    (
        (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF),
        (0xFFFFFFFF, 0xFFFFFFFF),
        (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
    ),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


def test_numpy_generator_gives_the_known_answers() -> None:
    counters = np.array([counter for counter, _, _ in KNOWN_ANSWERS], np.uint32)
    for index, (_, key, expected) in enumerate(KNOWN_ANSWERS):
        got = philox4x32_numpy(counters[index : index + 1], np.array(key, np.uint32))
        assert got.dtype == np.uint32
        assert tuple(int(word) for word in got[0]) == expected


def test_tir_generator_gives_the_known_answers() -> None:
    counters = te.placeholder((1, 4), "uint32", name="counter")
    key = te.placeholder((2,), "uint32", name="key")
    words = te.compute(
        (1,),
        lambda i: philox4x32_tir([counters[i, w] for w in range(4)], [key[0], key[1]]),
        name="philox",
    )
    out = te.compute(
        (1, 4),
        lambda i, w: tirx.Select(
            w == 0,
            words[0][i],
            tirx.Select(w == 1, words[1][i], tirx.Select(w == 2, words[2][i], words[3][i])),
        ),
        name="out",
    )
    func = te.create_prim_func([counters, key, out])
    module = tvm.compile(tvm.IRModule({"main": func}), target={"kind": "llvm"}).jit()
    for counter, key_words, expected in KNOWN_ANSWERS:
        result = tvm.runtime.tensor(np.zeros((1, 4), np.uint32))
        module["main"](
            tvm.runtime.tensor(np.array([counter], np.uint32)),
            tvm.runtime.tensor(np.array(key_words, np.uint32)),
            result,
        )
        assert tuple(int(word) for word in result.numpy()[0]) == expected


@pytest.mark.parametrize("drop_percent", [0, 25, 90])
def test_dropout_kernel_is_bit_exact_and_drops_at_the_rate(drop_percent: int) -> None:
    workload = get_workload(
        "dropout_philox", {"rows": 64, "cols": 129, "drop_percent": drop_percent}
    )
    x = np.random.default_rng(0).uniform(-1, 1, (64, 129)).astype(np.float32)
    seed = np.array([0xDEADBEEF, 0x12345678], np.uint32)
    module = tvm.compile(workload.mod, target={"kind": "llvm"}).jit()
    mask = tvm.runtime.tensor(np.zeros((64, 129), np.uint8))
    out = tvm.runtime.tensor(np.zeros((64, 129), np.float32))
    module["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(seed), mask, out)
    expected_mask, expected_out = workload.reference([x, seed])
    np.testing.assert_array_equal(mask.numpy(), expected_mask)
    np.testing.assert_array_equal(out.numpy(), expected_out)  # bit for bit
    kept = expected_mask.mean()
    assert abs(kept - (1 - drop_percent / 100)) < 0.03
    assert np.array_equal(expected_out != 0, expected_mask == 1)
