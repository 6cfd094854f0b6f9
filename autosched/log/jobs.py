"""Tuning jobs in the tuning log: started by `autosched tune` or submitted to the service, claimed
by search engines, fed with candidates, followed by their submitters.

Contract:
    * A job counts its trials as the measurements of its candidates, the untuned baseline apart;
      ``trials_done`` in its progress and ``measured`` in its budget are the same number.
    * Engines claim jobs with a lease of their own (``claim_jobs``): a job whose engine stopped
      renewing its claim is taken over by another engine.
    * A service job belongs to the principal of the client token that submitted it (``owner``,
      ``autosched.log.tokens``); a job without one (stored before jobs had owners, or run by
      `autosched tune`) is only an admin's to see. An owner has at most so many jobs queued or
      running: submissions of one owner at once are counted one after the other.
    * Owners take turns in the queue, and so do each owner's jobs (``queue_turns``): each job's
      candidates are numbered in the order they were enqueued; workers are handed every owner's
      first waiting candidate (the lowest number among its jobs'), then every owner's second, and
      so on. Engines drive their jobs in the same turns (``claim_jobs``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Unpack

from sqlalchemy import Select, Subquery, false, func, or_, select, text, update
from sqlalchemy.orm import Session

from autosched.errors import NotFound, OverLimit
from autosched.finals.ranking import ROUNDS
from autosched.finals.retiming import Finals
from autosched.finals.timings import final_medians
from autosched.log.queries import record_of, record_view, target_info
from autosched.log.store import LogStore
from autosched.log.subjects import ensure_subject
from autosched.log.tables import (
    BestRecord,
    Candidate,
    CandidateState,
    Measurement,
    ModelJobRound,
    Target,
    TuningJob,
    utcnow,
)
from autosched.records import (
    BASELINE_TRACE,
    SPACE_EXHAUSTED,
    JobProgress,
    JobStatus,
    RecordView,
    SearchSettings,
)
from autosched.workload import Workload

_OUTSTANDING = (CandidateState.QUEUED, CandidateState.LEASED)
OPEN_STATUSES = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)
# The engine that holds a job `autosched tune` measures in its own process: it never expires, so no
# service engine on the same log takes the job over.
LOCAL_ENGINE = "local"


@dataclass(frozen=True)
class JobBudget:
    """A job's measured and outstanding candidates, the baseline apart, and whether its baseline
    still waits for a worker."""

    status: JobStatus
    trials: int
    measured: int
    outstanding: int
    baseline_outstanding: bool

    @property
    def spent(self) -> bool:
        """Every trial is measured, and so is the baseline the job's speedup is measured from."""
        return self.measured >= self.trials and not self.baseline_outstanding


@dataclass(frozen=True)
class JobMeasurement:
    """A measurement of a job's candidate, numbered as its progress counts trials: ``trial`` is
    how many trials were done once it was stored (None for the untuned baseline)."""

    trial: int | None
    record: RecordView


@dataclass(frozen=True)
class MeasuredCandidate:
    """A measurement of a job's candidate, as the engine reads them back in arrival order."""

    measurement_id: int
    record: RecordView


class JobStore(LogStore):
    """The tuning jobs of ``log``: every method is one transaction on its database."""

    # Jobs of `autosched tune`, which measures them itself.

    def start_job(
        self, *, workload_id: int, target_id: int, **search: Unpack[SearchSettings]
    ) -> int:
        """Record a tuning job that starts now, with status RUNNING; returns its id.

        The job is measured by the process that starts it (`autosched tune`): it is held by
        ``LOCAL_ENGINE`` for good, so no service engine on the same log ever claims it.

        Args:
            workload_id: The workload to tune (from ``ensure_workload``).
            target_id: The target to tune for (from ``ensure_target``).
            **search: How it searches: its budget of trials (>= 0), measured ``batch_size`` a
                batch (>= 1), by the named strategy, from the seed (None: not reproducible).

        Raises:
            sqlalchemy.exc.IntegrityError: If the workload or target does not exist, or ``trials``
                or ``batch_size`` is out of range.
        """
        job = queued_job(workload_id, target_id, None, **search)
        job.status = JobStatus.RUNNING.value  # taken up at once, by the process that started it
        job.created_at = job.started_at = utcnow()
        job.engine_id = LOCAL_ENGINE
        with self._sessions.begin() as session:
            session.add(job)
            session.flush()
            return job.id

    def end_job(self, job_id: int, status: JobStatus, reason: str | None = None) -> None:
        """Mark a job as ended now, with a final status and, if it ended short of its budget,
        why (at most 255 characters are kept).

        Raises:
            ValueError: If ``status`` is not final.
            NotFound: If there is no job ``job_id``.
        """
        if not status.final:
            raise ValueError(f"end_job needs a final status, not {status.name}")
        with self._sessions.begin() as session:
            ended = session.execute(
                update(TuningJob)
                .where(TuningJob.id == job_id)
                .values(
                    status=status.value,
                    finished_at=utcnow(),
                    stop_reason=None if reason is None else reason[:255],
                )
            )
            if ended.rowcount == 0:
                raise no_job(job_id)
            Finals.drop(session, job_id, f"the job ended {status.value} first")

    def space_exhausted(self, workload_id: int, target_id: int) -> bool:
        """Whether a job of the workload and target ended because its design space held no
        program it had not measured."""
        query = (
            select(TuningJob.id)
            .where(
                TuningJob.workload_id == workload_id,
                TuningJob.target_id == target_id,
                TuningJob.stop_reason.startswith(SPACE_EXHAUSTED),
            )
            .limit(1)
        )
        with self._sessions.begin() as session:
            return session.scalar(query) is not None

    # Jobs of the service, as clients submit and follow them.

    def submit(
        self,
        workload: Workload,
        target: dict,
        *,
        finalists: int = 0,
        rounds: int = ROUNDS,
        owner: str | None = None,
        max_open: int | None = None,
        **search: Unpack[SearchSettings],
    ) -> int:
        """Queue a tuning job of ``owner`` (a principal); an engine takes it up. With
        ``finalists``, its fastest candidates and its untuned program are timed again at its end,
        in ``rounds`` rounds, by one worker (``autosched.finals.retiming``). Returns the job id.

        Raises:
            OverLimit: ``owner`` has ``max_open`` jobs queued or running already (rounds of its
                model jobs apart).
        """
        stored_workload, stored_target = ensure_subject(self._log, workload, target)
        with self._sessions.begin() as session:
            if owner is not None and max_open is not None:
                ensure_room(session, owner, _open_jobs(owner), max_open, "jobs", lock=True)
            job = queued_job(stored_workload.id, stored_target.id, owner, **search)
            session.add(job)
            session.flush()
            if finalists:
                Finals.add(session, job.id, finalists, rounds)
            return job.id

    def check_room(self, owner: str, max_open: int) -> None:
        """Refuse early, before a submission's costly checks, where ``owner`` has ``max_open``
        jobs queued or running already (``submit`` counts again as it stores the job).

        Raises:
            OverLimit: the owner has no room for another job.
        """
        with self._sessions.begin() as session:
            ensure_room(session, owner, _open_jobs(owner), max_open, "jobs", lock=False)

    def owner(self, job_id: int) -> str | None:
        """The principal the job belongs to (None: no one's; an admin's to see).

        Raises NotFound if there is no such job.
        """
        with self._sessions.begin() as session:
            return _job(session, job_id).owner

    def cancel(self, job_id: int) -> JobProgress:
        """Stop a job: it hands out no more work; queued candidates are dropped.

        A job that already ended keeps its status. Raises NotFound if there is no such job.
        """
        with self._sessions.begin() as session:
            job = _job(session, job_id)
            if not JobStatus(job.status).final:
                job.status = JobStatus.CANCELLED.value
                job.finished_at = utcnow()
                session.execute(
                    Candidate.__table__.delete().where(
                        Candidate.job_id == job_id, Candidate.state == CandidateState.QUEUED
                    )
                )
                Finals.drop(session, job_id, "the job was cancelled first")
        return self.job(job_id)

    def job(self, job_id: int) -> JobProgress:
        """A job's progress. Raises NotFound if there is no such job."""
        with self._sessions.begin() as session:
            return self._progress(session, _job(session, job_id))

    def jobs(
        self,
        *,
        limit: int,
        offset: int,
        status: JobStatus | None = None,
        target_key: str | None = None,
        owner: str | None = None,
    ) -> tuple[list[JobProgress], int]:
        """A page of jobs, newest first, and the number of jobs in all; with ``status``,
        ``target_key`` or ``owner``, only the jobs of that status, on that target or of that
        principal (without ``owner``: every job, as an admin sees them)."""
        matching = select(TuningJob.id)
        if owner is not None:
            matching = matching.where(TuningJob.owner == owner)
        if status is not None:
            matching = matching.where(TuningJob.status == status.value)
        if target_key is not None:
            matching = matching.join(Target, Target.id == TuningJob.target_id).where(
                Target.key == target_key
            )
        with self._sessions.begin() as session:
            total = session.scalar(select(func.count()).select_from(matching.subquery())) or 0
            rows = session.scalars(
                select(TuningJob)
                .where(TuningJob.id.in_(matching.scalar_subquery()))
                .order_by(TuningJob.id.desc())
                .limit(limit)
                .offset(offset)
            ).all()
            return [self._progress(session, job) for job in rows], total

    def measurements(
        self, job_id: int, *, limit: int, offset: int
    ) -> tuple[list[JobMeasurement], int]:
        """A page of the job's measurements in the order they were stored, and how many it has;
        measurements imported from another log are not the job's (as in its progress).

        Raises NotFound if there is no such job.
        """
        is_trial = Candidate.trace_json != BASELINE_TRACE
        measured_here = (Candidate.job_id == job_id) & Measurement.imported_at.is_(None)
        of_job = (
            select(Measurement.id)
            .join(Candidate, Candidate.id == Measurement.candidate_id)
            .where(measured_here)
        )
        with self._sessions.begin() as session:
            _job(session, job_id)
            total = session.scalar(select(func.count()).select_from(of_job.subquery())) or 0
            rows = session.execute(
                select(Candidate, Measurement)
                .join(Measurement, Measurement.candidate_id == Candidate.id)
                .where(measured_here)
                .order_by(Measurement.id)
                .limit(limit)
                .offset(offset)
            ).all()
            if not rows:
                return [], total
            trials_before = of_job.with_only_columns(func.count(Measurement.id)).where(
                is_trial, Measurement.id < rows[0][1].id
            )
            trial = session.scalar(trials_before) or 0
            page = []
            for candidate, measurement in rows:
                baseline = candidate.trace_json == BASELINE_TRACE
                trial += not baseline
                page.append(
                    JobMeasurement(None if baseline else trial, record_view(candidate, measurement))
                )
            return page, total

    # Jobs of the service, as search engines drive them.

    def claim_jobs(self, engine_id: str, ttl_secs: float) -> list[int]:
        """Claim (or renew the claim on) every unfinished job no live engine holds.

        Returns the ids of the jobs this engine holds now in turns of their owners: every
        owner's oldest job, then every owner's second oldest, and so on.
        """
        now = utcnow()
        with self._sessions.begin() as session:
            claimable = TuningJob.status.in_(OPEN_STATUSES) & (
                TuningJob.engine_id.is_(None)
                | (TuningJob.engine_id == engine_id)
                | (TuningJob.engine_expires_at < now)
            )
            claimed = session.execute(
                update(TuningJob)
                .where(claimable)
                .values(
                    engine_id=engine_id,
                    engine_expires_at=now + timedelta(seconds=ttl_secs),
                    status=JobStatus.RUNNING.value,
                    started_at=func.coalesce(TuningJob.started_at, now),
                )
                .returning(TuningJob.id, TuningJob.owner)
            ).all()
        held: dict[str | None, int] = {}  # jobs of each owner so far, oldest first
        turns = []
        for job_id, owner in sorted(claimed):
            held[owner] = held.get(owner, 0) + 1
            turns.append((held[owner], job_id))
        return [job_id for _turn, job_id in sorted(turns)]

    def enqueue(
        self, job_id: int, candidates: Sequence[tuple[str, str, float | None]]
    ) -> list[str]:
        """Queue candidates (trace JSON, program hash, predicted score) of a running job.

        Programs already known for the job's workload and target are skipped. Returns the program
        hashes that were queued.
        """
        with self._sessions.begin() as session:
            job = _job(session, job_id)
            if job.status != JobStatus.RUNNING.value:
                return []
            position = session.scalar(
                select(func.coalesce(func.max(Candidate.queue_position), -1)).where(
                    Candidate.job_id == job_id
                )
            )
            queued = []
            for trace_json, program_hash, score in candidates:
                position += 1
                inserted = session.scalar(
                    self._log.insert(Candidate)
                    .values(
                        job_id=job_id,
                        workload_id=job.workload_id,
                        target_id=job.target_id,
                        trace_json=trace_json,
                        program_hash=program_hash,
                        predicted_score=score,
                        created_at=utcnow(),
                        state=CandidateState.QUEUED,
                        queue_position=position,
                        strikes=0,
                    )
                    .on_conflict_do_nothing(
                        index_elements=["workload_id", "target_id", "program_hash"]
                    )
                    .returning(Candidate.id)
                )
                if inserted is not None:
                    queued.append(program_hash)
            return queued

    def budget(self, job_id: int) -> JobBudget:
        """Where a job stands against its budget, read in one transaction (the engine's poll).

        Raises NotFound if there is no such job.
        """
        with self._sessions.begin() as session:
            job = _job(session, job_id)
            trials = dict(
                session.execute(
                    select(Candidate.state, func.count(Candidate.id))
                    .where(Candidate.job_id == job_id, Candidate.trace_json != BASELINE_TRACE)
                    .group_by(Candidate.state)
                ).all()
            )
            baseline = session.scalar(
                select(func.count(Candidate.id)).where(
                    Candidate.job_id == job_id,
                    Candidate.trace_json == BASELINE_TRACE,
                    Candidate.state.in_(_OUTSTANDING),
                )
            )
            return JobBudget(
                status=JobStatus(job.status),
                trials=job.trials,
                measured=trials.get(CandidateState.MEASURED, 0)
                + trials.get(CandidateState.POISONED, 0),
                outstanding=sum(trials.get(state, 0) for state in _OUTSTANDING),
                baseline_outstanding=bool(baseline),
            )

    def measured_since(self, job_id: int, after_measurement_id: int) -> list[MeasuredCandidate]:
        """Measurements of the job's candidates newer than ``after_measurement_id``, in order."""
        query = (
            select(Candidate, Measurement)
            .join(Measurement, Measurement.candidate_id == Candidate.id)
            .where(
                Candidate.job_id == job_id,
                Measurement.id > after_measurement_id,
                Measurement.imported_at.is_(None),
            )
            .order_by(Measurement.id)
        )
        with self._sessions.begin() as session:
            return [
                MeasuredCandidate(measurement.id, record_view(candidate, measurement))
                for candidate, measurement in session.execute(query).all()
            ]

    def _progress(self, session: Session, job: TuningJob) -> JobProgress:
        rows = session.execute(
            select(
                Candidate.trace_json,
                Measurement.median_secs,
                Measurement.verified,
                Measurement.error_kind,
            )
            .join(Measurement, Measurement.candidate_id == Candidate.id)
            .where(Candidate.job_id == job.id, Measurement.imported_at.is_(None))
            .order_by(Measurement.id)
        ).all()
        done = failed = 0
        best: float | None = None
        curve: list[tuple[int, float]] = []
        for trace_json, median, verified, error_kind in rows:
            if trace_json != BASELINE_TRACE:
                done += 1
                failed += error_kind is not None
            if verified and median is not None and (best is None or median < best):
                best = median
                curve.append((done, median))
        overall = session.scalar(
            select(BestRecord.median_secs).where(
                BestRecord.workload_id == job.workload_id, BestRecord.target_id == job.target_id
            )
        )
        baseline = session.scalar(  # measured by this job or by an earlier one
            select(Measurement.median_secs)
            .join(Candidate, Candidate.id == Measurement.candidate_id)
            .where(
                Candidate.workload_id == job.workload_id,
                Candidate.target_id == job.target_id,
                Candidate.trace_json == BASELINE_TRACE,
            )
        )
        workload = self._log.workload_by_id(session, job.workload_id)
        target = session.get(Target, job.target_id)
        assert target is not None
        retimed = final_medians(session, job.id)  # the second timing that confirms a best
        return record_of(
            JobProgress,
            job,
            workload=workload,
            target=target_info(target),
            status=JobStatus(job.status),
            trials_done=done,
            failed=failed,
            best_latency_secs=overall if retimed.winner is None else retimed.winner,
            best_confirmed=retimed.winner is not None,
            curve=curve,
            baseline_latency_secs=baseline if retimed.untuned is None else retimed.untuned,
            final=Finals.progress(session, job.id),
        )


def queued_job(
    workload_id: int, target_id: int, owner: str | None, **search: Unpack[SearchSettings]
) -> TuningJob:
    """A service job of ``owner`` to add to a session: queued, for an engine to take up."""
    return TuningJob(
        workload_id=workload_id,
        target_id=target_id,
        status=JobStatus.QUEUED.value,
        owner=owner,
        **search,
    )


def queue_turns(session: Session, target_id: int, n: int) -> Subquery:
    """The candidates of running jobs that wait for a worker of ``target_id`` (``id``), each with
    its ``turn``: its rank among its owner's, by queue position. Handing out the lowest turns
    first lets owners take turns, and within an owner its jobs.

    Only the head of each job's queue is ranked (its waiting candidates up to ``2 n`` positions
    past its first), read through the index on (job, state, position): a lease of ``n`` costs the
    same however many candidates wait.
    """
    head = (
        select(func.min(Candidate.queue_position))
        .where(Candidate.job_id == TuningJob.id, Candidate.state == CandidateState.QUEUED)
        .scalar_subquery()
    )
    heads = session.execute(
        select(TuningJob.id, head).where(
            TuningJob.status == JobStatus.RUNNING.value, TuningJob.target_id == target_id
        )
    ).all()
    ranges = [
        (Candidate.job_id == job_id)
        & (Candidate.state == CandidateState.QUEUED)
        & Candidate.queue_position.between(first, first + 2 * n - 1)
        for job_id, first in heads
        if first is not None
    ]
    turn = func.row_number().over(
        partition_by=TuningJob.owner, order_by=(Candidate.queue_position, Candidate.id)
    )
    return (
        select(Candidate.id, turn.label("turn"))
        .join(TuningJob, TuningJob.id == Candidate.job_id)
        .where(or_(false(), *ranges))
        .subquery()
    )


def ensure_room(
    session: Session, owner: str, open_count: Select, limit: int, what: str, *, lock: bool
) -> None:
    """Refuse where ``owner`` has ``limit`` ``what`` queued or running (``open_count`` counts
    them). With ``lock``, first hold the owner's lock on PostgreSQL until the transaction ends,
    so that submissions of one owner at once count each other (SQLite serialises writers).

    Raises:
        OverLimit: the owner has no room left.
    """
    if lock and session.get_bind().dialect.name == "postgresql":
        key = int.from_bytes(hashlib.sha256(owner.encode()).digest()[:8], "big", signed=True)
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
    if (session.scalar(open_count) or 0) >= limit:
        raise OverLimit(
            f"you have {limit} {what} queued or running, the most this server allows; "
            "retry once one has ended"
        )


def _open_jobs(owner: str) -> Select:
    """How many jobs of ``owner`` are queued or running, the rounds of its model jobs apart."""
    model_round = select(ModelJobRound.id).where(ModelJobRound.job_id == TuningJob.id).exists()
    return select(func.count(TuningJob.id)).where(
        TuningJob.owner == owner, TuningJob.status.in_(OPEN_STATUSES), ~model_round
    )


def no_job(job_id: int) -> NotFound:
    """The error for a job that is not there (or not the caller's to see: the same answer)."""
    return NotFound(f"no tuning job with id {job_id}")


def _job(session: Session, job_id: int) -> TuningJob:
    job = session.get(TuningJob, job_id)
    if job is None:
        raise no_job(job_id)
    return job
