"""The tuning log: workloads, targets, devices and measured candidates in SQLite or PostgreSQL.

``TuningLog`` opens the database (``db``) and stores what tuning measured; it answers the
queries of ``queries`` (`LogReads`). The service's job and lease stores (``jobs``, ``leases``),
the shared cost models (``costmodels``) and the API tokens (``tokens``) share its database and
sessions. Every measurement, measured here or reported by a
worker, is stored by ``TuningLog.store_measurements``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from alembic.util.exc import CommandError
from sqlalchemy import select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from autosched.closing import Closing
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
from autosched.log.queries import LogReads, target_info, workload_info
from autosched.log.tables import (
    BestRecord,
    Candidate,
    CandidateState,
    Device,
    Measurement,
    Target,
    TuningJob,
    Workload,
    utcnow,
)
from autosched.records import (
    CandidateResult,
    MeasureResult,
    TargetInfo,
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


class TuningLog(LogReads, Closing):
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
            return workload_info(row)

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
            return target_info(row)

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


class LogStore:
    """The base of the stores of some of the log's tables (jobs, leases, tokens, ...): they run
    their transactions on the log's sessions, one a method unless it takes a session."""

    def __init__(self, log: TuningLog) -> None:
        self._log = log
        self._sessions = log.sessions
