"""The measurement protocol's settings: how candidates are timed and how long each step may take."""

from __future__ import annotations

import math
from dataclasses import dataclass

import psutil

from autosched.measure.serving import ResourceLimits


def _physical_cores() -> int:
    return psutil.cpu_count(logical=False) or 1


@dataclass(frozen=True)
class MeasureConfig:
    """How one candidate is built and timed.

    Timing protocol: ``warmup`` untimed calls, then ``repeat`` timed repeats of ``number`` calls
    each; ``number`` is raised until one repeat lasts at least ``min_repeat_ms``. Every repeat is
    one recorded sample (the mean of its calls); candidates rank by the median sample. A workload
    timed cache-cold on a CPU (``Workload.timed_cold``, a model's kernel) is timed in
    ``cold_repeat`` calls instead, each one sample, with the CPU caches flushed before it
    (inputs other than the first, which the kernel before it has just written); a candidate too
    slow for that many in the time of a warm timing (``repeat`` x ``min_repeat_ms``) gets as
    many as fit, and at least ``repeat``. With ``watch_spells`` (CPU targets), candidates timed
    while the machine itself ran slow are timed again (``autosched.measure.spells``).
    """

    number: int = 1
    repeat: int = 3
    min_repeat_ms: int = 40
    warmup: int = 1
    cold_repeat: int = 15
    watch_spells: bool = True
    build_timeout_secs: float = 60.0
    run_timeout_secs: float = 30.0
    builders: int = _physical_cores()
    max_tasks_per_process: int = 64
    device_index: int = 0
    # Virtual memory a measuring process may map (None: unlimited); CUDA measurers set none.
    address_space_bytes: int | None = 16 << 30

    def __post_init__(self) -> None:
        if min(self.number, self.repeat, self.cold_repeat) < 1:
            raise ValueError("number, repeat and cold_repeat must be >= 1")
        if self.warmup < 0 or self.min_repeat_ms < 0:
            raise ValueError("warmup and min_repeat_ms must be >= 0")
        if self.builders < 1 or self.max_tasks_per_process < 1:
            raise ValueError("builders and max_tasks_per_process must be >= 1")
        if self.build_timeout_secs <= 0 or self.run_timeout_secs <= 0:
            raise ValueError("time limits must be positive")
        if self.address_space_bytes is not None and self.address_space_bytes < 1 << 30:
            raise ValueError("address_space_bytes must be at least 1 GiB (TVM alone maps more)")

    def limits(self, kind: str) -> ResourceLimits:
        """The resource limits of a measuring process for a target of ``kind``: CPU time for the
        longest step on every core, twice over; no address-space limit on CUDA."""
        step = max(self.build_timeout_secs, self.run_timeout_secs)
        return ResourceLimits(
            address_space_bytes=None if kind == "cuda" else self.address_space_bytes,
            cpu_secs_per_request=math.ceil(2 * step * (psutil.cpu_count() or 1)) + 10,
        )
