"""How the benchmarks time what they compare with a tuned program (a peer, a whole model in each
framework): one protocol for every contender of a run, timed in this process.

After one warm-up call (and one more that sizes the repeats), ``repeats`` repeats of at least
50 ms each, as many calls as that takes; a repeat's sample is the mean of its calls. The median
sample is the figure, the smallest and largest its spread.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

PEER_REPEATS = 5
MIN_REPEAT_SECS = 0.05


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median of the repeats' samples and their range."""

    median_secs: float
    min_secs: float
    max_secs: float
    repeats: int


def time_repeats(call: Callable[[], object], repeats: int = PEER_REPEATS) -> Timing:
    """Time ``call`` by the protocol of this module."""
    call()
    start = time.perf_counter()
    call()
    once = max(time.perf_counter() - start, 1e-9)
    number = max(1, int(MIN_REPEAT_SECS / once))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            call()
        samples.append((time.perf_counter() - start) / number)
    return Timing(statistics.median(samples), min(samples), max(samples), repeats)


def time_call(call: Callable[[], object]) -> float:
    """Median seconds per call of ``call``, timed by the protocol of this module."""
    return time_repeats(call).median_secs
