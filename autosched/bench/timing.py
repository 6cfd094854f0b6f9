"""How the benchmarks time what they compare with a tuned program (a peer, a whole model in each
framework): one protocol for every contender of a run, timed in this process.

After one warm-up call (and one more that sizes the repeats), ``repeats`` repeats of at least
50 ms each, as many calls as that takes; a repeat's sample is the mean of its calls. The median
sample is the figure, the smallest and largest its spread. Contenders compared in one table are
timed side by side: in rounds of one repeat of each, so a change in the machine's speed in the
middle of the run (``autosched.measure.spells``) falls on all of them alike.

Each library's threads spin for a while after its call returns (OpenBLAS's for about 2^28 cycles,
a tenth of a second; TVM's and OpenMP's for a spin count) and take the cores from whatever runs
next in the process: on 2 cores a TVM program right after numpy's matmul took 100x its time, and
numpy's matmul after TVM's up to 15x. So every repeat, sizing and probe starts after
``SETTLE_SECS`` of quiet.

A contender far slower than the rest (TVM's untuned model beside the tuned ones: 40 s a call for
ViT-B/16, whose ten rounds were half of its model bench) takes part in the first
``FAR_SLOWER_ROUNDS`` rounds only: its median stays as far from the others' whatever the rounds.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from autosched.workloads.peers import use_peer_threads

PEER_REPEATS = 5
MIN_REPEAT_SECS = 0.05
SETTLE_SECS = 0.25  # quiet before each repeat: the last call's spinning threads have gone to sleep
FAR_SLOWER = 10.0
"""A contender is far slower when one call lasts over this many times the fastest contender's..."""
FAR_SLOWER_CALL_SECS = 1.0
"""... and over this many seconds."""
FAR_SLOWER_ROUNDS = 3
"""The rounds a far slower contender takes part in."""


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the repeats' samples in the order they were taken; their median is the
    figure, the smallest and largest their spread."""

    samples: tuple[float, ...]

    @property
    def median_secs(self) -> float:
        return statistics.median(self.samples)

    @property
    def min_secs(self) -> float:
        return min(self.samples)

    @property
    def max_secs(self) -> float:
        return max(self.samples)

    @property
    def repeats(self) -> int:
        return len(self.samples)


Contender = TypeVar("Contender", bound=Hashable)
Probe = TypeVar("Probe")


def use_threads(threads: int) -> None:
    """Run TVM and the PyTorch peers on ``threads`` threads: TVM's pool reads ``TVM_NUM_THREADS``
    as it starts, in this process and in the processes started after this call (left alone, it
    takes half the logical CPUs), so call this before anything here runs a parallel program."""
    os.environ["TVM_NUM_THREADS"] = str(threads)
    use_peer_threads(threads)


def time_repeats(call: Callable[[], object], repeats: int = PEER_REPEATS) -> Timing:
    """Time ``call`` by the protocol of this module."""
    number, _once = _calls_per_repeat(call)
    return Timing(tuple(_repeat(call, number) for _ in range(repeats)))


def time_side_by_side(
    calls: Mapping[Contender, Callable[[], object]],
    rounds: int = PEER_REPEATS,
    between: Callable[[], Probe] | None = None,
) -> tuple[dict[Contender, Timing], list[Probe]]:
    """Time each of ``calls`` by the protocol of this module, side by side: ``rounds`` rounds of
    one repeat of each, each round starting one further along than the one before; a far slower
    contender in the first ``FAR_SLOWER_ROUNDS`` only. ``between``, called after each round,
    probes the machine (``autosched.machine.handoff.placement``, say); returns the timings and
    what the probe returned, one reading a round."""
    sizes = {name: _calls_per_repeat(call) for name, call in calls.items()}
    numbers = {name: number for name, (number, _once) in sizes.items()}
    fastest = min((once for _number, once in sizes.values()), default=0.0)
    far_slower = {
        name
        for name, (_number, once) in sizes.items()
        if once > FAR_SLOWER * fastest and once > FAR_SLOWER_CALL_SECS
    }
    names = list(calls)
    samples: dict[Contender, list[float]] = {name: [] for name in names}
    probes: list[Probe] = []
    for start in range(rounds if names else 0):
        for name in names[start % len(names) :] + names[: start % len(names)]:
            if name in far_slower and start >= FAR_SLOWER_ROUNDS:
                continue
            time.sleep(SETTLE_SECS)
            samples[name].append(_repeat(calls[name], numbers[name]))
        if between is not None:
            time.sleep(SETTLE_SECS)
            probes.append(between())
    return {name: Timing(tuple(samples[name])) for name in names}, probes


def _calls_per_repeat(call: Callable[[], object]) -> tuple[int, float]:
    """Calls of ``call`` that last ``MIN_REPEAT_SECS``, after a warm-up call, and the seconds one
    call took."""
    time.sleep(SETTLE_SECS)
    call()
    start = time.perf_counter()
    call()
    once = max(time.perf_counter() - start, 1e-9)
    return max(1, int(MIN_REPEAT_SECS / once)), once


def _repeat(call: Callable[[], object], number: int) -> float:
    """Seconds per call of one repeat of ``number`` calls."""
    start = time.perf_counter()
    for _ in range(number):
        call()
    return (time.perf_counter() - start) / number


def time_call(call: Callable[[], object]) -> float:
    """Median seconds per call of ``call``, timed by the protocol of this module."""
    return time_repeats(call).median_secs
