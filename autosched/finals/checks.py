"""A final's checks of output, done by the measurer that timed it: the finalists are checked in
their ranking until one passes (``autosched.finals.ranking.rank_checked``), on this machine by
``autosched tune`` and on a worker for the service.

A program never verified may compute the wrong answer; only the winner becomes a best record, so
the finalists ranked after the first correct one are not checked (a check costs a build where
the program was timed with its weights packed ahead, and a run). The winner is nearly always a
best the search's gate verified already: on mobilenet_v3_small's 52 finals, 2 or 3 winners
needed a check.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from autosched.finals.ranking import Entrant, Finalist, rank_checked
from autosched.measure import Retimer
from autosched.records import WorkloadRef


def check_in_rank_order(
    measurer: Retimer,
    workload: WorkloadRef,
    entrants: Sequence[Entrant],
    samples: Sequence[Sequence[float]],
    verified: Collection[str],
    seed: int,
) -> tuple[list[Finalist], dict[str, bool]]:
    """Rank the timed ``entrants`` with a correct winner, checking those whose program hash is
    not in ``verified``; returns the finalists (none where no entrant passes) and each check's
    outcome by program hash (True: the output matched)."""
    outcomes: dict[str, bool] = {}

    def correct(entrant: Entrant) -> bool:
        if entrant.program_hash in verified:
            return True
        mismatch = measurer.verify(workload, entrant.trace_json, seed)
        outcomes[entrant.program_hash] = mismatch is None
        return mismatch is None

    return rank_checked(entrants, samples, correct), outcomes
