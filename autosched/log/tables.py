"""The tables of the tuning log, as SQLAlchemy declarative classes: columns, keys, constraints and
indexes.

The Alembic migrations in ``migrations/`` create the schema; the stores beside this module
(``store``, ``jobs``, ``leases``, ``costmodels``, ``tokens``) query it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import Enum
from typing import Annotated, Any

from sqlalchemy import (
    JSON,
    CheckConstraint,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy import (
    Enum as SqlEnum,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from autosched.finals.ranking import FINALISTS, ROUNDS

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC."""
    return datetime.now(timezone.utc)


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always read back timezone-aware.

    SQLite keeps no zone, so values are converted to UTC on the way in and tagged UTC on the way
    out.
    A naive datetime is taken as local time, as ``datetime.astimezone`` does.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.astimezone(timezone.utc)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


class CandidateState(str, Enum):
    """Where a candidate stands in the service's queue (see ``Candidate``)."""

    QUEUED = "queued"
    LEASED = "leased"
    MEASURED = "measured"
    POISONED = "poisoned"


class FinalState(str, Enum):
    """Where the final of a service job stands (see ``Final``)."""

    PENDING = "pending"
    QUEUED = "queued"
    LEASED = "leased"
    TIMED = "timed"
    SKIPPED = "skipped"
    FAILED = "failed"

    @property
    def ended(self) -> bool:
        return self in (FinalState.TIMED, FinalState.SKIPPED, FinalState.FAILED)


class LeaseState(str, Enum):
    """A lease is active until its worker reports or releases it, or it expires unreported."""

    ACTIVE = "active"
    REPORTED = "reported"
    EXPIRED = "expired"


def _state_column(enum: type[Enum]) -> SqlEnum:
    """A state stored as its value in a VARCHAR(16), checked by the table's own constraint."""
    return SqlEnum(
        enum,
        native_enum=False,
        create_constraint=False,
        length=16,
        values_callable=lambda members: [member.value for member in members],
    )


IntPk = Annotated[int, mapped_column(primary_key=True)]
Key = Annotated[str, mapped_column(String(512), unique=True)]
Name = Annotated[str, mapped_column(String(255))]
CreatedAt = Annotated[datetime, mapped_column(default=utcnow)]
JsonDict = dict[str, Any]


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 (read by SQLAlchemy at class creation)
        datetime: UtcDateTime(),
        JsonDict: JSON(),
        list[float]: JSON(),
    }


class Workload(Base):
    """A tensor program to tune; ``key`` is a portable hash of its definition."""

    __tablename__ = "workloads"

    id: Mapped[IntPk]
    key: Mapped[Key]
    name: Mapped[Name]
    params: Mapped[JsonDict]
    tvmscript: Mapped[str] = mapped_column(Text)
    flops: Mapped[float | None]
    created_at: Mapped[CreatedAt]
    # The user's TVMScript for workloads that are not built in (rebuilt from name and params).
    source: Mapped[str | None] = mapped_column(Text)


class Target(Base):
    """A compilation target (``llvm -mcpu=...``, ``cuda``, ...) as TVM describes it in JSON."""

    __tablename__ = "targets"

    id: Mapped[IntPk]
    key: Mapped[Key]
    kind: Mapped[Name]
    target_json: Mapped[JsonDict]
    created_at: Mapped[CreatedAt]


class Device(Base):
    """A machine that measures candidates; ``key`` is the sha256 of its canonical fingerprint."""

    __tablename__ = "devices"

    id: Mapped[IntPk]
    key: Mapped[str] = mapped_column(String(64), unique=True)
    fingerprint: Mapped[JsonDict]
    created_at: Mapped[CreatedAt]


def _search_checks() -> tuple[CheckConstraint, ...]:
    """The checks of a job's status and search budget, the same on tuning and model jobs."""
    return (
        CheckConstraint(
            "status IN ('queued', 'running', 'finished', 'interrupted', 'failed', 'cancelled')",
            name="status",
        ),
        CheckConstraint("trials >= 0", name="trials"),
        CheckConstraint("batch_size >= 1", name="batch_size"),
    )


class TuningJob(Base):
    """One tuning run of a workload on a target, with its trial budget and outcome."""

    __tablename__ = "tuning_jobs"
    __table_args__ = (
        *_search_checks(),
        Index(None, "workload_id", "target_id"),
        Index(None, "owner", "status"),
        Index(None, "status", "target_id"),
    )

    id: Mapped[IntPk]
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"))
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id"))
    trials: Mapped[int]
    batch_size: Mapped[int]
    strategy: Mapped[Name]
    seed: Mapped[int | None]
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[CreatedAt]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    # The search engine driving the job and until when its claim holds (service jobs only).
    engine_id: Mapped[str | None] = mapped_column(String(64))
    engine_expires_at: Mapped[datetime | None]
    # The shared cost model version the job's search started from (None: it started cold).
    cost_model_id: Mapped[int | None] = mapped_column(ForeignKey("cost_models.id"))
    # Why the job ended before spending its budget (None: it spent it, or it has not ended).
    stop_reason: Mapped[str | None] = mapped_column(String(255))
    # The principal of the client token that submitted it (None: stored before jobs had owners,
    # or run by `autosched tune`; only an admin sees it).
    owner: Mapped[str | None] = mapped_column(String(64))


class Candidate(Base):
    """A scheduled program, identified per workload and target by the hash of its lowered code.

    ``state`` follows a candidate through the service's queue: ``queued`` (waiting for a worker),
    ``leased`` (held by ``lease_id``), then ``measured`` (it has a measurement) or ``poisoned``
    (it killed its measuring process twice; never handed out again). Candidates measured on one
    machine are ``measured`` from the start. ``queue_position`` orders the queue so that jobs
    take turns; ``strikes`` counts measuring processes lost while measuring it.
    """

    __tablename__ = "candidates"
    __table_args__ = (
        UniqueConstraint("workload_id", "target_id", "program_hash"),
        CheckConstraint("state IN ('queued', 'leased', 'measured', 'poisoned')", name="state"),
        Index(None, "state", "target_id", "queue_position"),
        Index(None, "job_id", "state", "queue_position"),
    )

    id: Mapped[IntPk]
    job_id: Mapped[int | None] = mapped_column(ForeignKey("tuning_jobs.id"), index=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"))
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id"))
    trace_json: Mapped[str] = mapped_column(Text)
    program_hash: Mapped[str] = mapped_column(String(128))
    predicted_score: Mapped[float | None]
    created_at: Mapped[CreatedAt]
    # the server defaults are those the columns were added with, for the rows already there
    state: Mapped[CandidateState] = mapped_column(
        _state_column(CandidateState),
        default=CandidateState.MEASURED,
        server_default=CandidateState.MEASURED.value,
    )
    lease_id: Mapped[int | None] = mapped_column(ForeignKey("leases.id"), index=True)
    queue_position: Mapped[int | None]
    strikes: Mapped[int] = mapped_column(default=0, server_default="0")


class Worker(Base):
    """A worker daemon that measures candidates for one target on one device."""

    __tablename__ = "workers"

    id: Mapped[IntPk]
    name: Mapped[Name]
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id"))
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    registered_at: Mapped[CreatedAt]
    heartbeat_at: Mapped[datetime]
    # The token it registered with: only that token may act for it (None: a server without auth).
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id"))


class Lease(Base):
    """Candidates handed to a worker until ``expires_at``; the worker's heartbeat extends it."""

    __tablename__ = "leases"
    __table_args__ = (
        CheckConstraint("state IN ('active', 'reported', 'expired')", name="state"),
        Index(None, "state", "expires_at"),
    )

    id: Mapped[IntPk]
    worker_id: Mapped[int] = mapped_column(ForeignKey("workers.id"), index=True)
    created_at: Mapped[CreatedAt]
    expires_at: Mapped[datetime]
    state: Mapped[LeaseState] = mapped_column(_state_column(LeaseState))


class Final(Base):
    """The final of a service job: its fastest candidates and its untuned program timed again,
    side by side, by one worker (see ``autosched.finals.retiming``).

    ``state`` is ``pending`` while the job searches, ``queued`` once its ``entrants`` (candidate
    ids, the untuned program last) are chosen, ``leased`` while a worker times them (held by
    ``lease_id``), then ``timed`` (its finalists are stored), ``skipped`` (fewer than two entrants)
    or ``failed`` (``reason`` says why). ``strikes`` counts measuring processes lost timing it.
    """

    __tablename__ = "finals"
    __table_args__ = (
        CheckConstraint(
            "state IN ('pending', 'queued', 'leased', 'timed', 'skipped', 'failed')", name="state"
        ),
        CheckConstraint("finalists >= 1", name="finalists"),
        CheckConstraint("rounds >= 1", name="rounds"),
        Index(None, "state"),
    )

    id: Mapped[IntPk]
    job_id: Mapped[int] = mapped_column(ForeignKey("tuning_jobs.id"), unique=True)
    finalists: Mapped[int]
    rounds: Mapped[int]
    state: Mapped[FinalState] = mapped_column(_state_column(FinalState))
    entrants: Mapped[list[int] | None] = mapped_column(JSON)
    lease_id: Mapped[int | None] = mapped_column(ForeignKey("leases.id"), index=True)
    strikes: Mapped[int] = mapped_column(default=0)
    reason: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[CreatedAt]
    finished_at: Mapped[datetime | None]


class ApiToken(Base):
    """A bearer token of the REST API, stored as its sha256; ``role`` is client, worker or admin."""

    __tablename__ = "api_tokens"
    __table_args__ = (CheckConstraint("role IN ('client', 'worker', 'admin')", name="role"),)

    id: Mapped[IntPk]
    name: Mapped[Name]
    role: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[CreatedAt]
    revoked_at: Mapped[datetime | None]


_MEASURED_HERE = text("imported_at IS NULL")


class Measurement(Base):
    """The timing (or the error) of one candidate; an error row has no median.

    ``uid`` identifies the measurement in every log it travels to (``autosched log export`` and
    ``import``); ``imported_at`` is when it came from another log (None: measured for this one).
    A candidate has at most one measurement of this log, and any number imported. ``provenance``
    says where and with what it was measured (versions, machine, job; see
    ``autosched.log.provenance``); ``tvm_version`` repeats its TVM version for queries.
    """

    __tablename__ = "measurements"
    __table_args__ = (
        CheckConstraint("median_secs IS NULL OR median_secs >= 0", name="median_secs"),
        CheckConstraint("error_kind IS NULL OR median_secs IS NULL", name="error_has_no_median"),
        Index(None, "median_secs"),
        Index(
            "uq_measurements_local_candidate_id",
            "candidate_id",
            unique=True,
            sqlite_where=_MEASURED_HERE,
            postgresql_where=_MEASURED_HERE,
        ),
    )

    id: Mapped[IntPk]
    uid: Mapped[str] = mapped_column(String(32), unique=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id"), index=True)
    device_id: Mapped[int | None] = mapped_column(ForeignKey("devices.id"))
    samples: Mapped[list[float]]
    median_secs: Mapped[float | None]
    error_kind: Mapped[str | None] = mapped_column(String(32))
    error_msg: Mapped[str | None] = mapped_column(Text)
    verified: Mapped[bool]
    build_secs: Mapped[float | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    provenance: Mapped[JsonDict | None]
    tvm_version: Mapped[str | None] = mapped_column(String(64))
    imported_at: Mapped[datetime | None]


class BestRecord(Base):
    """The fastest verified, error-free candidate of each workload and target."""

    __tablename__ = "best_records"

    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"), primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id"), primary_key=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id"))
    median_secs: Mapped[float]
    updated_at: Mapped[datetime]


class CostModel(Base):
    """One version of a target family's shared cost model, trained on the whole tuning log.

    ``family`` names the targets whose measurements it learns from (``llvm:sapphirerapids``,
    ``cuda:sm_90``); ``version`` counts up per family. ``features`` names the feature definition
    it reads (an ``extractor`` of `CandidateFeatures`). ``last_measurement_id`` is the newest
    measurement it was trained on; ``scores`` holds its leave-workload-out evaluation, if any.
    ``booster`` is the serialised XGBoost model.
    """

    __tablename__ = "cost_models"
    __table_args__ = (UniqueConstraint("family", "version"),)

    id: Mapped[IntPk]
    family: Mapped[Name]
    version: Mapped[int]
    objective: Mapped[str] = mapped_column(String(32))
    features: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[CreatedAt]
    trained_on: Mapped[int]
    workloads: Mapped[int]
    last_measurement_id: Mapped[int]
    scores: Mapped[JsonDict | None]
    booster: Mapped[bytes] = mapped_column(LargeBinary)


class CandidateFeatures(Base):
    """A measured candidate's features, extracted once and reused by every model trained.

    ``extractor`` names the feature definition, so a new definition never mixes with old rows.
    """

    __tablename__ = "candidate_features"

    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id"), primary_key=True)
    extractor: Mapped[str] = mapped_column(String(64), primary_key=True)
    features: Mapped[bytes] = mapped_column(LargeBinary)


class FinalistTiming(Base):
    """A finalist of a job timed again at its end, side by side with the others (see
    ``autosched.finals.ranking``): every sample, their median with its confidence interval, its rank
    (1: the winner, which became the best record) and whether its interval overlaps the winner's.
    """

    __tablename__ = "finalist_timings"
    __table_args__ = (
        UniqueConstraint("job_id", "candidate_id"),
        CheckConstraint("rank >= 1", name="rank"),
    )

    id: Mapped[IntPk]
    job_id: Mapped[int] = mapped_column(ForeignKey("tuning_jobs.id"), index=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id"))
    device_id: Mapped[int | None] = mapped_column(ForeignKey("devices.id"))
    samples: Mapped[list[float]]
    first_median_secs: Mapped[float]
    median_secs: Mapped[float]
    ci_low_secs: Mapped[float]
    ci_high_secs: Mapped[float]
    confidence: Mapped[float]
    rank: Mapped[int]
    tie: Mapped[bool]
    created_at: Mapped[CreatedAt]


class TunedModel(Base):
    """A whole model tuned for a target (``autosched.model``), recorded once its compiled outputs
    matched its framework's: ``key`` hashes the model file and its input shapes; the estimates
    are the sum of weight x latency over its tasks, tuned and untuned; ``measured_secs`` and its
    interval the compiled model timed whole (``autosched.model.latency``; None where it was not:
    a model job, built on the server rather than a target machine)."""

    __tablename__ = "tuned_models"
    __table_args__ = (UniqueConstraint("key", "target_id"),)

    id: Mapped[IntPk]
    key: Mapped[str] = mapped_column(String(64))
    name: Mapped[Name]
    format: Mapped[str] = mapped_column(String(16))
    inputs: Mapped[JsonDict]
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id"))
    estimated_secs: Mapped[float]
    untuned_secs: Mapped[float]
    measured_secs: Mapped[float | None]
    measured_low_secs: Mapped[float | None]
    measured_high_secs: Mapped[float | None]
    reference: Mapped[Name]
    max_abs_error: Mapped[float]
    tuned_at: Mapped[CreatedAt]


class TunedModelTask(Base):
    """A task of a tuned model: its workload (none for one the admission refused), its weight
    (calls per run), and why it keeps TVM's default schedule if it does."""

    __tablename__ = "tuned_model_tasks"
    __table_args__ = (UniqueConstraint("model_id", "name"),)

    id: Mapped[IntPk]
    model_id: Mapped[int] = mapped_column(ForeignKey("tuned_models.id"), index=True)
    workload_id: Mapped[int | None] = mapped_column(ForeignKey("workloads.id"))
    name: Mapped[Name]
    weight: Mapped[int]
    default_schedule: Mapped[str | None] = mapped_column(Text)


class ModelJob(Base):
    """A whole model submitted to the service for tuning (``autosched.log.model_jobs``): the
    uploaded ONNX file itself (``onnx``, so that nothing depends on a server's memory), its inputs'
    static shapes, the target and the trial budget its rounds share, and the ``finalists`` each
    tuned task's final times again in ``final_rounds`` (0 finalists: no finals). ``status`` takes
    the values of a tuning job's; ``reason`` says why it failed or stopped; ``output_check`` how
    its compiled outputs compared with ONNX Runtime's, or why that check was not run."""

    __tablename__ = "model_jobs"
    __table_args__ = (
        *_search_checks(),
        CheckConstraint("finalists >= 0", name="finalists"),
        CheckConstraint("final_rounds >= 1", name="final_rounds"),
        Index(None, "owner", "status"),
    )

    id: Mapped[IntPk]
    name: Mapped[Name]
    onnx: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)
    inputs: Mapped[JsonDict]
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id"))
    trials: Mapped[int]
    batch_size: Mapped[int]
    strategy: Mapped[Name]
    seed: Mapped[int | None]
    finalists: Mapped[int] = mapped_column(server_default=str(FINALISTS))
    final_rounds: Mapped[int] = mapped_column(server_default=str(ROUNDS))
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[CreatedAt]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    reason: Mapped[str | None] = mapped_column(Text)
    output_check: Mapped[JsonDict | None]
    # The principal of the client token that submitted it (None: stored before model jobs had
    # owners; only an admin sees it).
    owner: Mapped[str | None] = mapped_column(String(64))


class ModelJobTask(Base):
    """A task of a model job, at ``position`` in the order of its extraction (heaviest first):
    its workload (none for one the admission refused, whose ``default_schedule`` says why), its
    weight, and the records of the log it reuses instead of being tuned (0: it is tuned)."""

    __tablename__ = "model_job_tasks"
    __table_args__ = (UniqueConstraint("model_job_id", "position"),)

    id: Mapped[IntPk]
    model_job_id: Mapped[int] = mapped_column(ForeignKey("model_jobs.id"), index=True)
    position: Mapped[int]
    name: Mapped[Name]
    weight: Mapped[int]
    workload_id: Mapped[int | None] = mapped_column(ForeignKey("workloads.id"))
    default_schedule: Mapped[str | None] = mapped_column(Text)
    reused_records: Mapped[int]


class ModelJobRound(Base):
    """A round of a model job: the tuning job (``job_id``) that tunes its task at ``task``
    (a position) for ``trials`` trials. Once that job ended, what the task scheduler learnt from
    it is kept (``recorded_at``): the trials it measured, the task's best latency then, and
    whether the task gets no more rounds (``task_finished``, with ``problem`` when its search
    failed). A round of no trials is the task's final, after its last round: its job times the
    task's fastest candidates again (``Final``)."""

    __tablename__ = "model_job_rounds"
    __table_args__ = (UniqueConstraint("model_job_id", "position"),)

    id: Mapped[IntPk]
    model_job_id: Mapped[int] = mapped_column(ForeignKey("model_jobs.id"), index=True)
    position: Mapped[int]
    task: Mapped[int]
    job_id: Mapped[int] = mapped_column(ForeignKey("tuning_jobs.id"), unique=True)
    trials: Mapped[int]
    measured: Mapped[int | None]
    best_secs: Mapped[float | None]
    task_finished: Mapped[bool | None]
    problem: Mapped[str | None] = mapped_column(Text)
    recorded_at: Mapped[datetime | None]
