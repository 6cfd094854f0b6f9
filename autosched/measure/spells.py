"""Slow spells: stretches of seconds in which this machine runs every timed program at a fraction of
its speed, and how a measurer keeps them out of its timings.

On the small virtual machines we tune on, the same program can time 1.55 ms and then 3.40 ms a few
minutes later, its samples at 1x and 2x and nothing between, as when the host takes one of two
virtual CPUs away, or places them on cores that share no cache (``autosched.machine.handoff``);
a spell lasts seconds to minutes, longer than a candidate's timing, so its repeats do not save
it. A good program timed in a spell ranks as a bad one, and the search never returns to it.

So a CPU measurer times a control between stretches of at least ``CONTROL_EVERY`` candidates
(of at least one round of a final) that last at least ``STRETCH_SECS``: a fixed amount of
parallel work on every core (the calibration's FMA loop, ``autosched.machine.fmaloop``), then
data handed from each core to the next (``autosched.machine.handoff``). The control takes tens of
milliseconds, a model's small kernel a few: a control after every round of such a kernel's
final was most of the final's time (mobilenet_v3_small: 998 controls in 52 finals, 34 s, against
12 s of rounds). The
fastest control of the measurer's life is the machine at its quiet speed; a control slower than
``SLOW_SPELL`` times that marks what was timed next to it as timed in a spell, and it is timed
again (at most ``RETIMES`` more times), keeping for each the timing between quiet controls, else
its fastest (a spell only ever slows a program down). A spell that lasts from the measurer's
first control onwards cannot be told from the machine's own speed, and the control does not see
contention for the shared cache and memory.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from autosched.machine.fmaloop import built_fma_loop, call_secs
from autosched.machine.handoff import handoff_secs

CONTROL_EVERY = 4  # candidates timed between two controls, at least
STRETCH_SECS = 0.25  # how long a stretch between two controls lasts at least: a spell lasts seconds
SLOW_SPELL = 1.25  # a control this many times slower than the quiet one marks a spell
RETIMES = 2  # further timings of a candidate timed in a spell, at most
_CONTROL_STEPS = 20_000  # FMAs per chain of one call of the control: tens of microseconds
_CONTROL_MS = 10  # each of the control's two timings lasts at least this long

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class ControlRequest:
    """Time the control once in a measuring process (compiled there on first use): the FMA loop
    and the handoff, each one repeat of at least ``_CONTROL_MS`` after a warm-up call. Returns
    the seconds of one call of each, summed."""

    target: dict

    def execute(self) -> float:
        module, out = built_fma_loop(self.target, _CONTROL_STEPS)
        return call_secs(module, [out], _CONTROL_MS) + handoff_secs(self.target, _CONTROL_MS)


Timed = TypeVar("Timed")


class SpellWatch:
    """Times things (candidates, rounds of a final) between controls and times again those a
    spell slowed down.

    ``time_control`` times the control once (seconds; None where it could not be timed, which
    judges nothing). A stretch between two controls lasts at least ``stretch_secs`` of ``clock``.
    ``spells`` counts the stretches found timed in a spell.
    """

    def __init__(
        self,
        time_control: Callable[[], float | None],
        *,
        stretch_secs: float = STRETCH_SECS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._time_control = time_control
        self._stretch_secs = stretch_secs
        self._clock = clock
        self.quiet = math.inf  # the fastest control so far: the machine at its quiet speed
        self.spells = 0

    def time(
        self,
        indices: Sequence[int],
        time_one: Callable[[int], Timed],
        secs: Callable[[Timed], float | None],
        every: int = CONTROL_EVERY,
    ) -> dict[int, Timed]:
        """The timing of each of ``indices`` (``time_one(index)``), a control after every
        stretch of at least ``every`` of them lasting at least the watch's ``stretch_secs``;
        those timed next to a slow control are timed again. ``secs`` reads how long a timing
        took (None for a failure, never timed again)."""
        kept: dict[int, Timed] = {}
        pending = list(indices)
        if pending and self.quiet == math.inf:
            self._time_control()  # a fresh timing process runs its first control slow: a warm-up
        for _ in range(1 + RETIMES):
            if not pending:
                break
            slowed: list[int] = []
            before = self._control()
            stretch: dict[int, Timed] = {}
            began = self._clock()
            for position, index in enumerate(pending):
                stretch[index] = time_one(index)
                last = position == len(pending) - 1
                if last or (len(stretch) >= every and self._clock() - began >= self._stretch_secs):
                    before = self._judge(stretch, before, kept, slowed, secs)
                    stretch, began = {}, self._clock()
            pending = slowed
        return kept

    def _judge(
        self,
        stretch: dict[int, Timed],
        before: float | None,
        kept: dict[int, Timed],
        slowed: list[int],
        secs: Callable[[Timed], float | None],
    ) -> float | None:
        """Time the control after ``stretch`` (timed after the control ``before``); keep its
        timings, those of a stretch in a spell only where faster than an earlier one, and add
        its successful ones to ``slowed`` where it was. Returns the control timed."""
        after = self._control()
        in_spell = self._slow(before) or self._slow(after)
        for index, timing in stretch.items():
            earlier = kept.get(index)
            if not in_spell or earlier is None or _faster(secs(timing), secs(earlier)):
                kept[index] = timing
            if in_spell and secs(timing) is not None:
                slowed.append(index)
        if in_spell:
            self.spells += 1
            slowest = max(control for control in (before, after) if control is not None)
            _LOG.info(
                "%d timings were taken while the machine ran %.2fx slower than its quiet speed",
                len(stretch),
                slowest / self.quiet,
            )
        return after

    def _control(self) -> float | None:
        secs = self._time_control()
        if secs is not None:
            self.quiet = min(self.quiet, secs)
        return secs

    def _slow(self, secs: float | None) -> bool:
        return secs is not None and secs > SLOW_SPELL * self.quiet


def _faster(secs: float | None, than: float | None) -> bool:
    """Whether a timing of ``secs`` should replace one of ``than`` from a spell: a faster
    successful one, or any in place of a failure."""
    return than is None or (secs is not None and secs < than)
