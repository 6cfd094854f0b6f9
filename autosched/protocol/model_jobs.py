"""The bodies of model jobs: the form of a model upload, and a model job's progress with its
tasks and the check of its outputs."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field

from autosched.finals.ranking import FINALISTS, MAX_FINALISTS, MAX_ROUNDS, ROUNDS
from autosched.model import ROUND_TRIALS
from autosched.protocol.common import (
    MAX_BATCH,
    MAX_ID,
    MAX_TRIALS,
    SearchRequest,
    Strategy,
    TargetPublic,
    read,
)
from autosched.records import JobStatus, ModelJobProgress, ModelTaskProgress
from autosched.search.registry import DEFAULT_STRATEGY


class ModelJobCreate(SearchRequest):
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
        return read(
            cls, task, best_latency_secs=task.best_secs, untuned_latency_secs=task.baseline_secs
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
        return read(
            cls,
            job,
            estimated_latency_secs=job.estimated_secs,
            untuned_latency_secs=job.untuned_secs,
            rounds=sum(r.trials > 0 for r in job.rounds),
            round_job_id=current if not job.status.final else None,
            tasks=[ModelTaskPublic.of(task) for task in job.tasks],
        )


class ModelJobsPublic(BaseModel):
    """A page of model jobs, newest first; ``count`` is the number in all."""

    data: list[ModelJobPublic]
    count: int
