"""The wire protocol of the tuning service: the REST API's request and response bodies (pydantic),
shared by the server, the HTTP client and the workers, with conversions to and from the records
that the stores and the worker daemon pass in-process (``autosched.records``).

Nothing here imports TVM, SQL or FastAPI, so a worker or a client loads only this, the records,
the list of strategy names and pydantic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from autosched.finalists import FINALISTS, MAX_FINALISTS, MAX_ROUNDS, ROUNDS, Finalist
from autosched.model import ROUND_TRIALS
from autosched.records import (
    BASELINE_TRACE,
    ErrorKind,
    FinalEntrant,
    FinalProgress,
    JobProgress,
    JobStatus,
    Lease,
    LeasedCandidate,
    LeasedFinal,
    MeasureResult,
    ModelJobProgress,
    ModelTaskProgress,
    RecordView,
    ReportedResult,
    ReportOutcome,
    RetimedEntrant,
    SummaryRow,
    TargetInfo,
    WorkloadInfo,
    WorkloadRef,
)
from autosched.search.registry import DEFAULT_STRATEGY, STRATEGY_NAMES

MAX_ID = 2**31 - 1  # ids and seeds are 32-bit integers in the database
MAX_TRIALS = 100_000
MAX_BATCH = 4096
MAX_LEASE = 1024
MAX_PAGE = 1000
MAX_PROGRAM_JSON = 8 << 20  # characters; the request body limit is usually lower
# Request fields take JSON numbers and booleans as they are: "8" or true is no integer.
Id = Annotated[StrictInt, Field(ge=1, le=MAX_ID)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Latency = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Strategy = Literal[STRATEGY_NAMES]  # type: ignore[valid-type]  # the registry's names


def problem_line(problems: Sequence[Mapping[str, Any]], *, skip: int = 0) -> str:
    """The first of pydantic's validation ``problems`` as one line: where, and what is wrong.

    ``skip`` leaves out the first parts of each location (FastAPI's ``body`` or ``query``).
    """
    first = problems[0]
    if first["type"] == "json_invalid":
        line = f"the request body is not valid JSON: {first.get('ctx', {}).get('error', '')}"
    else:
        where = ".".join(str(part) for part in first["loc"][skip:]) or "the request body"
        line = f"{where}: {str(first['msg']).removeprefix('Value error, ')}"
    return line if len(problems) == 1 else f"{line} (and {len(problems) - 1} more)"


class _Request(BaseModel):
    """Request bodies refuse fields they do not know, so a typo is an error, not a default."""

    model_config = ConfigDict(extra="forbid")


# Jobs.


class WorkloadIn(_Request):
    """A built-in workload (``name`` and ``params``) or a user's PrimFunc as TVM IR JSON
    (``ir_json``, from ``tvm.ir.save_json``; `autosched submit --file` converts a TVMScript file
    on the machine that holds it). TVMScript itself is refused: TVM's parser runs it as Python."""

    name: str | None = Field(None, min_length=1, max_length=128)
    params: dict[str, StrictInt | StrictStr] = Field(default_factory=dict, max_length=32)
    ir_json: str | None = Field(None, min_length=1, max_length=MAX_PROGRAM_JSON)
    tvmscript: str | None = Field(
        None, description="Refused: send ir_json. Kept to say so clearly.", max_length=0
    )

    @model_validator(mode="before")
    @classmethod
    def _no_tvmscript(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("tvmscript") is not None:
            raise ValueError(
                "TVMScript is not accepted over the network (TVM's parser runs it as Python); "
                "send ir_json, the program as tvm.ir.save_json writes it "
                "(autosched submit --file converts a TVMScript file on your machine)"
            )
        return data

    @model_validator(mode="after")
    def _one_kind(self) -> WorkloadIn:
        if self.ir_json is None and self.name is None:
            raise ValueError("give the name of a built-in workload, or ir_json")
        if self.ir_json is not None and self.params:
            raise ValueError("params set a built-in workload; an ir_json workload takes none")
        return self


class JobCreate(_Request):
    """A tuning job to queue.

    ``target`` is a kind (``"llvm"``, ``"cuda"``), meaning the exact target the live workers of
    that kind run, or a full target JSON object.
    """

    workload: WorkloadIn
    target: Annotated[str, Field(min_length=1, max_length=4096)] | dict[str, Any] = "llvm"
    trials: StrictInt = Field(64, ge=1, le=MAX_TRIALS)
    batch_size: StrictInt = Field(64, ge=1, le=MAX_BATCH)
    strategy: Strategy = DEFAULT_STRATEGY
    seed: StrictInt | None = Field(None, ge=0, le=MAX_ID)
    finalists: StrictInt = Field(
        FINALISTS,
        ge=0,
        le=MAX_FINALISTS,
        description="How many of the fastest candidates one worker times again at the end, "
        "side by side with the untuned program (0: none).",
    )
    rounds: StrictInt = Field(ROUNDS, ge=1, le=MAX_ROUNDS, description="Rounds of that timing.")


class WorkloadPublic(BaseModel):
    key: str
    name: str
    params: dict[str, Any]
    flops: float | None

    @classmethod
    def of(cls, info: WorkloadInfo) -> WorkloadPublic:
        return cls(key=info.key, name=info.name, params=info.params, flops=info.flops)


class TargetPublic(BaseModel):
    key: str
    kind: str
    target_json: dict[str, Any]

    @classmethod
    def of(cls, info: TargetInfo) -> TargetPublic:
        return cls(key=info.key, kind=info.kind, target_json=info.target_json)


class CurvePoint(BaseModel):
    """The best verified latency once ``trials`` candidates of the job were measured."""

    trials: int
    best_latency_secs: float


class FinalistPublic(BaseModel):
    """A finalist of a job, timed again side by side with the others at its end; ``tie`` when its
    interval overlaps the winner's (the first finalist)."""

    program_hash: str
    first_median_secs: float = Field(description="Its median when the search measured it.")
    median_secs: float = Field(description="The median of its re-timed samples.")
    interval_secs: tuple[float, float] = Field(description="The confidence interval of that.")
    confidence: float
    samples: list[float]
    tie: bool
    untuned: bool = Field(description="Whether it is the untuned program, the reference.")

    @classmethod
    def of(cls, finalist: Finalist) -> FinalistPublic:
        return cls(
            program_hash=finalist.program_hash,
            first_median_secs=finalist.first_median_secs,
            median_secs=finalist.median_secs,
            interval_secs=(finalist.interval.low, finalist.interval.high),
            confidence=finalist.interval.confidence,
            samples=list(finalist.samples),
            tie=finalist.tie,
            untuned=finalist.trace_json == BASELINE_TRACE,
        )


class FinalPublic(BaseModel):
    """The final of a service job: ``pending`` while it searches, ``queued`` and ``leased`` once
    its trials are measured, then ``timed``, ``skipped`` (fewer than two entrants) or
    ``failed`` (``reason`` says why); the job ends when its final has."""

    state: Literal["pending", "queued", "leased", "timed", "skipped", "failed"]
    finalists: int
    rounds: int
    reason: str | None

    @classmethod
    def of(cls, final: FinalProgress) -> FinalPublic:
        return cls.model_validate(
            {
                "state": final.state,
                "finalists": final.finalists,
                "rounds": final.rounds,
                "reason": final.reason,
            }
        )


class JobPublic(BaseModel):
    """A job and its progress; ``best_latency_secs`` is the best of its workload on its target:
    the single-shot best record, one worker's word, until its final has timed its winner again
    (``best_confirmed``), then that re-timed median (and the untuned program's as the baseline)."""

    id: int
    workload: WorkloadPublic
    target: TargetPublic
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
    curve: list[CurvePoint]
    best_confirmed: bool = Field(
        False,
        description="Whether the best and untuned latencies are the re-timed medians of the "
        "job's final (else single shots, each from one worker).",
    )
    cost_model_id: int | None = Field(
        None, description="The shared cost model version the job's search started from."
    )
    stop_reason: str | None = Field(
        None, description="Why the job ended before spending its budget, if it did."
    )
    baseline_latency_secs: float | None = Field(
        None, description="The untuned program's latency on the target, once measured."
    )
    finalists: list[FinalistPublic] = Field(
        default_factory=list,
        description="Its fastest candidates timed again at its end, the winner first (one job's "
        "answer only; a list of jobs leaves them out).",
    )
    final: FinalPublic | None = Field(
        None, description="Where the timing of its finalists stands (None: it has none)."
    )

    @classmethod
    def of(cls, job: JobProgress, finalists: Sequence[Finalist] = ()) -> JobPublic:
        return cls(
            id=job.id,
            workload=WorkloadPublic.of(job.workload),
            target=TargetPublic.of(job.target),
            trials=job.trials,
            batch_size=job.batch_size,
            strategy=job.strategy,
            seed=job.seed,
            status=job.status,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            trials_done=job.trials_done,
            failed=job.failed,
            best_latency_secs=job.best_latency_secs,
            curve=[CurvePoint(trials=n, best_latency_secs=secs) for n, secs in job.curve],
            best_confirmed=job.best_confirmed,
            cost_model_id=job.cost_model_id,
            stop_reason=job.stop_reason,
            baseline_latency_secs=job.baseline_latency_secs,
            finalists=[FinalistPublic.of(finalist) for finalist in finalists],
            final=None if job.final is None else FinalPublic.of(job.final),
        )


class JobsPublic(BaseModel):
    """A page of jobs, newest first; ``count`` is the number of jobs in all."""

    data: list[JobPublic]
    count: int


class JobMeasurementPublic(BaseModel):
    """A measurement of a job's candidate; ``trial`` counts as ``trials_done`` does (None for the
    untuned baseline). A failed one has an ``error_kind`` and no median."""

    candidate_id: int
    trial: int | None
    median_secs: float | None
    error_kind: ErrorKind | None
    error_msg: str | None
    verified: bool
    measured_at: datetime | None


class JobMeasurementsPublic(BaseModel):
    """A page of a job's measurements in the order they were stored; ``count`` is the number in
    all."""

    data: list[JobMeasurementPublic]
    count: int


# Whole models.


class ModelJobCreate(_Request):
    """The form fields of a model upload, sent as multipart/form-data beside the ONNX ``file``.

    ``inputs`` fix the shapes the file leaves open (``NAME=DIMxDIM...[:DTYPE]``, one field per
    input); ``target`` is a kind (the exact target of its live workers) or target JSON; the
    ``trials`` are split across the model's tasks in rounds of at most ``batch_size``; once they
    are spent, one worker times each tuned task's ``finalists`` fastest candidates again, side by
    side with its untuned program, in ``final_rounds``. Other fields are refused, so a misspelt
    one is an error rather than a default.
    """

    file: Any = Field(
        None,
        exclude=True,
        description="The ONNX file: the form's file part, which the route reads itself.",
        json_schema_extra={"type": "string", "format": "binary"},
    )
    inputs: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=list, max_length=64
    )
    target: str = Field("llvm", min_length=1, max_length=4096)
    trials: int = Field(64, ge=1, le=MAX_TRIALS)
    batch_size: int = Field(ROUND_TRIALS, ge=1, le=MAX_BATCH)
    strategy: Strategy = DEFAULT_STRATEGY
    seed: int | None = Field(None, ge=0, le=MAX_ID)
    finalists: int = Field(
        FINALISTS,
        ge=0,
        le=MAX_FINALISTS,
        description="How many of each tuned task's fastest candidates one worker times again "
        "at the end, side by side with its untuned program (0: none; each task keeps its "
        "fastest single shot).",
    )
    final_rounds: int = Field(
        ROUNDS, ge=1, le=MAX_ROUNDS, description="Rounds of that timing, per task."
    )


class ModelTaskPublic(BaseModel):
    """A task of a model job: a fused kernel, its weight (calls per run of the model), the
    records it reuses instead of being tuned, its rounds and the trials they measured (its share
    of the budget), its best and untuned latencies (once its final has timed both, their two
    re-timed medians, side by side), and why it keeps TVM's default schedule if it does."""

    position: int
    name: str
    weight: int
    workload_key: str | None
    reused_records: int
    rounds: int
    trials: int
    best_latency_secs: float | None
    untuned_latency_secs: float | None
    default_schedule: str | None

    @classmethod
    def of(cls, task: ModelTaskProgress) -> ModelTaskPublic:
        return cls(
            position=task.position,
            name=task.name,
            weight=task.weight,
            workload_key=task.workload_key,
            reused_records=task.reused_records,
            rounds=task.rounds,
            trials=task.trials,
            best_latency_secs=task.best_secs,
            untuned_latency_secs=task.baseline_secs,
            default_schedule=task.default_schedule,
        )


class OutputCheckPublic(BaseModel):
    """How the compiled model's outputs compared with ``reference``'s on random inputs; when
    the check was not run (the server cannot run the target), ``reason`` says why."""

    ran: bool
    reference: str
    outputs: int | None = None
    max_abs_error: float | None = None
    reason: str | None = None


class ModelJobPublic(BaseModel):
    """A model job: its tasks and the split of its budget, and the model's estimated latency (the
    sum of weight x latency over the tasks whose untuned latency is known) tuned and untuned."""

    id: int
    name: str
    target: TargetPublic
    inputs: list[dict[str, Any]]
    status: JobStatus
    trials: int
    trials_done: int
    batch_size: int
    strategy: str
    seed: int | None
    finalists: int = Field(description="Candidates each tuned task's final times again.")
    final_rounds: int = Field(description="Rounds of each task's final.")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    reason: str | None = Field(description="Why it failed or stopped, if it did.")
    estimated_latency_secs: float | None
    untuned_latency_secs: float | None
    rounds: int
    round_job_id: int | None = Field(description="The tuning job of its current round.")
    output_check: OutputCheckPublic | None
    tasks: list[ModelTaskPublic]

    @classmethod
    def of(cls, job: ModelJobProgress) -> ModelJobPublic:
        current = next((r.job_id for r in job.rounds if not r.recorded), None)
        return cls(
            id=job.id,
            name=job.name,
            target=TargetPublic.of(job.target),
            inputs=job.inputs,
            status=job.status,
            trials=job.trials,
            trials_done=job.trials_done,
            batch_size=job.batch_size,
            strategy=job.strategy,
            seed=job.seed,
            finalists=job.finalists,
            final_rounds=job.final_rounds,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            reason=job.reason,
            estimated_latency_secs=job.estimated_secs,
            untuned_latency_secs=job.untuned_secs,
            rounds=sum(r.trials > 0 for r in job.rounds),
            round_job_id=current if not job.status.final else None,
            output_check=None
            if job.output_check is None
            else OutputCheckPublic.model_validate(job.output_check),
            tasks=[ModelTaskPublic.of(task) for task in job.tasks],
        )


class ModelJobsPublic(BaseModel):
    """A page of model jobs, newest first; ``count`` is the number in all."""

    data: list[ModelJobPublic]
    count: int


# Workloads and records.


class RecordPublic(BaseModel):
    """A measured candidate: its trace, and its timing (seconds) or its error."""

    candidate_id: int
    job_id: int | None
    program_hash: str
    trace_json: str
    median_secs: float | None
    samples: list[float]
    error_kind: ErrorKind | None
    error_msg: str | None
    verified: bool
    measured_at: datetime | None
    tvm_version: str | None = Field(None, description="The TVM version it was measured with.")
    imported: bool = Field(False, description="Whether it came from another log's file.")

    @classmethod
    def of(cls, view: RecordView) -> RecordPublic:
        return cls(
            candidate_id=view.candidate_id,
            job_id=view.job_id,
            program_hash=view.program_hash,
            trace_json=view.trace_json,
            median_secs=view.median_secs,
            samples=list(view.samples),
            error_kind=view.error_kind,
            error_msg=view.error_msg,
            verified=view.verified,
            measured_at=view.measured_at,
            tvm_version=view.tvm_version,
            imported=view.imported,
        )

    def to_view(self) -> RecordView:
        return RecordView(
            candidate_id=self.candidate_id,
            trace_json=self.trace_json,
            program_hash=self.program_hash,
            median_secs=self.median_secs,
            samples=tuple(self.samples),
            error_kind=self.error_kind,
            error_msg=self.error_msg,
            verified=self.verified,
            job_id=self.job_id,
            measured_at=self.measured_at,
            tvm_version=self.tvm_version,
            imported=self.imported,
        )


class RecordsPublic(BaseModel):
    """A page of records in the order they were stored; ``count`` is the number in all."""

    data: list[RecordPublic]
    count: int


class BestPublic(BaseModel):
    """The best verified schedule of a workload on a target, with its scheduled TVMScript.

    ``level`` says how near ``target`` (the target the record was tuned for) is to the one asked
    for: ``exact``, or with ``fallback=true`` ``device``, ``processor`` or ``isa``.
    """

    workload: WorkloadPublic
    target: TargetPublic
    record: RecordPublic
    tvmscript: str
    level: Literal["exact", "device", "processor", "isa"] = "exact"


class TunedTargetPublic(BaseModel):
    """How far a workload is tuned on one target."""

    target_key: str
    target_json: dict[str, Any]
    best_latency_secs: float | None
    trials: int
    failed: int
    retimed_latency_secs: float | None = Field(
        None, description="The best's median when a final last timed it again (null: never)."
    )
    retimed_interval_secs: tuple[float, float] | None = Field(
        None, description="The 95% confidence interval of that median."
    )


class WorkloadSummaryPublic(WorkloadPublic):
    """A workload with candidates in the log, and the targets it was tuned for."""

    targets: list[TunedTargetPublic]

    @classmethod
    def of_rows(cls, rows: list[SummaryRow]) -> WorkloadSummaryPublic:
        """The summary of one workload from its rows of ``TuningLog.summary()``."""
        first = rows[0]
        return cls(
            key=first.workload_key,
            name=first.workload_name,
            params=dict(first.workload_params),
            flops=first.flops,
            targets=[
                TunedTargetPublic(
                    target_key=row.target_key,
                    target_json=dict(row.target_json),
                    best_latency_secs=row.best_latency_secs,
                    trials=row.trials,
                    failed=row.failed,
                    retimed_latency_secs=row.retimed_secs,
                    retimed_interval_secs=None
                    if row.retimed_low_secs is None or row.retimed_high_secs is None
                    else (row.retimed_low_secs, row.retimed_high_secs),
                )
                for row in rows
            ],
        )


class WorkloadsPublic(BaseModel):
    data: list[WorkloadSummaryPublic]
    count: int


# The worker protocol.


class WorkerRegister(_Request):
    """A worker daemon announcing itself: the exact target it measures and its device."""

    name: str = Field(min_length=1, max_length=255)
    target: dict[str, Any]
    fingerprint: dict[str, Any] = Field(max_length=64)


class WorkerPublic(BaseModel):
    """A registered worker; it must heartbeat more often than every ``lease_secs``."""

    id: int
    lease_secs: float


class LeaseRequest(_Request):
    n: StrictInt = Field(1, ge=1, le=MAX_LEASE, description="Candidates wanted at most.")


class WorkloadRefPublic(BaseModel):
    name: str
    params: dict[str, Any]
    key: str
    source: str | None

    @classmethod
    def of(cls, ref: WorkloadRef) -> WorkloadRefPublic:
        return cls(name=ref.name, params=dict(ref.params), key=ref.key, source=ref.source)

    def to_ref(self) -> WorkloadRef:
        return WorkloadRef(self.name, dict(self.params), self.key, self.source)


class LeasedCandidatePublic(BaseModel):
    """A candidate to measure; results faster than ``best_latency_secs`` must be verified."""

    candidate_id: int
    job_id: int
    workload: WorkloadRefPublic
    target: dict[str, Any]
    trace_json: str
    best_latency_secs: float | None


class FinalEntrantPublic(BaseModel):
    """An entrant of a final; one not ``verified`` has its output checked before it is timed."""

    candidate_id: int
    trace_json: str
    verified: bool


class LeasedFinalPublic(BaseModel):
    """A job's final: its entrants timed again side by side, ``rounds`` rounds, on one machine;
    outputs are checked on inputs drawn from ``seed``."""

    final_id: int
    job_id: int
    workload: WorkloadRefPublic
    target: dict[str, Any]
    rounds: int
    seed: int
    entrants: list[FinalEntrantPublic]

    @classmethod
    def of(cls, final: LeasedFinal) -> LeasedFinalPublic:
        return cls(
            final_id=final.final_id,
            job_id=final.job_id,
            workload=WorkloadRefPublic.of(final.workload),
            target=final.target,
            rounds=final.rounds,
            seed=final.seed,
            entrants=[
                FinalEntrantPublic(
                    candidate_id=e.candidate_id, trace_json=e.trace_json, verified=e.verified
                )
                for e in final.entrants
            ],
        )

    def to_final(self) -> LeasedFinal:
        return LeasedFinal(
            final_id=self.final_id,
            job_id=self.job_id,
            workload=self.workload.to_ref(),
            target=self.target,
            rounds=self.rounds,
            seed=self.seed,
            entrants=[
                FinalEntrant(e.candidate_id, e.trace_json, e.verified) for e in self.entrants
            ],
        )


class LeasePublic(BaseModel):
    """Candidates, or one job's final, held by a worker until ``expires_at``; heartbeats extend
    it."""

    id: int
    worker_id: int
    expires_at: datetime
    candidates: list[LeasedCandidatePublic]
    final: LeasedFinalPublic | None = None

    @classmethod
    def of(cls, lease: Lease) -> LeasePublic:
        return cls(
            id=lease.id,
            worker_id=lease.worker_id,
            expires_at=lease.expires_at,
            final=None if lease.final is None else LeasedFinalPublic.of(lease.final),
            candidates=[
                LeasedCandidatePublic(
                    candidate_id=c.candidate_id,
                    job_id=c.job_id,
                    workload=WorkloadRefPublic.of(c.workload),
                    target=c.target,
                    trace_json=c.trace_json,
                    best_latency_secs=c.best_latency_secs,
                )
                for c in lease.candidates
            ],
        )

    def to_lease(self) -> Lease:
        return Lease(
            id=self.id,
            worker_id=self.worker_id,
            expires_at=self.expires_at,
            candidates=[
                LeasedCandidate(
                    candidate_id=c.candidate_id,
                    job_id=c.job_id,
                    workload=c.workload.to_ref(),
                    target=c.target,
                    trace_json=c.trace_json,
                    best_latency_secs=c.best_latency_secs,
                )
                for c in self.candidates
            ],
            final=None if self.final is None else self.final.to_final(),
        )


class ResultIn(_Request):
    """The measurement of one leased candidate: its timed repeats, or why there are none."""

    candidate_id: Id
    samples: list[Latency] = Field(default_factory=list, max_length=1000)
    error_kind: ErrorKind | None = None
    error_msg: str | None = Field(None, max_length=65536)
    verified: StrictBool = False
    build_secs: Seconds | None = None
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None

    @model_validator(mode="after")
    def _timed_or_failed(self) -> ResultIn:
        if self.error_kind is None and not self.samples:
            raise ValueError("a result needs samples or an error_kind")
        if self.error_kind is not None and self.verified:
            raise ValueError("a result with an error_kind cannot be verified")
        return self

    @classmethod
    def of(cls, reported: ReportedResult) -> ResultIn:
        result = reported.result
        return cls(
            candidate_id=reported.candidate_id,
            samples=list(result.samples),
            error_kind=result.error_kind,
            error_msg=result.error_msg,
            verified=reported.verified,
            build_secs=result.build_secs,
            started_at=result.started_at,
            finished_at=result.finished_at,
        )

    def to_reported(self) -> ReportedResult:
        result = MeasureResult(
            samples=tuple(self.samples),
            error_kind=self.error_kind,
            error_msg=self.error_msg,
            build_secs=self.build_secs,
            started_at=self.started_at,
            finished_at=self.finished_at,
        )
        return ReportedResult(self.candidate_id, result, self.verified)


class ReportRequest(_Request):
    results: list[ResultIn] = Field(max_length=MAX_LEASE)


class ReportOutcomePublic(BaseModel):
    """What became of a report: stored, ignored (measured already, or not the lease's), requeued
    or poisoned."""

    stored: int
    ignored: int
    requeued: int
    poisoned: int

    @classmethod
    def of(cls, outcome: ReportOutcome) -> ReportOutcomePublic:
        return cls(
            stored=outcome.stored,
            ignored=outcome.ignored,
            requeued=outcome.requeued,
            poisoned=outcome.poisoned,
        )

    def to_outcome(self) -> ReportOutcome:
        return ReportOutcome(self.stored, self.ignored, self.requeued, self.poisoned)


class RetimedIn(_Request):
    """An entrant of a final as the worker timed it: its samples (none: its output was wrong,
    or it no longer built or ran) and whether its output was checked here and matched."""

    candidate_id: Id
    samples: list[Latency] = Field(default_factory=list, max_length=MAX_ROUNDS)
    verified: StrictBool = False

    @classmethod
    def of(cls, entrant: RetimedEntrant) -> RetimedIn:
        return cls(
            candidate_id=entrant.candidate_id,
            samples=list(entrant.samples),
            verified=entrant.verified,
        )

    def to_entrant(self) -> RetimedEntrant:
        return RetimedEntrant(self.candidate_id, tuple(self.samples), self.verified)


class FinalReportRequest(_Request):
    entrants: list[RetimedIn] = Field(max_length=MAX_FINALISTS + 1)


class FinalReportPublic(BaseModel):
    """Whether the report was taken: false where the lease no longer holds the final (a retry,
    or a lease that expired meanwhile), which then changed nothing."""

    taken: bool


class ReleasePublic(BaseModel):
    """How many candidates of a released lease went back to the queue."""

    released: int


# What clients watch: workers, the queue, the shared cost models.


class WorkerStatusPublic(BaseModel):
    """A registered worker: ``alive`` while heard from within the server's worker timeout."""

    id: int
    name: str
    target: TargetPublic
    fingerprint: dict[str, Any] = Field(description="The device it measures on.")
    registered_at: datetime
    heartbeat_at: datetime
    alive: bool
    lease_id: int | None = Field(description="Its active lease, if it holds one.")
    leased: int = Field(description="Candidates it holds.")
    results_per_minute: int = Field(
        description="Measurements stored in the last minute from its device (workers on one "
        "device share the count)."
    )


class WorkersStatusPublic(BaseModel):
    """A page of workers, the most recently heard from first; ``count`` is the number in all."""

    data: list[WorkerStatusPublic]
    count: int


class TargetQueuePublic(BaseModel):
    """One target's queue."""

    target: TargetPublic
    queued: int
    leased: int
    workers_alive: int


class QueuePublic(BaseModel):
    """The service's queue per target, its throughput and its jobs by status."""

    targets: list[TargetQueuePublic]
    queued: int
    leased: int
    active_leases: int
    workers_alive: int
    results_per_second: float = Field(description="Over the last minute.")
    jobs_by_status: dict[str, int]


class CostModelPublic(BaseModel):
    """A version of a target family's shared cost model; ``scores`` holds its leave-workload-out
    evaluation (mean pairwise rank accuracy, top-1 and top-5 per model), if it was scored."""

    id: int
    family: str
    version: int
    objective: str
    features: str = Field(description="The feature definition it reads (per-store-164, ...).")
    created_at: datetime
    trained_on: int
    workloads: int
    scores: dict[str, Any] | None


class CostModelsPublic(BaseModel):
    """Cost model versions by family, then version."""

    data: list[CostModelPublic]
    count: int


# Health.


class Problem(BaseModel):
    """Every refusal and failure: one line saying what is wrong (and, where it helps, what would
    be right)."""

    detail: str


PROBLEMS: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem, "description": description}
    for code, description in {
        401: "No bearer token, or an unknown or revoked one (WWW-Authenticate: Bearer).",
        403: "A token of the other role, or another worker's token.",
        404: "What the request names is not in the tuning log.",
        409: "A target kind with no live worker, or several targets; a model job that failed.",
        413: "A body, or an uploaded model file, over the server's limit.",
        422: "Bad input: a body or parameter that does not validate, or a program not admitted.",
        503: "The tuning log's database is unreachable; retry after Retry-After seconds.",
    }.items()
}
"""The refusals every route may answer with, for the OpenAPI document."""


class HealthPublic(BaseModel):
    status: Literal["ok"] = "ok"


class TallyPublic(BaseModel):
    """Lines of one kind in an imported log file: stored anew, or there already."""

    new: int
    existing: int


class LogImportPublic(BaseModel):
    """What importing a portable log file brought in (``autosched log import``)."""

    workloads: TallyPublic
    targets: TallyPublic
    devices: TallyPublic
    measurements: TallyPublic
    best_records_offered: int
    other_tvm: int
    rekeyed: int
