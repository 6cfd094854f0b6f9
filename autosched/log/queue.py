"""The service's work queue in the tuning log: jobs, queued candidates, workers, leases, reports.

Search engines claim jobs and enqueue candidates; workers lease candidates for their target, report
measurements and heartbeat while busy. Every operation is one transaction on the log's database.

Contract:
    * Claiming candidates is one statement (``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP
      LOCKED)`` on PostgreSQL; SQLite serialises writers), so two workers never lease the same
      candidate while its lease holds.
    * A lease expires unless its worker heartbeats; its unmeasured candidates go back to the queue
      with a strike. A candidate that cost a measuring process twice (a crash reported, or an
      expired lease) is poisoned: recorded as a ``crash`` measurement and never handed out again.
    * Reports are idempotent: a candidate is measured once; a second report of it (a retry, or a
      late report of an expired lease measured elsewhere meanwhile) is ignored.
    * Jobs take turns: each job's candidates are numbered in the order they were enqueued, and
      the queue hands out the lowest numbers first, whichever job they belong to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from autosched.errors import UserError
from autosched.log.models import (
    BestRecord,
    Candidate,
    Measurement,
    Target,
    TuningJob,
    Worker,
    utcnow,
)
from autosched.log.models import (
    Lease as LeaseRow,
)
from autosched.log.models import Workload as WorkloadRow
from autosched.log.store import JobStatus, TargetInfo, TuningLog, WorkloadInfo, record_view
from autosched.log.subjects import ensure_subject, ensure_target
from autosched.records import ErrorKind, MeasureResult, RecordView, WorkloadRef
from autosched.schedule import BASELINE_TRACE
from autosched.workload import Workload

STRIKES_TO_POISON = 2


@dataclass(frozen=True)
class JobProgress:
    """A job as its submitter follows it. ``trials_done`` and ``failed`` leave out the baseline;
    ``curve`` lists (trials done, best verified latency so far) at each improvement."""

    id: int
    workload: WorkloadInfo
    target: TargetInfo
    trials: int
    batch_size: int
    strategy: str
    seed: int | None
    status: JobStatus
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    trials_done: int
    failed: int
    best_latency_secs: float | None
    curve: list[tuple[int, float]]
    cost_model_id: int | None = None  # the shared cost model version its search started from


@dataclass(frozen=True)
class JobBudget:
    """A job's measured and still outstanding candidates (the baseline left out)."""

    status: JobStatus
    trials: int
    measured: int
    outstanding: int


@dataclass(frozen=True)
class LeasedCandidate:
    """A candidate handed to a worker, which verifies results faster than ``best_latency_secs``."""

    candidate_id: int
    job_id: int
    workload: WorkloadRef
    target: dict
    trace_json: str
    best_latency_secs: float | None


@dataclass(frozen=True)
class Lease:
    id: int
    worker_id: int
    expires_at: datetime
    candidates: list[LeasedCandidate]


@dataclass(frozen=True)
class ReportedResult:
    candidate_id: int
    result: MeasureResult
    verified: bool


@dataclass(frozen=True)
class ReportOutcome:
    stored: int
    ignored: int
    requeued: int
    poisoned: int


@dataclass(frozen=True)
class QueueMetrics:
    queued: int
    leased: int
    active_leases: int
    workers_alive: int
    results_last_minute: int
    jobs_by_status: dict[str, int]


@dataclass(frozen=True)
class MeasuredCandidate:
    """A measurement of a job's candidate, as the engine reads them back in arrival order."""

    measurement_id: int
    record: RecordView


class WorkQueue:
    """The queue of a tuning service, stored in ``log``'s database.

    Args:
        log: the tuning log whose database holds the queue.
        lease_secs: how long a lease holds without a heartbeat.
        worker_timeout_secs: a worker counts as alive this long after its last heartbeat.
    """

    def __init__(
        self, log: TuningLog, *, lease_secs: float = 60.0, worker_timeout_secs: float = 60.0
    ) -> None:
        self._log = log
        self._sessions = log.sessions
        self._lease = timedelta(seconds=lease_secs)
        self._worker_timeout = timedelta(seconds=worker_timeout_secs)
        # Leasing looks for expired leases at most this often (a lease outlives it by far).
        self._expiry_interval = min(timedelta(seconds=1), self._lease / 4)
        self._next_expiry = utcnow()

    # Jobs, as clients see them.

    def submit(
        self,
        workload: Workload,
        target: dict,
        *,
        trials: int,
        batch_size: int,
        strategy: str,
        seed: int | None,
    ) -> int:
        """Queue a tuning job; an engine takes it up. Returns the job id."""
        stored_workload, stored_target = ensure_subject(self._log, workload, target)
        with self._sessions.begin() as session:
            job = TuningJob(
                workload_id=stored_workload.id,
                target_id=stored_target.id,
                trials=trials,
                batch_size=batch_size,
                strategy=strategy,
                seed=seed,
                status=JobStatus.QUEUED.value,
            )
            session.add(job)
            session.flush()
            return job.id

    def cancel(self, job_id: int) -> JobProgress:
        """Stop a job: it hands out no more work; queued candidates are dropped.

        A job that already ended keeps its status. Raises UserError if there is no such job.
        """
        with self._sessions.begin() as session:
            job = _job(session, job_id)
            if not JobStatus(job.status).final:
                job.status = JobStatus.CANCELLED.value
                job.finished_at = utcnow()
                session.execute(
                    Candidate.__table__.delete().where(
                        Candidate.job_id == job_id, Candidate.state == "queued"
                    )
                )
        return self.job(job_id)

    def job(self, job_id: int) -> JobProgress:
        """A job's progress. Raises UserError if there is no such job."""
        with self._sessions.begin() as session:
            return self._progress(session, _job(session, job_id))

    def jobs(self, *, limit: int, offset: int) -> tuple[list[JobProgress], int]:
        """A page of jobs, newest first, and the number of jobs in all."""
        with self._sessions.begin() as session:
            total = session.scalar(select(func.count(TuningJob.id))) or 0
            rows = session.scalars(
                select(TuningJob).order_by(TuningJob.id.desc()).limit(limit).offset(offset)
            ).all()
            return [self._progress(session, job) for job in rows], total

    # Jobs, as search engines drive them.

    def claim_jobs(self, engine_id: str, ttl_secs: float) -> list[int]:
        """Claim (or renew the claim on) every unfinished job no live engine holds.

        Returns the ids of the jobs this engine holds now, oldest first.
        """
        now = utcnow()
        with self._sessions.begin() as session:
            claimable = TuningJob.status.in_([JobStatus.QUEUED.value, JobStatus.RUNNING.value]) & (
                TuningJob.engine_id.is_(None)
                | (TuningJob.engine_id == engine_id)
                | (TuningJob.engine_expires_at < now)
            )
            claimed = session.scalars(
                update(TuningJob)
                .where(claimable)
                .values(
                    engine_id=engine_id,
                    engine_expires_at=now + timedelta(seconds=ttl_secs),
                    status=JobStatus.RUNNING.value,
                    started_at=func.coalesce(TuningJob.started_at, now),
                )
                .returning(TuningJob.id)
            ).all()
            return sorted(claimed)

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
                        state="queued",
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

        Raises UserError if there is no such job.
        """
        with self._sessions.begin() as session:
            job = _job(session, job_id)
            states = dict(
                session.execute(
                    select(Candidate.state, func.count(Candidate.id))
                    .where(Candidate.job_id == job_id, Candidate.trace_json != BASELINE_TRACE)
                    .group_by(Candidate.state)
                ).all()
            )
            return JobBudget(
                status=JobStatus(job.status),
                trials=job.trials,
                measured=states.get("measured", 0) + states.get("poisoned", 0),
                outstanding=states.get("queued", 0) + states.get("leased", 0),
            )

    def measured_since(self, job_id: int, after_measurement_id: int) -> list[MeasuredCandidate]:
        """Measurements of the job's candidates newer than ``after_measurement_id``, in order."""
        query = (
            select(Candidate, Measurement)
            .join(Measurement, Measurement.candidate_id == Candidate.id)
            .where(Candidate.job_id == job_id, Measurement.id > after_measurement_id)
            .order_by(Measurement.id)
        )
        with self._sessions.begin() as session:
            return [
                MeasuredCandidate(measurement.id, record_view(candidate, measurement))
                for candidate, measurement in session.execute(query).all()
            ]

    # Workers.

    def register_worker(self, *, name: str, target: dict, fingerprint: dict) -> int:
        """Record a worker daemon of ``target`` on the device ``fingerprint``; returns its id."""
        target_id = ensure_target(self._log, target).id
        device_id = self._log.ensure_device(fingerprint)
        with self._sessions.begin() as session:
            now = utcnow()
            worker = Worker(
                name=name,
                target_id=target_id,
                device_id=device_id,
                registered_at=now,
                heartbeat_at=now,
            )
            session.add(worker)
            session.flush()
            return worker.id

    def worker_targets(self, kind: str) -> list[dict]:
        """Targets of the live workers of ``kind``, the most recently heard from first."""
        alive = utcnow() - self._worker_timeout
        last_heard = (
            select(Worker.target_id, func.max(Worker.heartbeat_at).label("last"))
            .where(Worker.heartbeat_at >= alive)
            .group_by(Worker.target_id)
            .subquery()
        )
        query = (
            select(Target.target_json)
            .join(last_heard, last_heard.c.target_id == Target.id)
            .where(Target.kind == kind)
            .order_by(last_heard.c.last.desc())
        )
        with self._sessions.begin() as session:
            return list(session.scalars(query).all())

    def heartbeat(self, worker_id: int) -> None:
        """Note the worker alive and extend its active leases."""
        now = utcnow()
        with self._sessions.begin() as session:
            _worker(session, worker_id).heartbeat_at = now
            session.execute(
                update(LeaseRow)
                .where(LeaseRow.worker_id == worker_id, LeaseRow.state == "active")
                .values(expires_at=now + self._lease)
            )

    def lease(self, worker_id: int, n: int) -> Lease | None:
        """Hand up to ``n`` queued candidates of the worker's target to it; None if none wait."""
        now = utcnow()
        with self._sessions.begin() as session:
            target_id = session.scalar(
                update(Worker)
                .where(Worker.id == worker_id)
                .values(heartbeat_at=now)
                .returning(Worker.target_id)
            )
            if target_id is None:
                raise UserError(f"no worker with id {worker_id}; register first")
            if now >= self._next_expiry:
                self._expire(session, now)
            lease = LeaseRow(
                worker_id=worker_id, created_at=now, expires_at=now + self._lease, state="active"
            )
            session.add(lease)
            session.flush()
            waiting = (
                select(Candidate.id)
                .join(TuningJob, TuningJob.id == Candidate.job_id)
                .where(
                    Candidate.state == "queued",
                    Candidate.target_id == target_id,
                    TuningJob.status == JobStatus.RUNNING.value,
                )
                .order_by(Candidate.queue_position, Candidate.id)
                .limit(n)
                .with_for_update(of=Candidate, skip_locked=True)
            )
            claimed = session.scalars(
                update(Candidate)
                .where(Candidate.id.in_(waiting.scalar_subquery()))
                .values(state="leased", lease_id=lease.id)
                .returning(Candidate.id)
                .execution_options(synchronize_session=False)
            ).all()
            if not claimed:
                session.delete(lease)
                return None
            return Lease(lease.id, worker_id, lease.expires_at, self._leased(session, claimed))

    def report(
        self, worker_id: int, lease_id: int, results: Sequence[ReportedResult]
    ) -> ReportOutcome:
        """Store the measurements of a lease's candidates (idempotent; see the module contract).

        A ``crash`` result is a strike: the candidate goes back to the queue, or is poisoned at
        its second strike. The lease's candidates without a result go back to the queue.
        """
        requeued = poisoned = 0
        with self._sessions.begin() as session:
            found = session.execute(
                select(LeaseRow, Worker.device_id)
                .join(Worker, Worker.id == LeaseRow.worker_id)
                .where(LeaseRow.id == lease_id, LeaseRow.worker_id == worker_id)
            ).one_or_none()
            if found is None:
                raise UserError(f"worker {worker_id} holds no lease {lease_id}")
            lease, device_id = found
            open_candidates = {
                candidate.id: candidate
                for candidate in session.scalars(
                    select(Candidate)
                    .where(
                        Candidate.id.in_([item.candidate_id for item in results]),
                        Candidate.state.in_(["queued", "leased"]),
                    )
                    .with_for_update()
                )
            }
            measured: list[ReportedResult] = []
            for item in results:
                candidate = open_candidates.get(item.candidate_id)
                if candidate is None:
                    continue
                if item.result.error_kind is ErrorKind.CRASH:
                    struck = self._strike(session, candidate, item.result.error_msg or "crashed")
                    poisoned += struck
                    requeued += not struck
                else:
                    measured.append(item)
            stored = self._store(session, open_candidates, measured, device_id)
            if lease.state == "active":
                lease.state = "reported"
                self._requeue_unreported(session, lease_id)
        ignored = len(results) - stored - requeued - poisoned
        return ReportOutcome(stored, ignored, requeued, poisoned)

    def release(self, worker_id: int, lease_id: int) -> int:
        """Give a lease's unmeasured candidates back to the queue, without a strike."""
        with self._sessions.begin() as session:
            lease = session.get(LeaseRow, lease_id)
            if lease is None or lease.worker_id != worker_id:
                raise UserError(f"worker {worker_id} holds no lease {lease_id}")
            lease.state = "reported"
            return self._requeue_unreported(session, lease_id)

    def expire_leases(self) -> int:
        """Expire leases whose worker stopped heartbeating; returns how many expired."""
        with self._sessions.begin() as session:
            return self._expire(session, utcnow())

    def metrics(self) -> QueueMetrics:
        now = utcnow()
        with self._sessions.begin() as session:
            states = dict(
                session.execute(
                    select(Candidate.state, func.count(Candidate.id))
                    .where(Candidate.state.in_(["queued", "leased"]))
                    .group_by(Candidate.state)
                ).all()
            )
            jobs = dict(
                session.execute(
                    select(TuningJob.status, func.count(TuningJob.id)).group_by(TuningJob.status)
                ).all()
            )
            return QueueMetrics(
                queued=states.get("queued", 0),
                leased=states.get("leased", 0),
                active_leases=_count(session, LeaseRow.id, LeaseRow.state == "active"),
                workers_alive=_count(
                    session, Worker.id, Worker.heartbeat_at >= now - self._worker_timeout
                ),
                results_last_minute=_count(
                    session, Measurement.id, Measurement.finished_at >= now - timedelta(minutes=1)
                ),
                jobs_by_status={status.value: jobs.get(status.value, 0) for status in JobStatus},
            )

    # Internals.

    def _leased(self, session: Session, candidate_ids: Sequence[int]) -> list[LeasedCandidate]:
        """The leased candidates with their workload, target and best latency, in one query."""
        rows = session.execute(
            select(
                Candidate.id,
                Candidate.job_id,
                Candidate.trace_json,
                WorkloadRow.name,
                WorkloadRow.params,
                WorkloadRow.key,
                WorkloadRow.source,
                Target.target_json,
                BestRecord.median_secs,
            )
            .join(WorkloadRow, WorkloadRow.id == Candidate.workload_id)
            .join(Target, Target.id == Candidate.target_id)
            .outerjoin(
                BestRecord,
                (BestRecord.workload_id == Candidate.workload_id)
                & (BestRecord.target_id == Candidate.target_id),
            )
            .where(Candidate.id.in_(candidate_ids))
            .order_by(Candidate.queue_position, Candidate.id)
        ).all()
        return [
            LeasedCandidate(
                candidate_id=row.id,
                job_id=row.job_id,
                workload=WorkloadRef(row.name, dict(row.params), row.key, row.source),
                target=row.target_json,
                trace_json=row.trace_json,
                best_latency_secs=row.median_secs,
            )
            for row in rows
        ]

    def _store(
        self,
        session: Session,
        candidates: dict[int, Candidate],
        items: Sequence[ReportedResult],
        device_id: int,
    ) -> int:
        """Insert the measurements of open candidates in one statement; returns how many.

        A candidate measured meanwhile by another report keeps that measurement. The fastest
        verified result is offered as the best record.
        """
        if not items:
            return 0
        rows = [
            {
                "candidate_id": item.candidate_id,
                "device_id": device_id,
                "samples": list(item.result.samples),
                "median_secs": item.result.median,
                "error_kind": None
                if item.result.error_kind is None
                else item.result.error_kind.value,
                "error_msg": item.result.error_msg,
                "verified": item.verified,
                "build_secs": item.result.build_secs,
                "started_at": item.result.started_at,
                "finished_at": item.result.finished_at or utcnow(),
            }
            for item in items
        ]
        inserted = set(
            session.scalars(
                self._log.insert(Measurement)
                .values(rows)
                .on_conflict_do_nothing(index_elements=["candidate_id"])
                .returning(Measurement.candidate_id)
            )
        )
        session.execute(
            update(Candidate)
            .where(Candidate.id.in_(inserted))
            .values(state="measured", lease_id=None)
            .execution_options(synchronize_session=False)
        )
        fastest: dict[tuple[int, int], ReportedResult] = {}
        for item in items:
            median = item.result.median
            if item.candidate_id not in inserted or not item.verified or median is None:
                continue
            candidate = candidates[item.candidate_id]
            key = (candidate.workload_id, candidate.target_id)
            if key not in fastest or median < (fastest[key].result.median or 0.0):
                fastest[key] = item
        for (workload_id, target_id), item in fastest.items():
            median = item.result.median
            assert median is not None
            self._log.offer_best(session, workload_id, target_id, median, item.candidate_id)
        return len(inserted)

    def _strike(self, session: Session, candidate: Candidate, reason: str) -> bool:
        """Count a lost measuring process against a candidate; True if that poisoned it."""
        candidate.strikes += 1
        candidate.lease_id = None
        if candidate.strikes < STRIKES_TO_POISON:
            candidate.state = "queued"
            return False
        candidate.state = "poisoned"
        now = utcnow()
        session.add(
            Measurement(
                candidate_id=candidate.id,
                samples=[],
                median_secs=None,
                error_kind=ErrorKind.CRASH.value,
                error_msg=f"poisoned after {candidate.strikes} lost measuring processes; "
                f"last: {reason}",
                verified=False,
                started_at=now,
                finished_at=now,
            )
        )
        return True

    def _requeue_unreported(self, session: Session, lease_id: int) -> int:
        return len(
            session.scalars(
                update(Candidate)
                .where(Candidate.lease_id == lease_id, Candidate.state == "leased")
                .values(state="queued", lease_id=None)
                .returning(Candidate.id)
                .execution_options(synchronize_session=False)
            ).all()
        )

    def _expire(self, session: Session, now: datetime) -> int:
        self._next_expiry = now + self._expiry_interval
        expired = session.scalars(
            update(LeaseRow)
            .where(LeaseRow.state == "active", LeaseRow.expires_at < now)
            .values(state="expired")
            .returning(LeaseRow.id)
            .execution_options(synchronize_session=False)
        ).all()
        if expired:
            held = session.scalars(
                select(Candidate)
                .where(Candidate.lease_id.in_(expired), Candidate.state == "leased")
                .with_for_update()
            ).all()
            for candidate in held:
                self._strike(session, candidate, "the lease expired without a report")
        return len(expired)

    def _progress(self, session: Session, job: TuningJob) -> JobProgress:
        rows = session.execute(
            select(
                Candidate.trace_json,
                Measurement.median_secs,
                Measurement.verified,
                Measurement.error_kind,
            )
            .join(Measurement, Measurement.candidate_id == Candidate.id)
            .where(Candidate.job_id == job.id)
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
        workload = self._log.workload_by_id(session, job.workload_id)
        target = session.get(Target, job.target_id)
        assert target is not None
        return JobProgress(
            id=job.id,
            workload=workload,
            target=TargetInfo(target.id, target.key, target.kind, target.target_json),
            trials=job.trials,
            batch_size=job.batch_size,
            strategy=job.strategy,
            seed=job.seed,
            status=JobStatus(job.status),
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            trials_done=done,
            failed=failed,
            best_latency_secs=overall,
            curve=curve,
            cost_model_id=job.cost_model_id,
        )


def _job(session: Session, job_id: int) -> TuningJob:
    job = session.get(TuningJob, job_id)
    if job is None:
        raise UserError(f"no tuning job with id {job_id}")
    return job


def _worker(session: Session, worker_id: int) -> Worker:
    worker = session.get(Worker, worker_id)
    if worker is None:
        raise UserError(f"no worker with id {worker_id}; register first")
    return worker


def _count(session: Session, column: object, condition: object) -> int:
    return session.scalar(select(func.count(column)).where(condition)) or 0
