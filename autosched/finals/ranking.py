"""Noise-aware choice of the best schedule: the top candidates of a search timed again, side by
side, and ranked by the median of many samples with its confidence interval.

Every candidate of a search is timed once, on a few repeats; on a shared machine the fastest of
those single shots is often a lucky one. At the end of a run the finalists are timed again in
rounds (each round times every finalist once, in a rotated order, so a slow spell of the machine
falls on all of them alike). The winner has the lowest re-timed median; a finalist whose interval
overlaps the winner's is a tie: the measurements cannot tell them apart. The untuned program
enters the final as the reference: a speed-up is then two medians of one timing, and where no
tuned candidate beats it, the untuned program wins. A program, tuned or not, many times slower
than the fastest verified entrant stays out (`enters_final`): it cannot win, and timing it in
every round would cost more than the rest of the final. Only the winner becomes a best record,
so only its output must be shown correct: the finalists are checked in their ranking until one
passes, and one that fails is left out (`rank_checked`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from autosched.records import BASELINE_TRACE, RecordView

CONFIDENCE = 0.95
FINALISTS = 8
"""How many of the fastest tuned candidates enter a final, unless told otherwise."""
ROUNDS = 10
"""In how many rounds a final times its entrants, unless told otherwise."""
ENTRY_SPAN = 10.0
ENTRY_FLOOR_SECS = 0.01
"""A program stays out of a final where its single shot is over ``ENTRY_SPAN`` times the fastest
correct entrant's and over ``ENTRY_FLOOR_SECS``: a faster one costs a round no more than any
entrant does, its timing repeated up to the measuring's shortest repeat anyway."""
MAX_FINALISTS = 64
MAX_ROUNDS = 1000


@dataclass(frozen=True)
class Interval:
    """A distribution-free confidence interval of a median, and the confidence it has.

    With fewer than six samples no pair of order statistics reaches 95%; the interval is then the
    samples' whole range, with the lower ``confidence`` it has.
    """

    low: float
    high: float
    confidence: float

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high


def median_interval(samples: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The confidence interval of the median of ``samples`` from their order statistics.

    The population median lies between the j-th and the (n+1-j)-th smallest of n samples with
    probability 1 - 2 P(B <= j-1), B ~ Binomial(n, 1/2), whatever the distribution; j is the
    largest rank that keeps this at least ``confidence``.

    Raises:
        ValueError: no samples, or a confidence outside (0, 1).
    """
    if not samples:
        raise ValueError("a confidence interval needs at least one sample")
    if not 0 < confidence < 1:
        raise ValueError("confidence must lie between 0 and 1")
    ordered = sorted(samples)
    n = len(ordered)

    def coverage(rank: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(rank)) / 2**n

    rank = 1
    while rank + 1 <= n - rank and coverage(rank + 1) >= confidence:
        rank += 1
    return Interval(ordered[rank - 1], ordered[n - rank], coverage(rank))


@dataclass(frozen=True)
class Finalist:
    """One finalist after re-timing: its single-shot median from the search, every re-timed
    sample, their median and its interval, and whether the winner's interval overlaps it."""

    program_hash: str
    trace_json: str
    first_median_secs: float
    samples: tuple[float, ...]
    median_secs: float
    interval: Interval
    tie: bool

    def as_json(self) -> dict[str, object]:
        return {
            "program_hash": self.program_hash,
            "first_median_secs": self.first_median_secs,
            "median_secs": self.median_secs,
            "ci_low_secs": self.interval.low,
            "ci_high_secs": self.interval.high,
            "confidence": self.interval.confidence,
            "samples": list(self.samples),
            "tie": self.tie,
        }


@dataclass(frozen=True)
class Entrant:
    """A candidate that enters the final: its program, trace and single-shot median."""

    program_hash: str
    trace_json: str
    first_median_secs: float


def contenders(records: Iterable[RecordView]) -> tuple[list[RecordView], RecordView | None]:
    """Who may enter a final among the ``records`` of a workload on a target: the tuned
    candidates that ran without error, fastest single shot first, and the untuned program's
    record (None: it was never timed, or it failed). A candidate measured more than once (in
    this log and another's) enters with its fastest record."""
    fastest: dict[int, RecordView] = {}
    for record in records:
        if record.median_secs is None or record.error_kind is not None:
            continue
        kept = fastest.get(record.candidate_id)
        if kept is None or record.median_secs < (kept.median_secs or 0.0):
            fastest[record.candidate_id] = record
    timed = sorted(fastest.values(), key=lambda record: record.median_secs or 0.0)
    tuned = [record for record in timed if record.trace_json != BASELINE_TRACE]
    untuned = next((record for record in timed if record.trace_json == BASELINE_TRACE), None)
    return tuned, untuned


def enters_final(single_secs: float | None, fastest_secs: float | None) -> bool:
    """Whether a program of single shot ``single_secs`` enters a final whose fastest verified
    entrant's single shot is ``fastest_secs`` (None: not known yet); see ``ENTRY_SPAN``. One left
    out cannot win (a slow spell only ever slows a timing down); an untuned program left out
    makes the speed-up the single shots'."""
    if single_secs is None or fastest_secs is None:
        return True
    return single_secs <= max(ENTRY_SPAN * fastest_secs, ENTRY_FLOOR_SECS)


def entrants_of(
    tuned: Sequence[RecordView], untuned: RecordView | None, finalists: int
) -> list[RecordView]:
    """The records that enter a final of ``finalists`` tuned entrants, from a workload's
    `contenders`: the fastest tuned candidates, then the untuned program, those `enters_final`
    lets in. The fastest verified candidate sets the pace: one never verified may fail its check.
    """
    fastest = next((record.median_secs for record in tuned if record.verified), None)
    return [
        record
        for record in [*tuned[:finalists], *([untuned] if untuned is not None else [])]
        if enters_final(record.median_secs, fastest)
    ]


def rank_finalists(
    entrants: Sequence[Entrant], samples: Sequence[Sequence[float]]
) -> list[Finalist]:
    """The entrants with their re-timed ``samples`` (in the same order), fastest re-timed median
    first; entrants without samples (their re-timing failed) are left out.

    A finalist ties with the winner when their intervals overlap; the winner ties with itself.
    """
    timed = [
        (entrant, tuple(float(s) for s in taken))
        for entrant, taken in zip(entrants, samples, strict=True)
        if taken
    ]
    timed.sort(key=lambda pair: statistics.median(pair[1]))
    if not timed:
        return []
    intervals = [median_interval(taken) for _, taken in timed]
    return [
        Finalist(
            program_hash=entrant.program_hash,
            trace_json=entrant.trace_json,
            first_median_secs=entrant.first_median_secs,
            samples=taken,
            median_secs=statistics.median(taken),
            interval=interval,
            tie=interval.overlaps(intervals[0]),
        )
        for (entrant, taken), interval in zip(timed, intervals, strict=True)
    ]


def rank_checked(
    entrants: Sequence[Entrant],
    samples: Sequence[Sequence[float]],
    correct: Callable[[Entrant], bool],
) -> list[Finalist]:
    """`rank_finalists`, with a winner whose output is correct: ``correct`` is asked of the
    finalists in their ranking until one passes, and those that fail are left out (ties are
    then read against the winner that passed). The finalists after the winner are not asked:
    only the winner becomes a best record, and a check costs a build and a run. None where no
    finalist passes."""
    ranked = rank_finalists(entrants, samples)
    by_hash = {entrant.program_hash: entrant for entrant in entrants}
    wrong: set[str] = set()
    for finalist in ranked:
        if correct(by_hash[finalist.program_hash]):
            break
        wrong.add(finalist.program_hash)
    else:
        return []
    if not wrong:
        return ranked
    kept = [(e, s) for e, s in zip(entrants, samples, strict=True) if e.program_hash not in wrong]
    return rank_finalists([e for e, _ in kept], [s for _, s in kept])


def side_by_side(finalists: Sequence[Finalist], reference_trace: str) -> tuple[float, float] | None:
    """The winner's and the reference's (the program of ``reference_trace``) re-timed medians,
    where the reference was timed in the same final; None otherwise."""
    reference = next((f for f in finalists if f.trace_json == reference_trace), None)
    if not finalists or reference is None:
        return None
    return finalists[0].median_secs, reference.median_secs
