"""The bodies of tuning jobs: the submission, a job's progress with its curve and its final, and
its measurements."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictInt, StrictStr, model_validator

from autosched.finals.ranking import FINALISTS, MAX_FINALISTS, MAX_ROUNDS, ROUNDS, Finalist
from autosched.protocol.common import (
    MAX_BATCH,
    MAX_ID,
    MAX_PROGRAM_JSON,
    MAX_TRIALS,
    FromRecord,
    RequestBody,
    SearchRequest,
    Strategy,
    TargetPublic,
    WorkloadPublic,
    read,
)
from autosched.records import BASELINE_TRACE, ErrorKind, JobProgress, JobStatus
from autosched.search.registry import DEFAULT_STRATEGY


class WorkloadIn(RequestBody):
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


class JobCreate(SearchRequest):
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
        interval = finalist.interval
        return read(
            cls,
            finalist,
            interval_secs=(interval.low, interval.high),
            confidence=interval.confidence,
            untuned=finalist.trace_json == BASELINE_TRACE,
        )


class FinalPublic(FromRecord):
    """The final of a service job: ``pending`` while it searches, ``queued`` and ``leased`` once
    its trials are measured, then ``timed``, ``skipped`` (fewer than two entrants) or
    ``failed`` (``reason`` says why); the job ends when its final has."""

    state: Literal["pending", "queued", "leased", "timed", "skipped", "failed"]
    finalists: int
    rounds: int
    reason: str | None


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
        return read(
            cls,
            job,
            curve=[CurvePoint(trials=n, best_latency_secs=secs) for n, secs in job.curve],
            finalists=[FinalistPublic.of(finalist) for finalist in finalists],
        )


class JobsPublic(BaseModel):
    """A page of jobs, newest first; ``count`` is the number of jobs in all."""

    data: list[JobPublic]
    count: int


class JobMeasurementPublic(FromRecord):
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
