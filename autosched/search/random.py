"""Random search: schedules of uniformly random valid decisions, the baseline of the strategies.

It learns nothing from measurements beyond which programs were measured, so it proposes each
program at most once.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from tvm.s_tir import Schedule

from autosched.records import MeasureResult, RecordView
from autosched.schedule import program_hash, trace_to_json
from autosched.search.base import Proposal
from autosched.search.space import ATTEMPTS_PER_CANDIDATE, design_space
from autosched.workload import Workload


class RandomSearch:
    """Random search for one workload on one target.

    Each decision is drawn uniformly among its valid choices (so a tiling is drawn one factor at a
    time, not uniformly among all tilings); see `autosched.search.space`.

    Args:
        workload: what to schedule.
        target: the target's JSON form.
        batch_size: distinct new programs per `propose` (fewer when the space runs dry).
        seed: makes the proposals reproducible (None: random).
        history: recorded measurements of this workload and target; their programs are not
            proposed again.
    """

    def __init__(
        self,
        workload: Workload,
        target: dict,
        *,
        batch_size: int,
        seed: int | None,
        history: Sequence[RecordView] = (),
    ) -> None:
        self._space = design_space(workload, target, seed=seed)
        self._batch_size = batch_size
        self._rng = random.Random(seed)
        self._measured = {record.program_hash for record in history}

    def propose(self) -> list[Proposal]:
        batch: dict[str, Schedule] = {}
        for _ in range(ATTEMPTS_PER_CANDIDATE * self._batch_size):
            if len(batch) == self._batch_size:
                break
            sch = self._space.sample(self._choose)
            if sch is None:
                continue
            digest = program_hash(sch.mod)
            if digest not in self._measured:
                batch.setdefault(digest, sch)
        return [
            Proposal(trace_to_json(sch.trace), digest, predicted_score=None, handle=None)
            for digest, sch in batch.items()
        ]

    def tell(self, proposals: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
        self._measured.update(proposal.program_hash for proposal in proposals)

    def observe(self, proposals: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
        self.tell(proposals, results)

    def _choose(self, name: str, choices: Sequence[int]) -> int:
        return self._rng.choice(choices)
