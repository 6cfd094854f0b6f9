"""The tuning log: workloads, targets, devices and measured candidates in SQLite or PostgreSQL.

``TuningLog`` opens the database (``db``) and stores what tuning measured; the service's job and
lease stores (``jobs``, ``leases``), the shared cost models (``costmodels``) and the API tokens
(``tokens``) share its database and sessions. Every measurement, measured here or reported by a
worker, is stored by ``TuningLog.store_measurements``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from alembic.util.exc import CommandError
from sqlalchemy import Select, and_, case, func, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from autosched.errors import Conflict, DatabaseUnavailable, NotFound, UserError
from autosched.log.db import (
    INSERTS,
    Insert,
    check_schema,
    create_log_engine,
    default_db_url,
    display,
    one_line,
)
from autosched.log.provenance import measurement_provenance
from autosched.log.tables import (
    BestRecord,
    Candidate,
    CandidateState,
    Device,
    FinalistTiming,
    Measurement,
    Target,
    TuningJob,
    Worker,
    Workload,
    utcnow,
)
from autosched.records import (
    CandidateResult,
    ErrorKind,
    MeasureResult,
    RecordView,
    SummaryRow,
    TargetInfo,
    TunedRecord,
    WorkloadInfo,
)

_Keyed = TypeVar("_Keyed", Workload, Target, Device)


@dataclass(frozen=True)
class NewMeasurement:
    """A measurement of a stored candidate, about to be stored."""

    candidate_id: int
    result: MeasureResult
    verified: bool
    device_id: int | None


class TuningLog:
    """The record of every tuning job and measured candidate, in SQLite or PostgreSQL.

    Contract:
        * Opening a log brings its schema up to date (Alembic ``upgrade head``); opening an
          up-to-date log changes nothing. Several processes may open the same log at once.
          With ``migrate=False`` (read-only commands) nothing is created or migrated: the
          database must hold an up-to-date log, and a SQLite file is opened read-only. A
          database holding tables that are neither autosched's nor Optuna's is refused either
          way.
        * Every method runs in its own transaction: it is stored entirely or not at all.
        * Thread safety: one ``TuningLog`` may be shared by threads; each call takes its own
          connection from the pool. After ``os.fork`` the child must open its own ``TuningLog``.
        * Concurrent writers (threads or processes) are safe. ``ensure_*`` and ``record_batch`` are
          idempotent: inserting what is already there is not an error and counts nothing twice.
          SQLite serializes writers (every transaction begins ``IMMEDIATE`` and waits up to
          ``busy_timeout``); PostgreSQL resolves conflicts with ``ON CONFLICT``.
        * Timestamps are timezone-aware UTC.
        * The best record of a workload and target only ever comes from a verified, error-free
          measurement, and it only changes to a strictly faster one.

    Args:
        migrate: Create or upgrade the schema (False: only check it).
        url: A SQLAlchemy URL (``sqlite:///path.db``, ``postgresql+psycopg://user@host/db``; a bare
            ``postgresql://`` uses psycopg 3). ``None`` means ``default_db_url()``.

    Raises:
        UserError: If the URL is malformed or names an unsupported backend, if the database
            cannot be reached, or if its schema cannot be brought up to date (e.g. it was written
            by a newer autosched). The message is one line.
    """

    def __init__(self, url: str | None = None, *, migrate: bool = True) -> None:
        self._url = default_db_url() if url is None else url
        self.read_only = not migrate
        """Opened by a command that reads only: nothing is written, caches included."""
        self._engine = create_log_engine(self._url, read_only=not migrate)
        try:
            check_schema(self._engine, migrate=migrate)
        except UserError:
            self._engine.dispose()
            raise
        except (DBAPIError, CommandError, DatabaseUnavailable) as exc:
            self._engine.dispose()
            reason = str(exc.orig) if isinstance(exc, DBAPIError) else str(exc)
            raise UserError(
                f"cannot open tuning log {display(self._url)}: {one_line(reason)}"
            ) from exc
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        self._insert = INSERTS[self._engine.dialect.name]

    @property
    def url(self) -> str:
        """The URL the log was opened with."""
        return self._url

    @property
    def engine_url(self) -> str:
        """The URL with the driver the log uses spelled out, for other SQLAlchemy users of the same
        database (Optuna's studies)."""
        return self._engine.url.render_as_string(hide_password=False)

    @property
    def sessions(self) -> sessionmaker[Session]:
        """Sessions on the log's database, for the stores that share it."""
        return self._sessions

    @property
    def insert(self) -> Insert:
        """The dialect's INSERT construct, which offers ``on_conflict_do_nothing``/``_update``."""
        return self._insert

    def ping(self) -> None:
        """Reach the database once. Raises DatabaseUnavailable when it cannot be reached."""
        with self._engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")

    def close(self) -> None:
        """Close every pooled connection. The log may not be used afterwards."""
        self._engine.dispose()

    def __enter__(self) -> TuningLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def ensure_workload(
        self,
        *,
        key: str,
        name: str,
        params: dict[str, Any],
        tvmscript: str,
        flops: float | None,
        source: str | None = None,
    ) -> WorkloadInfo:
        """Return the workload stored under ``key``, inserting it first if there is none.

        Args:
            key: The portable hash that identifies the workload.
            name: The workload's name (e.g. ``matmul``).
            params: The parameters it was built from (JSON-serializable).
            tvmscript: Its TVMScript source.
            flops: Floating-point operations of one run, if known.
            source: The user's TVMScript, for a workload that is not built in.

        Returns:
            The stored workload. If one existed, it is returned as stored: a stored workload never
            changes.

        Raises:
            Conflict: A workload stored under ``key`` is another program (its TVMScript differs).
        """
        values = {
            "key": key,
            "name": name,
            "params": params,
            "tvmscript": tvmscript,
            "flops": flops,
            "source": source,
        }
        with self._sessions.begin() as session:
            row = self._get_or_insert(session, Workload, values)
            if row.tvmscript != tvmscript:
                raise Conflict(
                    f"workload {key} is stored as another program; a stored workload never changes"
                )
            return _workload_info(row)

    def ensure_target(self, *, key: str, kind: str, target_json: dict[str, Any]) -> TargetInfo:
        """Return the target stored under ``key``, inserting it first if there is none.

        Args:
            key: The string that identifies the target (e.g. its canonical TVM target string).
            kind: The target kind (``llvm``, ``cuda``, ...).
            target_json: TVM's JSON export of the target.

        Returns:
            The stored target. If one existed, it is returned as stored.
        """
        values = {"key": key, "kind": kind, "target_json": target_json}
        with self._sessions.begin() as session:
            row = self._get_or_insert(session, Target, values)
            return _target_info(row)

    def ensure_device(self, fingerprint: dict[str, Any]) -> int:
        """Return the id of the device with this fingerprint, inserting it first if there is none.

        Args:
            fingerprint: What identifies the machine (CPU model, GPU, driver, ...), as JSON-able
                data. Devices are keyed by the sha256 of its canonical JSON, so key order does not
                matter.

        Returns:
            The device id.
        """
        canonical = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))
        key = hashlib.sha256(canonical.encode()).hexdigest()
        with self._sessions.begin() as session:
            return self._get_or_insert(session, Device, {"key": key, "fingerprint": fingerprint}).id

    def find_workload(self, key: str) -> WorkloadInfo | None:
        """Return the workload stored under ``key``, or ``None``."""
        with self._sessions.begin() as session:
            row = session.scalar(select(Workload).where(Workload.key == key))
            return None if row is None else _workload_info(row)

    def find_target(self, key: str) -> TargetInfo | None:
        """Return the target stored under ``key``, or ``None``."""
        with self._sessions.begin() as session:
            row = session.scalar(select(Target).where(Target.key == key))
            return None if row is None else _target_info(row)

    def record_batch(self, job_id: int, results: Sequence[CandidateResult]) -> int:
        """Store a batch of candidates a job measured, and update the best record.

        The whole batch is one transaction: either all of it is stored or, if anything fails,
        none of it. A result whose program hash is already stored for the job's workload and target
        (by this job, another job, or earlier in the same batch) is skipped, so recording the same
        batch twice changes nothing.

        Args:
            job_id: The job that measured the batch; its candidates get the job's workload and
                target.
            results: The measured candidates.

        Returns:
            The number of new measurements stored.

        Raises:
            NotFound: If there is no job ``job_id``.
            sqlalchemy.exc.IntegrityError: If a result breaks a constraint of the log, e.g. it names
                an unknown device or has a negative timing. Nothing of the batch is stored.
        """
        with self._sessions.begin() as session:
            job = session.get(TuningJob, job_id)
            if job is None:
                raise NotFound(f"no tuning job with id {job_id}")
            subject = (job.workload_id, job.target_id)
            measurements: list[NewMeasurement] = []
            for item in results:
                candidate_id = session.scalar(
                    self._insert(Candidate)
                    .values(
                        job_id=job_id,
                        workload_id=job.workload_id,
                        target_id=job.target_id,
                        trace_json=item.trace_json,
                        program_hash=item.program_hash,
                        predicted_score=item.predicted_score,
                        created_at=utcnow(),
                        state=CandidateState.MEASURED,
                    )
                    .on_conflict_do_nothing(
                        index_elements=["workload_id", "target_id", "program_hash"]
                    )
                    .returning(Candidate.id)
                )
                if candidate_id is not None:
                    measurements.append(
                        NewMeasurement(candidate_id, item.result, item.verified, item.device_id)
                    )
            stored = self.store_measurements(
                session, measurements, {m.candidate_id: subject for m in measurements}
            )
            return len(stored)

    def store_measurements(
        self,
        session: Session,
        measurements: Sequence[NewMeasurement],
        subjects: Mapping[int, tuple[int, int]],
    ) -> set[int]:
        """Store measurements of candidates in ``session``; returns the candidate ids stored.

        A candidate that already has a measurement of this log keeps it (the new one is dropped;
        measurements imported from other logs do not count), and each stored candidate becomes
        ``measured``. Each new measurement gets a new ``uid`` and its provenance (this autosched's
        version, its device's TVM and LLVM versions and machine, its candidate's job). The
        fastest verified, error-free measurement of each workload and target (``subjects`` maps a
        candidate id to its workload and target ids) is offered as their best record.
        """
        if not measurements:
            return set()
        provenance = self._provenance(session, measurements)
        rows = [
            {
                "uid": uuid.uuid4().hex,
                "candidate_id": item.candidate_id,
                "device_id": item.device_id,
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
                "provenance": provenance[item.candidate_id],
                "tvm_version": provenance[item.candidate_id]["tvm"],
            }
            for item in measurements
        ]
        stored = set(
            session.scalars(
                self._insert(Measurement)
                .values(rows)
                .on_conflict_do_nothing(
                    index_elements=["candidate_id"], index_where=Measurement.imported_at.is_(None)
                )
                .returning(Measurement.candidate_id)
            )
        )
        session.execute(
            update(Candidate)
            .where(Candidate.id.in_(stored))
            .values(state=CandidateState.MEASURED, lease_id=None)
            .execution_options(synchronize_session=False)
        )
        fastest: dict[tuple[int, int], tuple[float, int]] = {}
        for item in measurements:
            median = item.result.median
            if item.candidate_id not in stored or not item.verified or median is None:
                continue
            subject = subjects[item.candidate_id]
            if subject not in fastest or median < fastest[subject][0]:
                fastest[subject] = (median, item.candidate_id)
        for (workload_id, target_id), (median, candidate_id) in fastest.items():
            self.offer_best(session, workload_id, target_id, median, candidate_id)
        return stored

    def _provenance(
        self, session: Session, measurements: Sequence[NewMeasurement]
    ) -> dict[int, dict[str, Any]]:
        """The provenance of each new measurement of this log, by candidate id: its device's
        fingerprint and the job of its candidate."""
        candidate_ids = {item.candidate_id for item in measurements}
        device_ids = {item.device_id for item in measurements if item.device_id is not None}
        jobs = {
            row.id: row.job_id
            for row in session.execute(
                select(Candidate.id, Candidate.job_id).where(Candidate.id.in_(candidate_ids))
            )
        }
        fingerprints = {
            row.id: row.fingerprint
            for row in session.execute(
                select(Device.id, Device.fingerprint).where(Device.id.in_(device_ids))
            )
        }
        return {
            item.candidate_id: measurement_provenance(
                fingerprints.get(item.device_id) if item.device_id is not None else None,
                jobs.get(item.candidate_id),
            )
            for item in measurements
        }

    def best(self, workload_id: int, target_id: int) -> RecordView | None:
        """Return the best record of a workload and target, or ``None`` if there is none yet.

        Of several measurements of the best candidate (one of this log, others imported), the
        one that made it the best is returned.
        """
        with self._sessions.begin() as session:
            row = best_row(session, workload_id, target_id)
            return None if row is None else record_view(*row)

    def tuned_records(self, workload_id: int) -> list[TunedRecord]:
        """The best record of a workload on every target it has one for, ordered by target key,
        each with the fingerprint of the device that measured it."""
        query = (
            select(Target)
            .join(BestRecord, BestRecord.target_id == Target.id)
            .where(BestRecord.workload_id == workload_id)
            .order_by(Target.key)
        )
        tuned: list[TunedRecord] = []
        with self._sessions.begin() as session:
            for target in session.scalars(query).all():
                row = best_row(session, workload_id, target.id)
                if row is None:
                    continue
                device = None if row[1].device_id is None else session.get(Device, row[1].device_id)
                tuned.append(
                    TunedRecord(
                        _target_info(target),
                        record_view(*row),
                        None if device is None else device.fingerprint,
                    )
                )
        return tuned

    def machines(self, target_key: str) -> list[dict[str, Any]]:
        """The device fingerprints of the workers ever registered for the target ``target_key``:
        the machines that run it, for the nearest-hardware fallback."""
        devices = (
            select(Worker.device_id)
            .join(Target, Target.id == Worker.target_id)
            .where(Target.key == target_key)
        )
        query = select(Device.fingerprint).where(Device.id.in_(devices)).order_by(Device.id)
        with self._sessions.begin() as session:
            return list(session.scalars(query))

    def records(
        self,
        workload_id: int,
        target_id: int,
        *,
        ok_only: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[RecordView]:
        """Return the measured candidates of a workload and target.

        Args:
            workload_id: The workload.
            target_id: The target.
            ok_only: Only error-free timings, fastest first (verified or not). Otherwise every
                measurement, in the order the candidates were stored.
            limit: At most this many records.
            offset: Skip this many records first.

        Returns:
            The records, in the order described above.
        """
        query = _record_query().where(
            Candidate.workload_id == workload_id, Candidate.target_id == target_id
        )
        if ok_only:
            query = query.where(
                Measurement.error_kind.is_(None), Measurement.median_secs.is_not(None)
            ).order_by(Measurement.median_secs, Candidate.id)
        else:
            query = query.order_by(Candidate.id)
        with self._sessions.begin() as session:
            rows = session.execute(query.limit(limit).offset(offset))
            return [record_view(*row) for row in rows]

    def failure_cause(self, job_id: int) -> str | None:
        """The most frequent kind of failure among a job's measurements, in one line: the kind,
        how many of the job's measurements failed so, and the first line of the latest such
        error; None where none failed."""
        rows = self._job_failures(job_id)
        if not rows:
            return None
        kinds = Counter(kind for kind, _message in rows)
        kind, count = kinds.most_common(1)[0]
        message = next(message for each, message in reversed(rows) if each == kind) or ""
        first_line = message.strip().splitlines()[0] if message.strip() else "no message"
        return f"{kind} ({count} of {len(rows)} failures): {first_line[:300]}"

    def _job_failures(self, job_id: int) -> list[tuple[str, str | None]]:
        query = (
            select(Measurement.error_kind, Measurement.error_msg)
            .join(Candidate, Candidate.id == Measurement.candidate_id)
            .where(Candidate.job_id == job_id, Measurement.error_kind.is_not(None))
            .order_by(Measurement.id)
        )
        with self._sessions.begin() as session:
            return [(str(kind), message) for kind, message in session.execute(query)]

    def count_records(self, workload_id: int, target_id: int) -> int:
        """How many measured candidates a workload and target have."""
        query = (
            select(func.count(Measurement.id))
            .join(Candidate, Candidate.id == Measurement.candidate_id)
            .where(Candidate.workload_id == workload_id, Candidate.target_id == target_id)
        )
        with self._sessions.begin() as session:
            return session.scalar(query) or 0

    def summary(self) -> list[SummaryRow]:
        """Return one row per workload and target that has candidates, ordered by their keys.

        Returns:
            For each pair: the best latency (``None`` without a best record), the number of
            measurements (``trials``), how many of them failed, and the workload's flops.
        """
        counts = (
            select(
                Candidate.workload_id,
                Candidate.target_id,
                func.count(Measurement.id).label("trials"),
                func.count(Measurement.error_kind).label("failed"),
            )
            .outerjoin(Measurement, Measurement.candidate_id == Candidate.id)
            .group_by(Candidate.workload_id, Candidate.target_id)
            .subquery()
        )
        latest_final = (
            select(func.max(FinalistTiming.id).label("id"))
            .group_by(FinalistTiming.candidate_id)
            .subquery()
        )
        retimed = (
            select(FinalistTiming)
            .join(latest_final, latest_final.c.id == FinalistTiming.id)
            .subquery()
        )
        query = (
            select(
                Workload,
                Target,
                BestRecord.median_secs,
                counts.c.trials,
                counts.c.failed,
                retimed.c.median_secs,
                retimed.c.ci_low_secs,
                retimed.c.ci_high_secs,
            )
            .join_from(counts, Workload, Workload.id == counts.c.workload_id)
            .join(Target, Target.id == counts.c.target_id)
            .outerjoin(
                BestRecord,
                and_(
                    BestRecord.workload_id == counts.c.workload_id,
                    BestRecord.target_id == counts.c.target_id,
                ),
            )
            .outerjoin(retimed, retimed.c.candidate_id == BestRecord.candidate_id)
            .order_by(Workload.key, Target.key)
        )
        with self._sessions.begin() as session:
            return [
                SummaryRow(
                    workload_key=workload.key,
                    workload_name=workload.name,
                    workload_params=workload.params,
                    target_key=target.key,
                    target_json=target.target_json,
                    best_latency_secs=best,
                    trials=trials,
                    failed=failed,
                    flops=workload.flops,
                    retimed_secs=median,
                    retimed_low_secs=low,
                    retimed_high_secs=high,
                )
                for workload, target, best, trials, failed, median, low, high in session.execute(
                    query
                )
            ]

    def _get_or_insert(
        self, session: Session, model: type[_Keyed], values: dict[str, Any]
    ) -> _Keyed:
        """Select the row with ``values["key"]``, inserting it first if missing (race-safe)."""
        query = select(model).where(model.key == values["key"])
        row = session.scalar(query)
        if row is None:
            session.execute(
                self._insert(model)
                .values(**values, created_at=utcnow())
                .on_conflict_do_nothing(index_elements=["key"])
            )
            row = session.scalars(query).one()
        return row

    def workload_by_id(self, session: Session, workload_id: int) -> WorkloadInfo:
        """The workload with primary key ``workload_id``, read in ``session``."""
        row = session.get(Workload, workload_id)
        assert row is not None, f"no workload {workload_id}"
        return _workload_info(row)

    def offer_best(
        self, session: Session, workload_id: int, target_id: int, median: float, candidate_id: int
    ) -> None:
        """Make the candidate the best record of a workload and target (in ``session``) unless
        the current one is at least as fast."""
        self.set_best(session, workload_id, target_id, median, candidate_id, only_if_faster=True)

    def set_best(
        self,
        session: Session,
        workload_id: int,
        target_id: int,
        median: float,
        candidate_id: int,
        *,
        only_if_faster: bool = False,
    ) -> None:
        """Make the candidate the best record of a workload and target (in ``session``); with
        ``only_if_faster``, only when its median beats the current best's."""
        insert = self._insert(BestRecord).values(
            workload_id=workload_id,
            target_id=target_id,
            candidate_id=candidate_id,
            median_secs=median,
            updated_at=utcnow(),
        )
        session.execute(
            insert.on_conflict_do_update(
                index_elements=["workload_id", "target_id"],
                set_={
                    "candidate_id": insert.excluded.candidate_id,
                    "median_secs": insert.excluded.median_secs,
                    "updated_at": insert.excluded.updated_at,
                },
                where=BestRecord.median_secs > insert.excluded.median_secs
                if only_if_faster
                else None,
            )
        )


def _workload_info(row: Workload) -> WorkloadInfo:
    return WorkloadInfo(
        id=row.id,
        key=row.key,
        name=row.name,
        params=row.params,
        tvmscript=row.tvmscript,
        flops=row.flops,
        source=row.source,
    )


def _target_info(row: Target) -> TargetInfo:
    return TargetInfo(id=row.id, key=row.key, kind=row.kind, target_json=row.target_json)


def best_row(
    session: Session, workload_id: int, target_id: int
) -> tuple[Candidate, Measurement] | None:
    """The best candidate of a workload and target with the measurement that made it the best."""
    query = (
        _record_query()
        .join(BestRecord, BestRecord.candidate_id == Candidate.id)
        .where(BestRecord.workload_id == workload_id, BestRecord.target_id == target_id)
        .order_by(_made_best(), Measurement.id)
        .limit(1)
    )
    row = session.execute(query).one_or_none()
    return None if row is None else (row[0], row[1])


def _made_best() -> Any:
    """An ordering that puts first, of a best candidate's measurements, the one that made it the
    best record (its median), then its other verified timings."""
    return case(
        (
            and_(Measurement.verified.is_(True), Measurement.median_secs == BestRecord.median_secs),
            0,
        ),
        (and_(Measurement.verified.is_(True), Measurement.median_secs.is_not(None)), 1),
        else_=2,
    )


def _record_query() -> Select[tuple[Candidate, Measurement]]:
    return select(Candidate, Measurement).join(
        Measurement, Measurement.candidate_id == Candidate.id
    )


def record_view(candidate: Candidate, measurement: Measurement) -> RecordView:
    """A candidate and its measurement as the rest of autosched reads them."""
    return RecordView(
        candidate_id=candidate.id,
        trace_json=candidate.trace_json,
        program_hash=candidate.program_hash,
        median_secs=measurement.median_secs,
        samples=tuple(measurement.samples),
        error_kind=None if measurement.error_kind is None else ErrorKind(measurement.error_kind),
        error_msg=measurement.error_msg,
        verified=measurement.verified,
        job_id=candidate.job_id,
        measured_at=measurement.finished_at,
        tvm_version=measurement.tvm_version,
        imported=measurement.imported_at is not None,
    )
