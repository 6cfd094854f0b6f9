"""Slow spells: stretches of seconds in which this machine runs every timed program at a fraction of
its speed, and how a measurer keeps them out of its timings.

On the small virtual machines we tune on, the same program can time 1.55 ms and then 3.40 ms a few
minutes later, its samples at 1x and 2x and nothing between, as when the host takes one of two
virtual CPUs away; a spell lasts seconds, longer than a candidate's timing, so its repeats do not
save it. A good program timed in a spell ranks as a bad one, and the search never returns to it.

So a CPU measurer times a control between every ``CONTROL_EVERY`` candidates: a fixed amount of
parallel work on every core (the calibration's FMA loop, ``autosched.fmaloop``). The
fastest control of the measurer's life is the machine at its quiet speed; a control slower than
``SLOW_SPELL`` times that marks the candidates timed next to it as timed in a spell, and they are
timed again (at most ``RETIMES`` more times), keeping for each the timing between quiet controls,
else its fastest (a spell only ever slows a program down). A spell that lasts from the measurer's
first control onwards cannot be told from the machine's own speed, and the control, arithmetic
alone, does not see contention for the caches and memory.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import tvm

from autosched.fmaloop import built_fma_loop
from autosched.records import MeasureResult

CONTROL_EVERY = 4  # candidates timed between two controls
SLOW_SPELL = 1.25  # a control this many times slower than the quiet one marks a spell
RETIMES = 2  # further timings of a candidate timed in a spell, at most
_CONTROL_STEPS = 20_000  # FMAs per chain of one call of the control: tens of microseconds
_CONTROL_MS = 20  # one timing of the control lasts at least this long

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class ControlRequest:
    """Time the control once in a measuring process (compiled there on first use): one repeat of
    at least ``_CONTROL_MS``, after a warm-up call. Returns the seconds of one call."""

    target: dict

    def execute(self) -> float:
        module, out = built_fma_loop(self.target, _CONTROL_STEPS)
        module["main"](out)
        timer = module.time_evaluator(
            "main", tvm.cpu(), number=1, repeat=1, min_repeat_ms=_CONTROL_MS
        )
        return float(timer(out).mean)


class SpellWatch:
    """Times candidates between controls and times again those a spell slowed down.

    ``time_control`` times the control once (seconds; None where it could not be timed, which
    judges nothing). ``spells`` counts the stretches of candidates found timed in a spell.
    """

    def __init__(self, time_control: Callable[[], float | None]) -> None:
        self._time_control = time_control
        self.quiet = math.inf  # the fastest control so far: the machine at its quiet speed
        self.spells = 0

    def time(
        self, indices: Sequence[int], time_candidate: Callable[[int], MeasureResult]
    ) -> dict[int, MeasureResult]:
        """The timing of each candidate of ``indices`` (``time_candidate(index)``), controls
        between every ``CONTROL_EVERY``; those timed next to a slow control are timed again."""
        kept: dict[int, MeasureResult] = {}
        pending = list(indices)
        if pending and self.quiet == math.inf:
            self._time_control()  # a fresh timing process runs its first control slow: a warm-up
        for _ in range(1 + RETIMES):
            if not pending:
                break
            slowed: list[int] = []
            before = self._control()
            for start in range(0, len(pending), CONTROL_EVERY):
                stretch = pending[start : start + CONTROL_EVERY]
                timed = {index: time_candidate(index) for index in stretch}
                after = self._control()
                in_spell = self._slow(before) or self._slow(after)
                for index, result in timed.items():
                    if not in_spell or _faster(result, kept.get(index)):
                        kept[index] = result
                    if in_spell and result.ok:
                        slowed.append(index)
                if in_spell:
                    self.spells += 1
                    slowest = max(secs for secs in (before, after) if secs is not None)
                    _LOG.info(
                        "%d candidates were timed while the machine ran %.2fx slower than its "
                        "quiet speed",
                        len(stretch),
                        slowest / self.quiet,
                    )
                before = after
            pending = slowed
        return kept

    def _control(self) -> float | None:
        secs = self._time_control()
        if secs is not None:
            self.quiet = min(self.quiet, secs)
        return secs

    def _slow(self, secs: float | None) -> bool:
        return secs is not None and secs > SLOW_SPELL * self.quiet


def _faster(result: MeasureResult, than: MeasureResult | None) -> bool:
    """Whether ``result`` should replace ``than`` as a candidate's timing from a spell: the first
    timing, or a faster successful one."""
    if than is None or than.median is None:
        return True
    return result.median is not None and result.median < than.median
