"""The tuning log: stores workloads, targets, jobs and measured candidates in SQLite or PostgreSQL.

All SQL lives here; the tables are described in ``models.py`` and created by the Alembic migrations.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from types import TracebackType
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from alembic.util.exc import CommandError
from sqlalchemy import (
    Engine,
    Select,
    and_,
    create_engine,
    event,
    func,
    inspect,
    make_url,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from autosched.errors import UserError
from autosched.log.models import (
    BestRecord,
    Candidate,
    Device,
    Measurement,
    Target,
    TuningJob,
    Workload,
    utcnow,
)
from autosched.records import CandidateResult, ErrorKind, RecordView, SummaryRow, WorkloadRef

_Keyed = TypeVar("_Keyed", Workload, Target, Device)

_SQLITE_BUSY_TIMEOUT_MS = 30_000
# Alembic keeps the running migration's context in module globals: one migration per process.
_MIGRATION_LOCK = threading.Lock()
# Any constant works; it only has to be the same for every process that migrates a log.
_PG_MIGRATION_LOCK = 0x6175746F73636864
# The table holding the log's schema revision. Alembic's default, ``alembic_version``, belongs to
# Optuna's RDB storage, whose studies live in the same database; logs written before the rename
# are moved over when opened.
VERSION_TABLE = "autosched_version"
_LEGACY_VERSION_TABLE = "alembic_version"
_LEGACY_REVISIONS = ("0001", "0002")


def default_db_url() -> str:
    """The tuning log's URL: ``$AUTOSCHED_DB``, else ``autosched.db`` in the working directory."""
    return os.environ.get("AUTOSCHED_DB") or "sqlite:///autosched.db"


class JobStatus(str, Enum):
    """Where a tuning job stands; every status but QUEUED and RUNNING is final.

    QUEUED: submitted to the service, no engine has taken it up yet.
    """

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self not in (JobStatus.QUEUED, JobStatus.RUNNING)


@dataclass(frozen=True)
class WorkloadInfo:
    """A workload as stored in the log."""

    id: int
    key: str
    name: str
    params: dict[str, Any]
    tvmscript: str
    flops: float | None
    source: str | None = None

    @property
    def ref(self) -> WorkloadRef:
        """What a measuring process needs to rebuild this workload."""
        return WorkloadRef(self.name, dict(self.params), self.key, self.source)


@dataclass(frozen=True)
class TargetInfo:
    """A target as stored in the log."""

    id: int
    key: str
    kind: str
    target_json: dict[str, Any]


@dataclass(frozen=True)
class JobInfo:
    """A tuning job with the number of measurements recorded for it so far."""

    id: int
    workload_id: int
    target_id: int
    trials: int
    batch_size: int
    strategy: str
    seed: int | None
    status: JobStatus
    started_at: datetime | None
    finished_at: datetime | None
    measured: int
    failed: int


class TuningLog:
    """The record of every tuning job and measured candidate, in SQLite or PostgreSQL.

    Contract:
        * Opening a log brings its schema up to date (Alembic ``upgrade head``); opening an
          up-to-date log changes nothing. Several processes may open the same log at once.
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
        url: A SQLAlchemy URL (``sqlite:///path.db``, ``postgresql+psycopg://user@host/db``; a bare
            ``postgresql://`` uses psycopg 3). ``None`` means ``default_db_url()``.

    Raises:
        UserError: If the URL is malformed or names an unsupported backend, if the database
            cannot be reached, or if its schema cannot be brought up to date (e.g. it was written
            by a newer autosched). The message is one line.
    """

    def __init__(self, url: str | None = None) -> None:
        self._url = default_db_url() if url is None else url
        self._engine = _create_engine(self._url)
        try:
            _upgrade_schema(self._engine)
        except (DBAPIError, CommandError) as exc:
            self._engine.dispose()
            reason = str(exc.orig) if isinstance(exc, DBAPIError) else str(exc)
            raise UserError(
                f"cannot open tuning log {_display(self._url)}: {_one_line(reason)}"
            ) from exc
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        self._insert = _INSERTS[self._engine.dialect.name]

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
        """Sessions on the log's database, for stores that share it (``autosched.log.queue``)."""
        return self._sessions

    @property
    def insert(self) -> Callable[[Any], Any]:
        """The dialect's INSERT construct, which offers ``on_conflict_do_nothing``/``_update``."""
        return self._insert

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
            The stored workload. If one existed, it is returned as stored and the other arguments
            are ignored.
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

    def start_job(
        self,
        *,
        workload_id: int,
        target_id: int,
        trials: int,
        batch_size: int,
        strategy: str,
        seed: int | None,
        cost_model_id: int | None = None,
    ) -> int:
        """Record a tuning job that starts now, with status RUNNING.

        Args:
            workload_id: The workload to tune (from ``ensure_workload``).
            target_id: The target to tune for (from ``ensure_target``).
            trials: The budget: how many candidates to measure (>= 0).
            batch_size: How many candidates are measured per batch (>= 1).
            strategy: The name of the search strategy.
            seed: The random seed, if the run is meant to be reproducible.
            cost_model_id: The shared cost model version its search starts from, if any.

        Returns:
            The job id.

        Raises:
            sqlalchemy.exc.IntegrityError: If the workload or target does not exist, or ``trials``
                or ``batch_size`` is out of range.
        """
        now = utcnow()
        job = TuningJob(
            workload_id=workload_id,
            target_id=target_id,
            trials=trials,
            batch_size=batch_size,
            strategy=strategy,
            seed=seed,
            status=JobStatus.RUNNING.value,
            created_at=now,
            started_at=now,
            cost_model_id=cost_model_id,
        )
        with self._sessions.begin() as session:
            session.add(job)
            session.flush()
            return job.id

    def end_job(self, job_id: int, status: JobStatus) -> None:
        """Mark a job as ended now, with a final status.

        Args:
            job_id: The job.
            status: A final status.

        Raises:
            ValueError: If ``status`` is not final.
            UserError: If there is no job ``job_id``.
        """
        if not status.final:
            raise ValueError(f"end_job needs a final status, not {status.name}")
        with self._sessions.begin() as session:
            ended = session.execute(
                update(TuningJob)
                .where(TuningJob.id == job_id)
                .values(status=status.value, finished_at=utcnow())
            )
            if ended.rowcount == 0:
                raise UserError(f"no tuning job with id {job_id}")

    def measured_hashes(self, workload_id: int, target_id: int) -> set[str]:
        """Return the program hashes already measured for a workload and target, by any job."""
        with self._sessions.begin() as session:
            hashes = session.scalars(
                select(Candidate.program_hash).where(
                    Candidate.workload_id == workload_id, Candidate.target_id == target_id
                )
            )
            return set(hashes)

    def record_batch(self, job_id: int, results: Sequence[CandidateResult]) -> int:
        """Store a batch of measured candidates of a job, and update the best record.

        The whole batch is one transaction: either all of it is stored or, if anything fails,
        none of it. A result whose program hash is already stored for the job's workload and target
        (by this job, another job, or earlier in the same batch) is skipped, so recording the same
        batch twice changes nothing. Afterwards, if the fastest verified, error-free result among
        the stored ones is strictly faster than the current best record, it becomes the best.

        Args:
            job_id: The job that measured the batch; its candidates get the job's workload and
                target.
            results: The measured candidates.

        Returns:
            The number of new measurements stored.

        Raises:
            UserError: If there is no job ``job_id``.
            sqlalchemy.exc.IntegrityError: If a result breaks a constraint of the log, e.g. it names
                an unknown device or has a negative timing. Nothing of the batch is stored.
        """
        with self._sessions.begin() as session:
            job = session.get(TuningJob, job_id)
            if job is None:
                raise UserError(f"no tuning job with id {job_id}")
            fastest: tuple[float, int] | None = None
            stored = 0
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
                    )
                    .on_conflict_do_nothing(
                        index_elements=["workload_id", "target_id", "program_hash"]
                    )
                    .returning(Candidate.id)
                )
                if candidate_id is None:
                    continue
                result = item.result
                median = result.median
                session.add(
                    Measurement(
                        candidate_id=candidate_id,
                        device_id=item.device_id,
                        samples=list(result.samples),
                        median_secs=median,
                        error_kind=None if result.error_kind is None else result.error_kind.value,
                        error_msg=result.error_msg,
                        verified=item.verified,
                        build_secs=result.build_secs,
                        started_at=result.started_at,
                        finished_at=result.finished_at,
                    )
                )
                stored += 1
                if (
                    item.verified
                    and median is not None
                    and (fastest is None or median < fastest[0])
                ):
                    fastest = (median, candidate_id)
            session.flush()
            if fastest is not None:
                self.offer_best(session, job.workload_id, job.target_id, *fastest)
            return stored

    def best(self, workload_id: int, target_id: int) -> RecordView | None:
        """Return the best record of a workload and target, or ``None`` if there is none yet."""
        query = (
            _record_query()
            .join(BestRecord, BestRecord.candidate_id == Candidate.id)
            .where(BestRecord.workload_id == workload_id, BestRecord.target_id == target_id)
        )
        with self._sessions.begin() as session:
            row = session.execute(query).one_or_none()
            return None if row is None else record_view(*row)

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
        query = (
            select(Workload, Target, BestRecord.median_secs, counts.c.trials, counts.c.failed)
            .join_from(counts, Workload, Workload.id == counts.c.workload_id)
            .join(Target, Target.id == counts.c.target_id)
            .outerjoin(
                BestRecord,
                and_(
                    BestRecord.workload_id == counts.c.workload_id,
                    BestRecord.target_id == counts.c.target_id,
                ),
            )
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
                )
                for workload, target, best, trials, failed in session.execute(query)
            ]

    def job(self, job_id: int) -> JobInfo:
        """Return a tuning job with its measurement counts.

        Raises:
            UserError: If there is no job ``job_id``.
        """
        counts = (
            select(func.count(Measurement.id), func.count(Measurement.error_kind))
            .join(Candidate, Candidate.id == Measurement.candidate_id)
            .where(Candidate.job_id == job_id)
        )
        with self._sessions.begin() as session:
            job = session.get(TuningJob, job_id)
            if job is None:
                raise UserError(f"no tuning job with id {job_id}")
            measured, failed = session.execute(counts).one()
            return JobInfo(
                id=job.id,
                workload_id=job.workload_id,
                target_id=job.target_id,
                trials=job.trials,
                batch_size=job.batch_size,
                strategy=job.strategy,
                seed=job.seed,
                status=JobStatus(job.status),
                started_at=job.started_at,
                finished_at=job.finished_at,
                measured=measured,
                failed=failed,
            )

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
        """Make the candidate the best record unless the current one is at least as fast.

        For stores that share this log's database (``autosched.log.queue``): runs in ``session``.
        """
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
                where=BestRecord.median_secs > insert.excluded.median_secs,
            )
        )


_INSERTS: dict[str, Callable[[Any], Any]] = {
    "postgresql": postgresql.insert,
    "sqlite": sqlite.insert,
}


def _create_engine(url: str) -> Engine:
    """Create the engine for ``url``; SQLite connections get WAL, foreign keys, a busy timeout."""
    try:
        parsed = make_url(url)
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        if parsed.get_backend_name() not in _INSERTS:
            raise UserError(
                f"unsupported tuning log database {parsed.get_backend_name()!r} in {_display(url)};"
                " use sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
            )
        engine = create_engine(parsed, pool_pre_ping=True)
    except ArgumentError as exc:  # also raised for an unknown driver (NoSuchModuleError)
        raise UserError(f"bad tuning log URL {_display(url)}: {_one_line(str(exc))}") from exc
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _configure_sqlite)
        event.listen(engine, "begin", _begin_immediate)
    return engine


def _configure_sqlite(dbapi_connection: Any, _record: object) -> None:
    # SQLAlchemy's documented recipe: the sqlite3 module must not issue BEGIN on its own (lazily,
    # DEFERRED, not before DDL); the "begin" event below does it instead.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def _begin_immediate(connection: Connection) -> None:
    # IMMEDIATE takes the write lock up front, so a transaction that reads and then writes never
    # fails with SQLITE_BUSY half-way; with WAL, readers in other connections are not blocked.
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _upgrade_schema(engine: Engine) -> None:
    """Run the Alembic migrations up to head, in one transaction."""
    config = Config()
    config.set_main_option("script_location", "autosched.log:migrations")
    with _MIGRATION_LOCK, engine.connect() as connection:
        sqlite_connection = (
            connection.connection.driver_connection if engine.dialect.name == "sqlite" else None
        )
        if sqlite_connection is not None:
            # SQLite alters a table by copying it; foreign keys must be off while it does, and
            # only outside a transaction can they be turned off (SQLite's ALTER TABLE recipe).
            sqlite_connection.execute("PRAGMA foreign_keys = OFF")
        try:
            with connection.begin():
                if connection.dialect.name == "postgresql":
                    # Processes opening a fresh database at once would both create the tables.
                    connection.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
                    )
                _adopt_legacy_version_table(connection)
                config.attributes["connection"] = connection
                config.attributes["version_table"] = VERSION_TABLE
                command.upgrade(config, "head")
                if sqlite_connection is not None:
                    violations = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                    if violations:
                        raise CommandError(f"foreign keys broken by the migration: {violations}")
        finally:
            if sqlite_connection is not None:
                sqlite_connection.execute("PRAGMA foreign_keys = ON")


def _adopt_legacy_version_table(connection: Connection) -> None:
    """Move a log's revision out of ``alembic_version`` (where logs kept it before Optuna's studies
    joined them) into VERSION_TABLE."""
    tables = set(inspect(connection).get_table_names())
    if _LEGACY_VERSION_TABLE not in tables or VERSION_TABLE in tables:
        return
    legacy = text(f"SELECT version_num FROM {_LEGACY_VERSION_TABLE}")
    revisions = [row[0] for row in connection.execute(legacy)]
    if len(revisions) != 1 or revisions[0] not in _LEGACY_REVISIONS:
        return  # Optuna's own revision: not ours to move
    connection.execute(
        text(
            f"CREATE TABLE {VERSION_TABLE} (version_num VARCHAR(32) NOT NULL, "
            f"CONSTRAINT {VERSION_TABLE}_pkc PRIMARY KEY (version_num))"
        )
    )
    connection.execute(
        text(f"INSERT INTO {VERSION_TABLE} (version_num) VALUES (:revision)"),
        {"revision": revisions[0]},
    )
    connection.execute(text(f"DROP TABLE {_LEGACY_VERSION_TABLE}"))


def _display(url: str) -> str:
    """The URL with any password masked, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return repr(url)


def _one_line(message: str) -> str:
    return " ".join(message.split()) or "unknown error"


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
    )
