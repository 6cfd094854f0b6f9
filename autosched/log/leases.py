"""Workers and leases in the tuning log: the service's queue of candidates, as workers see it.

Workers register their target and device, lease queued candidates of their target (or a job's
final, ``autosched.finals.retiming``, which comes first), heartbeat while they measure, and report
what they measured. Every operation is one transaction.

Contract:
    * Claiming candidates is one statement (``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP
      LOCKED)`` on PostgreSQL; SQLite serialises writers), so two workers never lease the same
      candidate while its lease holds.
    * A lease expires unless its worker heartbeats; its unmeasured candidates go back to the queue
      with a strike. A candidate that cost a measuring process twice (a crash reported, or an
      expired lease) is poisoned: recorded as a ``crash`` measurement and never handed out again.
    * A report counts only for the candidates its lease holds, the lease of the worker that
      reports: a result for any other candidate (a retry, a late report of an expired lease, a
      candidate of another lease, job or target) is ignored and counted as such. A report with a
      latency no machine of the target could reach (``autosched.ceiling``) is refused whole.
    * Reports are idempotent: a candidate is measured once; a second report of it changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from autosched.ceiling import impossible
from autosched.errors import NotFound, UserError
from autosched.finals.retiming import Finals
from autosched.log.jobs import queue_turns
from autosched.log.queries import target_info
from autosched.log.store import LogStore, NewMeasurement, TuningLog
from autosched.log.subjects import ensure_target
from autosched.log.tables import (
    BestRecord,
    Candidate,
    CandidateState,
    Device,
    Final,
    FinalState,
    LeaseState,
    Measurement,
    Target,
    TuningJob,
    Worker,
    utcnow,
)
from autosched.log.tables import Lease as LeaseRow
from autosched.log.tables import Workload as WorkloadRow
from autosched.records import (
    ErrorKind,
    JobStatus,
    Lease,
    LeasedCandidate,
    MeasureResult,
    ReportedResult,
    ReportOutcome,
    RetimedEntrant,
    TargetInfo,
    WorkloadRef,
)

STRIKES_TO_POISON = 2
_OUTSTANDING = (CandidateState.QUEUED, CandidateState.LEASED)


@dataclass(frozen=True)
class QueueMetrics:
    """Counts for monitoring: the queue, its leases, live workers, recent results, jobs."""

    queued: int
    leased: int
    active_leases: int
    workers_alive: int
    results_last_minute: int
    jobs_by_status: dict[str, int]


@dataclass(frozen=True)
class TargetQueue:
    """The queue of one target: candidates waiting and leased, and its live workers."""

    target: TargetInfo
    queued: int
    leased: int
    workers_alive: int


@dataclass(frozen=True)
class WorkerStatus:
    """A registered worker as an operator watches it.

    ``lease_id`` and ``leased`` are its active lease and the candidates it holds (None and 0
    without one). Measurements record the device, not the worker, so ``device_results_last_minute``
    counts what every worker on its device stored in the last minute.
    """

    id: int
    name: str
    target: TargetInfo
    fingerprint: dict
    registered_at: datetime
    heartbeat_at: datetime
    alive: bool
    lease_id: int | None
    leased: int
    device_results_last_minute: int


class LeaseQueue(LogStore):
    """The candidates of the service's jobs as workers lease them, in ``log``'s database.

    Args:
        log: the tuning log whose database holds the queue.
        lease_secs: how long a lease holds without a heartbeat.
        worker_timeout_secs: a worker counts as alive this long after its last heartbeat.
    """

    def __init__(
        self, log: TuningLog, *, lease_secs: float = 60.0, worker_timeout_secs: float = 60.0
    ) -> None:
        super().__init__(log)
        self._lease = timedelta(seconds=lease_secs)
        self._worker_timeout = timedelta(seconds=worker_timeout_secs)
        # Leasing looks for expired leases at most this often (a lease outlives it by far).
        self._expiry_interval = min(timedelta(seconds=1), self._lease / 4)
        self._next_expiry = utcnow()

    def register_worker(
        self, *, name: str, target: dict, fingerprint: dict, token_id: int | None = None
    ) -> int:
        """Record a worker daemon of ``target`` on the device ``fingerprint``, registered with the
        API token ``token_id`` (None: without auth); returns its id."""
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
                token_id=token_id,
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

    def owner(self, worker_id: int) -> int | None:
        """The API token the worker registered with (None: without auth).

        Raises NotFound if there is no such worker.
        """
        with self._sessions.begin() as session:
            return _worker(session, worker_id).token_id

    def heartbeat(self, worker_id: int) -> None:
        """Note the worker alive and extend its active leases."""
        now = utcnow()
        with self._sessions.begin() as session:
            _worker(session, worker_id).heartbeat_at = now
            session.execute(
                update(LeaseRow)
                .where(LeaseRow.worker_id == worker_id, LeaseRow.state == LeaseState.ACTIVE)
                .values(expires_at=now + self._lease)
            )

    def lease(self, worker_id: int, n: int) -> Lease | None:
        """Hand the worker a queued final of its target, else up to ``n`` queued candidates of
        it; None if nothing waits."""
        now = utcnow()
        with self._sessions.begin() as session:
            worker = session.execute(
                update(Worker)
                .where(Worker.id == worker_id)
                .values(heartbeat_at=now)
                .returning(Worker.target_id, Worker.device_id)
            ).one_or_none()
            if worker is None:
                raise NotFound(f"no worker with id {worker_id}; register first")
            target_id, device_id = worker
            if now >= self._next_expiry:
                self._expire(session, now)
            lease = LeaseRow(
                worker_id=worker_id,
                created_at=now,
                expires_at=now + self._lease,
                state=LeaseState.ACTIVE,
            )
            session.add(lease)
            session.flush()
            others_alive = session.scalar(
                select(Worker.id)
                .where(
                    Worker.target_id == target_id,
                    Worker.device_id != device_id,
                    Worker.heartbeat_at >= now - self._worker_timeout,
                )
                .limit(1)
            )
            final = Finals.claim(session, target_id, lease.id, device_id, others_alive is not None)
            if final is not None:
                return Lease(lease.id, worker_id, lease.expires_at, [], final)
            turns = queue_turns(session, target_id, n)  # owners take turns, and their jobs
            waiting = (
                select(Candidate.id)
                .join(turns, turns.c.id == Candidate.id)
                .where(Candidate.state == CandidateState.QUEUED)
                .order_by(turns.c.turn, Candidate.queue_position, Candidate.id)
                .limit(n)
                .with_for_update(of=Candidate, skip_locked=True)
            )
            claimed = session.scalars(
                update(Candidate)
                .where(Candidate.id.in_(waiting.scalar_subquery()))
                .values(state=CandidateState.LEASED, lease_id=lease.id)
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

        Raises:
            UserError: a result of the lease has a sample that is not a latency of its workload
                on its target (``autosched.ceiling``); nothing is stored.
        """
        requeued = poisoned = 0
        with self._sessions.begin() as session:
            lease, device_id = self._held(session, worker_id, lease_id)
            held = {
                candidate.id: (candidate, flops, target)
                for candidate, flops, target in session.execute(
                    select(Candidate, WorkloadRow.flops, Target.target_json)
                    .join(WorkloadRow, WorkloadRow.id == Candidate.workload_id)
                    .join(Target, Target.id == Candidate.target_id)
                    .where(
                        Candidate.id.in_([item.candidate_id for item in results]),
                        Candidate.lease_id == lease_id,
                        Candidate.state == CandidateState.LEASED,
                    )
                    .with_for_update(of=Candidate)
                )
            }
            measured: list[ReportedResult] = []
            for item in results:
                if item.candidate_id not in held:
                    continue
                candidate, flops, target = held[item.candidate_id]
                _check_samples(item.candidate_id, item.result.samples, flops, target)
                if item.result.error_kind is ErrorKind.CRASH:
                    struck = self._strike(session, candidate, item.result.error_msg or "crashed")
                    poisoned += struck
                    requeued += not struck
                else:
                    measured.append(item)
            stored = self._log.store_measurements(
                session,
                [
                    NewMeasurement(item.candidate_id, item.result, item.verified, device_id)
                    for item in measured
                ],
                {
                    candidate_id: (candidate.workload_id, candidate.target_id)
                    for candidate_id, (candidate, _flops, _target) in held.items()
                },
            )
            if lease.state is LeaseState.ACTIVE:
                lease.state = LeaseState.REPORTED
                self._requeue_unreported(session, lease_id)
        ignored = len(results) - len(stored) - requeued - poisoned
        return ReportOutcome(len(stored), ignored, requeued, poisoned)

    def report_final(
        self, worker_id: int, lease_id: int, retimed: Sequence[RetimedEntrant]
    ) -> bool:
        """Rank and store the final the lease holds (``autosched.finals.retiming``); False where
        it holds none now (a retry, or a lease that expired meanwhile): nothing changes then.

        Raises:
            UserError: a sample is not a latency of the final's workload on its target
                (``autosched.ceiling``), or ``autosched.finals.retiming`` refuses the report.
        """
        with self._sessions.begin() as session:
            lease, device_id = self._held(session, worker_id, lease_id)
            subject = session.execute(
                select(WorkloadRow.flops, Target.target_json)
                .select_from(Final)
                .join(TuningJob, TuningJob.id == Final.job_id)
                .join(WorkloadRow, WorkloadRow.id == TuningJob.workload_id)
                .join(Target, Target.id == TuningJob.target_id)
                .where(Final.lease_id == lease_id, Final.state == FinalState.LEASED)
            ).one_or_none()
            if subject is not None:
                for entrant in retimed:
                    _check_samples(entrant.candidate_id, entrant.samples, *subject)
            taken = Finals(self._log).report(session, lease_id, device_id, retimed)
            if lease.state is LeaseState.ACTIVE:
                lease.state = LeaseState.REPORTED
            return taken

    def release(self, worker_id: int, lease_id: int) -> int:
        """Give a lease's unmeasured candidates (or its final) back to the queue, without a
        strike; returns how many candidates went back."""
        with self._sessions.begin() as session:
            lease, _device_id = self._held(session, worker_id, lease_id)
            lease.state = LeaseState.REPORTED
            Finals.release(session, lease_id)
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
                    .where(Candidate.state.in_(_OUTSTANDING))
                    .group_by(Candidate.state)
                ).all()
            )
            jobs = dict(
                session.execute(
                    select(TuningJob.status, func.count(TuningJob.id)).group_by(TuningJob.status)
                ).all()
            )
            return QueueMetrics(
                queued=states.get(CandidateState.QUEUED, 0),
                leased=states.get(CandidateState.LEASED, 0),
                active_leases=_count(session, LeaseRow.id, LeaseRow.state == LeaseState.ACTIVE),
                workers_alive=_count(
                    session, Worker.id, Worker.heartbeat_at >= now - self._worker_timeout
                ),
                results_last_minute=_count(
                    session, Measurement.id, Measurement.finished_at >= now - timedelta(minutes=1)
                ),
                jobs_by_status={status.value: jobs.get(status.value, 0) for status in JobStatus},
            )

    def queue_by_target(self) -> list[TargetQueue]:
        """The queue of every target with queued or leased candidates or live workers, by key."""
        alive = utcnow() - self._worker_timeout
        with self._sessions.begin() as session:
            counts: dict[int, dict[CandidateState, int]] = {}
            for target_id, state, count in session.execute(
                select(Candidate.target_id, Candidate.state, func.count(Candidate.id))
                .where(Candidate.state.in_(_OUTSTANDING))
                .group_by(Candidate.target_id, Candidate.state)
            ):
                counts.setdefault(target_id, {})[state] = count
            workers = dict(
                session.execute(
                    select(Worker.target_id, func.count(Worker.id))
                    .where(Worker.heartbeat_at >= alive)
                    .group_by(Worker.target_id)
                ).all()
            )
            targets = session.scalars(
                select(Target)
                .where(Target.id.in_(counts.keys() | workers.keys()))
                .order_by(Target.key)
            ).all()
            return [
                TargetQueue(
                    target=target_info(target),
                    queued=counts.get(target.id, {}).get(CandidateState.QUEUED, 0),
                    leased=counts.get(target.id, {}).get(CandidateState.LEASED, 0),
                    workers_alive=workers.get(target.id, 0),
                )
                for target in targets
            ]

    def workers(self, *, limit: int, offset: int) -> tuple[list[WorkerStatus], int]:
        """A page of registered workers, the most recently heard from first, and how many there
        are in all."""
        now = utcnow()
        with self._sessions.begin() as session:
            total = session.scalar(select(func.count(Worker.id))) or 0
            rows = session.execute(
                select(Worker, Target, Device.fingerprint)
                .join(Target, Target.id == Worker.target_id)
                .join(Device, Device.id == Worker.device_id)
                .order_by(Worker.heartbeat_at.desc(), Worker.id.desc())
                .limit(limit)
                .offset(offset)
            ).all()
            ids = [worker.id for worker, _target, _fingerprint in rows]
            leases = {
                worker_id: (lease_id, held)
                for worker_id, lease_id, held in session.execute(
                    select(LeaseRow.worker_id, LeaseRow.id, func.count(Candidate.id))
                    .outerjoin(
                        Candidate,
                        (Candidate.lease_id == LeaseRow.id)
                        & (Candidate.state == CandidateState.LEASED),
                    )
                    .where(LeaseRow.worker_id.in_(ids), LeaseRow.state == LeaseState.ACTIVE)
                    .group_by(LeaseRow.worker_id, LeaseRow.id)
                    .order_by(LeaseRow.id)
                )
            }
            results = dict(
                session.execute(
                    select(Measurement.device_id, func.count(Measurement.id))
                    .where(Measurement.finished_at >= now - timedelta(minutes=1))
                    .group_by(Measurement.device_id)
                ).all()
            )
            workers = [
                WorkerStatus(
                    id=worker.id,
                    name=worker.name,
                    target=target_info(target),
                    fingerprint=fingerprint,
                    registered_at=worker.registered_at,
                    heartbeat_at=worker.heartbeat_at,
                    alive=worker.heartbeat_at >= now - self._worker_timeout,
                    lease_id=leases.get(worker.id, (None, 0))[0],
                    leased=leases.get(worker.id, (None, 0))[1],
                    device_results_last_minute=results.get(worker.device_id, 0),
                )
                for worker, target, fingerprint in rows
            ]
            return workers, total

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

    @staticmethod
    def _held(session: Session, worker_id: int, lease_id: int) -> tuple[LeaseRow, int]:
        """The worker's lease ``lease_id`` and the worker's device.

        Raises NotFound if the worker holds no such lease."""
        found = session.execute(
            select(LeaseRow, Worker.device_id)
            .join(Worker, Worker.id == LeaseRow.worker_id)
            .where(LeaseRow.id == lease_id, LeaseRow.worker_id == worker_id)
        ).one_or_none()
        if found is None:
            raise NotFound(f"worker {worker_id} holds no lease {lease_id}")
        lease, device_id = found
        return lease, device_id

    def _strike(self, session: Session, candidate: Candidate, reason: str) -> bool:
        """Count a lost measuring process against a candidate; True if that poisoned it."""
        candidate.strikes += 1
        candidate.lease_id = None
        if candidate.strikes < STRIKES_TO_POISON:
            candidate.state = CandidateState.QUEUED
            return False
        now = utcnow()
        crash = MeasureResult(
            error_kind=ErrorKind.CRASH,
            error_msg=f"poisoned after {candidate.strikes} lost measuring processes; "
            f"last: {reason}",
            started_at=now,
            finished_at=now,
        )
        self._log.store_measurements(
            session,
            [NewMeasurement(candidate.id, crash, verified=False, device_id=None)],
            {candidate.id: (candidate.workload_id, candidate.target_id)},
        )
        candidate.state = CandidateState.POISONED  # after the store, which marks it measured
        return True

    def _requeue_unreported(self, session: Session, lease_id: int) -> int:
        return len(
            session.scalars(
                update(Candidate)
                .where(Candidate.lease_id == lease_id, Candidate.state == CandidateState.LEASED)
                .values(state=CandidateState.QUEUED, lease_id=None)
                .returning(Candidate.id)
                .execution_options(synchronize_session=False)
            ).all()
        )

    def _expire(self, session: Session, now: datetime) -> int:
        self._next_expiry = now + self._expiry_interval
        expired = session.scalars(
            update(LeaseRow)
            .where(LeaseRow.state == LeaseState.ACTIVE, LeaseRow.expires_at < now)
            .values(state=LeaseState.EXPIRED)
            .returning(LeaseRow.id)
            .execution_options(synchronize_session=False)
        ).all()
        if expired:
            Finals.expire(session, expired)
            held = session.scalars(
                select(Candidate)
                .where(Candidate.lease_id.in_(expired), Candidate.state == CandidateState.LEASED)
                .with_for_update()
            ).all()
            for candidate in held:
                self._strike(session, candidate, "the lease expired without a report")
        return len(expired)


def _check_samples(
    candidate_id: int, samples: Sequence[float], flops: float | None, target: dict
) -> None:
    """Refuse the samples of a candidate where one cannot be a latency of its workload on its
    target."""
    for secs in samples:
        why = impossible(secs, flops, target)
        if why is not None:
            raise UserError(f"candidate {candidate_id}: {why}")


def _worker(session: Session, worker_id: int) -> Worker:
    worker = session.get(Worker, worker_id)
    if worker is None:
        raise NotFound(f"no worker with id {worker_id}; register first")
    return worker


def _count(session: Session, column: object, condition: object) -> int:
    return session.scalar(select(func.count(column)).where(condition)) or 0
