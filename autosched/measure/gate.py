"""The correctness gate: a candidate may become the best only after its output was verified.

Verifying every candidate would double the cost of measuring; only those that would become the new
best are checked, fastest first, until one passes. Failures become results of kind ``incorrect``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from autosched.measure.local import Measurer
from autosched.records import MeasureResult, WorkloadRef


class CorrectnessGate:
    """Verifies the results of one workload that would beat ``best``, and keeps ``best`` current.

    ``seed`` draws the fresh inputs of each verification.
    """

    def __init__(self, measurer: Measurer, workload: WorkloadRef, best: float | None, seed: int):
        self._measurer = measurer
        self._workload = workload
        self.best = best
        self._seed = seed

    def check(self, traces: Sequence[str], results: list[MeasureResult]) -> list[bool]:
        """Verify new bests, fastest first, until one passes; failures become `incorrect`.

        ``results`` is updated in place; returns which results were verified.
        """
        verified = [False] * len(results)
        order = sorted(
            (i for i, r in enumerate(results) if r.ok), key=lambda i: results[i].median or 0.0
        )
        for index in order:
            median = results[index].median
            if self.best is not None and median is not None and median >= self.best:
                break
            self._seed += 1
            failure = self._measurer.verify(self._workload, traces[index], self._seed)
            if failure is None:
                verified[index] = True
                self.best = median
                break
            results[index] = replace(
                results[index], error_kind=failure.error_kind, error_msg=failure.error_msg
            )
        return verified
