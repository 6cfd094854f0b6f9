"""The handoff: data that each core writes and the next core reads, timed as a probe of how far
apart the host has placed this machine's cores.

On the small virtual machines we tune on, the host moves the virtual CPUs between its physical
cores as it likes. On one Zen 4 host a core-to-core round trip took 60 ns for stretches of
seconds to minutes and 350 ns for others (the two virtual CPUs on cores that share no cache); in
the far placement a Winograd convolution, whose parallel stages hand 8 MB between the cores,
took 2.5x as long, while the FMA loop (arithmetic alone) and one core's streams through the
caches kept their speed. The handoff sees it: each core writes a slab that fits its own cache,
then each sums the slab its neighbour wrote, so every byte of the second pass crosses from one
core to another (on that host 36 us a call near, 132 us far). Beside the same work with each
core reading back its own slab (the own read, which no placement slows), each reading is a ratio
that the machine's speed and load cancel out of: `placement`.

What ratio means "far" differs from CPU to CPU: on the Zen 4 host the handoff took 36 to 46 us
near and 130 to 161 far against own reads of about 8 us (4.5 to 5.7 and 16 to 20 times), on a
Zen 5 host 1.6 to 2.6 times its own read near and 6.4 to 8.1 times far, so no threshold reads one
ratio right on both. The readings of one run are read against each other instead (`farther`):
two placements show as two clusters of ratios, far apart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import tvm
from tvm.script import tirx as T

from autosched.machine.fmaloop import call_secs, fma_loop_shape
from autosched.target import to_tvm_target

SLAB_FLOATS = 1 << 16
"""Floats each core writes and its neighbour reads: 256 KB, within any core's own cache."""
_LANES = 16


def handoff(cores: int, floats: int = SLAB_FLOATS, offset: int = 1) -> tvm.IRModule:
    """The handoff of ``floats`` float32 a core on ``cores`` cores: ``main(seed, sums)`` writes
    slab ``c`` from ``seed[c]`` on core ``c``, then on core ``c`` sums slab
    ``(c + offset) % cores`` into ``sums[c]``; both arguments have shape (cores, 16). With
    ``offset`` 0 each core reads back its own slab: the same work with nothing handed over."""
    if floats % _LANES:
        raise ValueError(f"a slab holds a multiple of {_LANES} floats")
    rows = floats // _LANES
    shape = (cores, _LANES)

    @T.prim_func
    def main(seed: T.Buffer(shape, "float32"), sums: T.Buffer(shape, "float32")):
        slabs = T.alloc_buffer((cores, rows, _LANES), "float32")
        for core in T.parallel(cores):
            for row in range(rows):
                for lane in T.vectorized(_LANES):
                    slabs[core, row, lane] = seed[core, lane] + T.Cast("float32", row)
        for core in T.parallel(cores):
            acc = T.decl_buffer((_LANES,), "float32", scope="local")
            for lane in T.vectorized(_LANES):
                acc[lane] = T.float32(0)
            for row in range(rows):
                for lane in T.vectorized(_LANES):
                    acc[lane] = acc[lane] + slabs[(core + offset) % cores, row, lane]
            for lane in T.vectorized(_LANES):
                sums[core, lane] = acc[lane]

    return tvm.IRModule({"main": main})


SPLIT = 2.0
"""The least factor between the ratios of two readings of one run that were taken with the cores
placed differently; within a placement the ratio moved by at most 1.7x in the runs above."""


@dataclass(frozen=True)
class Placement:
    """One reading of how far apart the cores are: the handoff, and the same work with each core
    reading back its own slab (``own_read_secs``), timed one after the other."""

    handoff_secs: float
    own_read_secs: float

    @property
    def ratio(self) -> float:
        """The handoff over the own read: 1 where handing data over costs nothing more."""
        return self.handoff_secs / self.own_read_secs


def farther(readings: Sequence[Placement]) -> list[bool]:
    """Which of one run's readings were taken with the cores farther apart than the rest: those
    above the widest gap between the sorted ratios, where that gap is over `SPLIT`; none where no
    gap is (one placement throughout, whichever it was)."""
    ratios = sorted(reading.ratio for reading in readings)
    gaps = [(high / low, high) for low, high in pairwise(ratios)]
    widest, threshold = max(gaps, default=(1.0, 0.0))
    if widest <= SPLIT:
        return [False] * len(readings)
    return [reading.ratio >= threshold for reading in readings]


# per process: the handoffs built here, by target (its JSON) and offset, with their arguments
_built: dict[tuple[str, int], tuple[tvm.runtime.Module, list[tvm.runtime.Tensor]]] = {}


def built_handoff(
    target: dict, offset: int = 1
) -> tuple[tvm.runtime.Module, list[tvm.runtime.Tensor]]:
    """``target``'s handoff across its cores (``offset`` as in `handoff`), built for this process
    on first use, and its arguments."""
    key = json.dumps(target, sort_keys=True), offset
    if key not in _built:
        cores, _lanes = fma_loop_shape(target)
        module = tvm.compile(handoff(cores, offset=offset), target=to_tvm_target(target)).jit()
        args = [tvm.runtime.tensor(np.zeros((cores, _LANES), "float32")) for _ in range(2)]
        _built[key] = module, args
    return _built[key]


def handoff_secs(target: dict, min_repeat_ms: int = 10) -> float:
    """Seconds of one call of ``target``'s handoff in this process, from one repeat of at least
    ``min_repeat_ms`` after a warm-up call."""
    return call_secs(*built_handoff(target), min_repeat_ms)


def placement(target: dict, min_repeat_ms: int = 10) -> Placement:
    """How far apart the host has placed ``target``'s cores now: the handoff and the own read,
    each one repeat of at least ``min_repeat_ms`` after a warm-up call."""
    return Placement(
        handoff_secs(target, min_repeat_ms),
        call_secs(*built_handoff(target, offset=0), min_repeat_ms),
    )


@dataclass(frozen=True)
class PlacementRequest:
    """Read the cores' placement (`placement`) in a measuring process (`autosched.measure.child`),
    whose thread pool spans the target's cores."""

    target: dict

    def execute(self) -> Placement:
        return placement(self.target)
