"""The finals of the service's jobs in the tuning log: once a job's trials are measured, its
fastest candidates and its untuned program are timed again, side by side, by one worker of its
target, and ranked into the job's finalists (``autosched.finals.ranking``).

A job submitted with finalists has a final from the start, ``pending`` while it searches. The
engine that drives the job plans it once nothing of the job is left with the workers: it picks
the entrants as ``autosched tune`` does (``autosched.finals.ranking.entrants_of``) and queues
it; the job stays running until its final has ended. The first worker of the target that asks
for work leases it, before any candidate (a final ends a job), times the entrants in rounds,
checks the output of those never verified in their ranking until one passes (one that fails
gets no samples) and reports their samples.
The report is one transaction: the finalists are stored, the entrants whose output the worker
checked become verified, and the winner becomes the best record of the workload and target.

Contract:
    * Claiming a final is one statement, as claiming candidates is (``autosched.log.leases``):
      two workers never time one final.
    * An entrant that was never verified can win only if the report says its output was checked
      and matched; one ranked before the first that was is left out
      (``autosched.finals.ranking.rank_checked``). Entrants ranked after the winner are
      finalists whether or not they were checked: none of them becomes the best record.
    * A final whose lease expires goes back to the queue with a strike and fails at its second;
      its job then ends with its single-shot best, as a job without a final does.
    * A report is taken once: a report for a final no longer held by that lease changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from autosched.errors import UserError
from autosched.finals.ranking import Entrant, contenders, entrants_of, rank_checked
from autosched.finals.timings import FinalistStore
from autosched.log.queries import record_view
from autosched.log.store import LogStore
from autosched.log.tables import (
    Candidate,
    Final,
    FinalState,
    Measurement,
    Target,
    TuningJob,
    utcnow,
)
from autosched.log.tables import Workload as WorkloadRow
from autosched.records import (
    FinalEntrant,
    FinalProgress,
    JobStatus,
    LeasedFinal,
    RecordView,
    RetimedEntrant,
    WorkloadRef,
)

STRIKES_TO_FAIL = 2
TOO_FEW = "fewer than two candidates to compare"


_CLAIM_WINDOW = 16
"""The queued finals a worker's request looks through for one it may time."""


class Finals(LogStore):
    """The finals of the service's jobs, in ``log``'s database.

    Thread safety: as ``TuningLog``; one instance may be shared by threads.
    """

    @staticmethod
    def add(session: Session, job_id: int, finalists: int, rounds: int) -> None:
        """Give the job (added in ``session``) a final of ``finalists`` tuned entrants and the
        untuned program, timed in ``rounds`` rounds."""
        session.add(
            Final(job_id=job_id, finalists=finalists, rounds=rounds, state=FinalState.PENDING)
        )

    def plan(self, job_id: int) -> FinalState | None:
        """Choose the entrants of the job's pending final and queue it (skip it with fewer than
        two); returns where the final stands (None: the job has none)."""
        with self._log.sessions.begin() as session:
            final = session.scalar(select(Final).where(Final.job_id == job_id))
            if final is None or final.state is not FinalState.PENDING:
                return None if final is None else final.state
            job = session.get(TuningJob, job_id)
            assert job is not None
            subject, finalists = (job.workload_id, job.target_id), final.finalists
        records = entrants_of(*contenders(self._log.records(*subject)), finalists)
        entrants = [record.candidate_id for record in records]
        with self._log.sessions.begin() as session:
            planned = session.scalar(
                select(Final)
                .where(Final.job_id == job_id, Final.state == FinalState.PENDING)
                .with_for_update()
            )
            if planned is not None:  # else another engine planned it meanwhile
                if len(entrants) < 2:
                    _end(planned, FinalState.SKIPPED, TOO_FEW)
                else:
                    planned.entrants = entrants
                    planned.state = FinalState.QUEUED
            return session.scalar(select(Final.state).where(Final.job_id == job_id))

    @staticmethod
    def progress(session: Session, job_id: int) -> FinalProgress | None:
        """Where the job's final stands (None: it has none), read in ``session``."""
        final = session.scalar(select(Final).where(Final.job_id == job_id))
        if final is None:
            return None
        return FinalProgress(final.state.value, final.finalists, final.rounds, final.reason)

    @staticmethod
    def claim(
        session: Session, target_id: int, lease_id: int, device_id: int, others_alive: bool
    ) -> LeasedFinal | None:
        """Hand the oldest queued final of a running job on ``target_id`` to lease ``lease_id``
        of a worker on device ``device_id``; None if none waits. Where another device of the
        target is alive (``others_alive``), a final whose fastest entrant this device measured
        is left to another, so that a best is confirmed by a second machine."""
        waiting = session.execute(
            select(Final.id, Final.entrants)
            .join(TuningJob, TuningJob.id == Final.job_id)
            .where(
                Final.state == FinalState.QUEUED,
                TuningJob.target_id == target_id,
                TuningJob.status == JobStatus.RUNNING.value,
            )
            .order_by(Final.id)
            .limit(_CLAIM_WINDOW)
            .with_for_update(of=Final, skip_locked=True)
        ).all()
        final_id = next(
            (
                final_id
                for final_id, entrants in waiting
                if not (others_alive and _measured_on(session, entrants, device_id))
            ),
            None,
        )
        if final_id is None:
            return None
        session.execute(
            update(Final)
            .where(Final.id == final_id)
            .values(state=FinalState.LEASED, lease_id=lease_id)
            .execution_options(synchronize_session=False)
        )
        final, job, workload, target = session.execute(
            select(Final, TuningJob, WorkloadRow, Target)
            .join(TuningJob, TuningJob.id == Final.job_id)
            .join(WorkloadRow, WorkloadRow.id == TuningJob.workload_id)
            .join(Target, Target.id == TuningJob.target_id)
            .where(Final.id == final_id)
            .execution_options(populate_existing=True)
        ).one()
        return LeasedFinal(
            final_id=final.id,
            job_id=job.id,
            workload=WorkloadRef(
                workload.name, dict(workload.params), workload.key, workload.source
            ),
            target=target.target_json,
            rounds=final.rounds,
            seed=job.seed or 0,
            entrants=[
                FinalEntrant(record.candidate_id, record.trace_json, record.verified)
                for record in _entrant_records(session, final.entrants or [])
            ],
        )

    def report(
        self,
        session: Session,
        lease_id: int,
        device_id: int | None,
        retimed: Sequence[RetimedEntrant],
    ) -> bool:
        """Rank the final held by ``lease_id`` from the worker's ``retimed`` entrants and store
        its finalists (see the module contract); False where that lease holds no final now.

        Raises:
            UserError: the report names a candidate that is not an entrant, names one twice, or
                has more samples than the final has rounds.
        """
        final = session.scalar(
            select(Final)
            .where(Final.lease_id == lease_id, Final.state == FinalState.LEASED)
            .with_for_update()
        )
        if final is None:
            return False
        assert final.entrants is not None
        _check_report(final, retimed)
        job = session.get(TuningJob, final.job_id)
        assert job is not None
        by_id = {entrant.candidate_id: entrant for entrant in retimed}
        records = [r for r in _entrant_records(session, final.entrants) if r.candidate_id in by_id]
        entrants = [Entrant(r.program_hash, r.trace_json, r.median_secs or 0) for r in records]
        verified = {r.program_hash: r.verified or by_id[r.candidate_id].verified for r in records}
        finalists = rank_checked(
            entrants,
            [by_id[r.candidate_id].samples for r in records],
            lambda entrant: verified[entrant.program_hash],
        )
        checked = [
            r.program_hash for r in records if by_id[r.candidate_id].verified and not r.verified
        ]
        if not finalists:
            _end(final, FinalState.FAILED, "no entrant could be timed again")
            return True
        FinalistStore(self._log).record(
            job.id, job.workload_id, job.target_id, device_id, finalists, checked, session=session
        )
        _end(final, FinalState.TIMED)
        return True

    @staticmethod
    def drop(session: Session, job_id: int, reason: str) -> None:
        """Skip the job's final where no worker has it yet: its job ended without it."""
        session.execute(
            update(Final)
            .where(
                Final.job_id == job_id,
                Final.state.in_((FinalState.PENDING, FinalState.QUEUED)),
            )
            .values(state=FinalState.SKIPPED, reason=reason, finished_at=utcnow())
            .execution_options(synchronize_session=False)
        )

    @staticmethod
    def release(session: Session, lease_id: int) -> None:
        """Put the final held by ``lease_id`` back in the queue, without a strike."""
        session.execute(
            update(Final)
            .where(Final.lease_id == lease_id, Final.state == FinalState.LEASED)
            .values(state=FinalState.QUEUED, lease_id=None)
            .execution_options(synchronize_session=False)
        )

    @staticmethod
    def expire(session: Session, lease_ids: Sequence[int]) -> None:
        """Strike the finals held by the expired leases: back to the queue, or failed at the
        second strike."""
        held = session.scalars(
            select(Final)
            .where(Final.lease_id.in_(lease_ids), Final.state == FinalState.LEASED)
            .with_for_update()
        ).all()
        for final in held:
            final.strikes += 1
            final.lease_id = None
            if final.strikes < STRIKES_TO_FAIL:
                final.state = FinalState.QUEUED
            else:
                _end(final, FinalState.FAILED, f"its timing lost {final.strikes} workers")


def _measured_on(session: Session, entrants: list[int] | None, device_id: int) -> bool:
    """Whether the fastest entrant of a final (its first) was measured on ``device_id``."""
    if not entrants:
        return False
    measured = select(Measurement.id).where(
        Measurement.candidate_id == entrants[0],
        Measurement.device_id == device_id,
        Measurement.imported_at.is_(None),
    )
    return session.scalar(measured.limit(1)) is not None


def _entrant_records(session: Session, candidate_ids: Sequence[int]) -> list[RecordView]:
    """The entrants' fastest records, in the order of ``candidate_ids`` (the untuned last)."""
    rows = session.execute(
        select(Candidate, Measurement)
        .join(Measurement, Measurement.candidate_id == Candidate.id)
        .where(Candidate.id.in_(candidate_ids))
    ).all()
    tuned, untuned = contenders(record_view(*row) for row in rows)
    found = {record.candidate_id: record for record in [*tuned, *([untuned] if untuned else [])]}
    return [found[candidate_id] for candidate_id in candidate_ids if candidate_id in found]


def _check_report(final: Final, retimed: Sequence[RetimedEntrant]) -> None:
    entrants = set(final.entrants or ())
    seen: set[int] = set()
    for entrant in retimed:
        if entrant.candidate_id not in entrants:
            raise UserError(
                f"candidate {entrant.candidate_id} is not an entrant of final {final.id}"
            )
        if entrant.candidate_id in seen:
            raise UserError(f"candidate {entrant.candidate_id} is reported twice")
        seen.add(entrant.candidate_id)
        if len(entrant.samples) > final.rounds:
            raise UserError(
                f"candidate {entrant.candidate_id} has {len(entrant.samples)} samples; "
                f"the final has {final.rounds} rounds"
            )
        if not all(math.isfinite(s) and s > 0 for s in entrant.samples):
            raise UserError(f"candidate {entrant.candidate_id} has a sample that is not a time")


def _end(final: Final, state: FinalState, reason: str | None = None) -> None:
    final.state = state
    final.reason = reason
    final.lease_id = None
    final.finished_at = utcnow()
