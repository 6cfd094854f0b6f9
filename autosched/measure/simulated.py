"""A simulated measurer: builds and runs nothing, for measuring the service's own overhead and for
tests of the search loop. Each candidate takes ``secs`` and its latency is a hash of its trace,
so answers repeat; every result verifies."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from autosched.records import MeasureResult, WorkloadRef


class SimulatedMeasurer:
    """A Measurer whose candidates take ``secs`` each and measure a hash of their trace (between
    1 and 2 ms); it remembers every trace it was asked to measure, in order."""

    def __init__(self, secs: float = 0.0) -> None:
        self.secs = secs
        self.measured: list[str] = []

    def measure(self, workload: WorkloadRef, traces: Sequence[str]) -> list[MeasureResult]:
        results = []
        for trace in traces:
            time.sleep(self.secs)
            self.measured.append(trace)
            digest = int(hashlib.sha256(trace.encode()).hexdigest()[:8], 16)
            now = datetime.now(UTC)
            latency = 1e-3 * (1 + digest / 2**32)
            results.append(MeasureResult(samples=(latency,), started_at=now, finished_at=now))
        return results

    def verify(self, workload: WorkloadRef, trace: str, seed: int) -> MeasureResult | None:
        return None

    def close(self) -> None:
        pass
