"""The ask/tell interface every search strategy offers the tuning loop.

A strategy proposes a batch of candidates and later hears how they measured; it also observes the
measurements of programs it did not propose (the seeds a job starts from, samples of the design
space), so that everything measured for a job teaches it. Nothing here assumes where or when
measurements happen: a local loop tells right away, a service tells when workers report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from autosched.records import MeasureResult


@dataclass(frozen=True)
class Proposal:
    """A candidate schedule proposed for measurement.

    ``handle`` is the strategy's own object for the candidate, given back to it in ``tell``.
    """

    trace_json: str
    program_hash: str
    predicted_score: float | None
    handle: Any


class SearchStrategy(Protocol):
    """Proposes candidates of one workload on one target and learns from their measurements."""

    def propose(self) -> list[Proposal]:
        """The next batch of candidates; an empty list when the search has nothing new to offer."""
        ...

    def tell(self, proposals: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
        """Report the measurements of a whole batch from `propose`, in the same order."""
        ...

    def observe(self, proposals: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
        """Report measurements of programs the strategy did not propose (their ``handle`` is not
        its own), to learn from as from recorded history."""
        ...
