"""The finalists of each job in the tuning log: re-timed samples, intervals and ranks, and the
winner made the best record of its workload and target; the re-timed medians a job reports."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from autosched.finals.ranking import Finalist, Interval
from autosched.log.store import LogStore
from autosched.log.tables import Candidate, FinalistTiming, Measurement
from autosched.records import BASELINE_TRACE


@dataclass(frozen=True)
class FinalMedians:
    """The re-timed medians of a job's final: its winner's and the untuned program's (None: not
    timed in it, or the job has no timed final)."""

    winner: float | None
    untuned: float | None


def final_medians(session: Session, job_id: int) -> FinalMedians:
    """The re-timed medians of the final of ``job_id``, read in ``session``."""
    timed = session.execute(
        select(FinalistTiming.rank, FinalistTiming.median_secs, Candidate.trace_json)
        .join(Candidate, Candidate.id == FinalistTiming.candidate_id)
        .where(FinalistTiming.job_id == job_id)
    ).all()
    return FinalMedians(
        winner=next((median for rank, median, _trace in timed if rank == 1), None),
        untuned=next((median for _rank, median, trace in timed if trace == BASELINE_TRACE), None),
    )


class FinalistStore(LogStore):
    """The re-timed finalists of jobs.

    Contract:
        * ``record`` is one transaction: the finalists of a job and its winner as the best record
          are stored together or not at all.
        * Thread safety: as ``TuningLog``; one store may be shared by threads.
    """

    def record(
        self,
        job_id: int,
        workload_id: int,
        target_id: int,
        device_id: int | None,
        finalists: Sequence[Finalist],
        checked: Collection[str] = (),
        *,
        session: Session | None = None,
    ) -> None:
        """Store ``finalists`` (ranked, the winner first) of the job; the winner becomes the best
        record of the workload and target. The best record keeps the winner's single measurement,
        so that later candidates are compared with it like with like. ``checked`` names the
        programs (by hash) whose output the final checked against the reference: their
        measurements of this log become verified, so a best record is always a verified one.
        Stored in ``session`` where given, as part of a larger transaction.

        Raises:
            ValueError: a finalist's program is not a candidate of this workload and target.
        """
        if not finalists:
            return
        transaction = self._log.sessions.begin() if session is None else nullcontext(session)
        with transaction as session:
            hashes = [finalist.program_hash for finalist in finalists]
            found = session.execute(
                select(Candidate.program_hash, Candidate.id).where(
                    Candidate.workload_id == workload_id,
                    Candidate.target_id == target_id,
                    Candidate.program_hash.in_(hashes),
                )
            )
            ids = {program_hash: candidate_id for program_hash, candidate_id in found}
            missing = sorted(set(hashes) - set(ids))
            if missing:
                raise ValueError(f"finalists that are not candidates: {', '.join(missing)}")
            session.add_all(timing_rows(job_id, device_id, finalists, ids))
            checked_ids = [ids[h] for h in checked if h in ids]
            if checked_ids:
                session.execute(
                    update(Measurement)
                    .where(
                        Measurement.candidate_id.in_(checked_ids),
                        Measurement.imported_at.is_(None),
                    )
                    .values(verified=True)
                    .execution_options(synchronize_session=False)
                )
            winner = finalists[0]
            self._log.set_best(
                session, workload_id, target_id, winner.first_median_secs, ids[winner.program_hash]
            )

    def of_job(self, job_id: int) -> list[Finalist]:
        """The finalists of a job, the winner first; empty when it re-timed none."""
        query = (
            select(FinalistTiming, Candidate.program_hash, Candidate.trace_json)
            .join(Candidate, Candidate.id == FinalistTiming.candidate_id)
            .where(FinalistTiming.job_id == job_id)
            .order_by(FinalistTiming.rank)
        )
        with self._log.sessions.begin() as session:
            return [
                Finalist(
                    program_hash=program_hash,
                    trace_json=trace_json,
                    first_median_secs=row.first_median_secs,
                    samples=tuple(row.samples),
                    median_secs=row.median_secs,
                    interval=Interval(row.ci_low_secs, row.ci_high_secs, row.confidence),
                    tie=row.tie,
                )
                for row, program_hash, trace_json in session.execute(query)
            ]


def timing_rows(
    job_id: int,
    device_id: int | None,
    finalists: Sequence[Finalist],
    ids: Mapping[str, int],
    created_at: datetime | None = None,
) -> list[FinalistTiming]:
    """The rows of a job's ranked ``finalists`` (winner first), each naming its candidate by
    ``ids`` (program hash: candidate id); ``created_at`` as stored elsewhere (default: now)."""
    stamped = {} if created_at is None else {"created_at": created_at}
    return [
        FinalistTiming(
            job_id=job_id,
            candidate_id=ids[finalist.program_hash],
            device_id=device_id,
            samples=list(finalist.samples),
            first_median_secs=finalist.first_median_secs,
            median_secs=finalist.median_secs,
            ci_low_secs=finalist.interval.low,
            ci_high_secs=finalist.interval.high,
            confidence=finalist.interval.confidence,
            rank=rank,
            tie=finalist.tie,
            **stamped,
        )
        for rank, finalist in enumerate(finalists, start=1)
    ]
