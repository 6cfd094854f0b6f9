"""Plain-data records that cross module boundaries: measurement outcomes, what the tuning log
holds (workloads, targets, measured candidates, jobs) as the rest of autosched reads it.

They carry no TVM or SQL objects, so they travel between processes and over HTTP as they are.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, TypedDict

BASELINE_TRACE = "[[],[]]"
"""The trace of the unscheduled program: it replays to the workload as written (the untuned
program, every job's baseline)."""


def compiled_schedule(default_schedule: str | None, untuned_best: bool) -> str:
    """What a model's task compiles with: "tuned", "untuned" (its own untuned program beat every
    tuned candidate) or "default" (TVM's default schedule: it was not tuned, and
    ``default_schedule`` says why)."""
    if default_schedule is not None:
        return "default"
    return "untuned" if untuned_best else "tuned"


SPACE_EXHAUSTED = "exhausted"
"""How a job's stop reason begins when its design space held no program it had not measured:
more trials of that workload and target would measure nothing new."""


class ErrorKind(str, Enum):
    """Why a candidate has no valid timing."""

    BUILD = "build"  # lowering or code generation failed
    BUILD_TIMEOUT = "build_timeout"  # the build step ran past its time limit
    RUN = "run"  # the program raised an error while running
    RUN_TIMEOUT = "run_timeout"  # the program ran past its time limit
    CRASH = "crash"  # the measuring process died (segfault, abort, out of memory)
    INCORRECT = "incorrect"  # the program ran but its result differs from the reference
    # a replayed log (autosched.replay) holds no measurement of the program: nothing ran
    UNRECORDED = "unrecorded"


@dataclass(frozen=True)
class MeasureResult:
    """The outcome of building and timing one candidate.

    ``samples`` holds every timed repeat in seconds (empty on error); candidates rank by the median.
    """

    samples: tuple[float, ...] = ()
    error_kind: ErrorKind | None = None
    error_msg: str | None = None
    build_secs: float | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None and bool(self.samples)

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.ok else None


@dataclass(frozen=True)
class CandidateResult:
    """One measured candidate as the tuning log stores it.

    ``verified`` is true when the candidate's output was checked against the reference and matched;
    only verified, error-free results may become the best record of a workload and target.
    """

    trace_json: str
    program_hash: str
    result: MeasureResult
    predicted_score: float | None = None
    verified: bool = False
    device_id: int | None = None


@dataclass(frozen=True)
class RecordView:
    """A measured candidate read back from the log.

    ``tvm_version`` is the TVM version it was measured with (None: not recorded); ``imported``
    whether the measurement came from another log (``autosched log import``).
    """

    candidate_id: int
    trace_json: str
    program_hash: str
    median_secs: float | None
    samples: tuple[float, ...]
    error_kind: ErrorKind | None
    error_msg: str | None
    verified: bool
    job_id: int | None
    measured_at: datetime | None
    tvm_version: str | None = None
    imported: bool = False

    @property
    def result(self) -> MeasureResult:
        """The measurement as a search strategy hears it."""
        if self.error_kind is not None or not self.samples:
            return MeasureResult(
                error_kind=self.error_kind or ErrorKind.RUN, error_msg=self.error_msg
            )
        return MeasureResult(samples=self.samples)


@dataclass(frozen=True)
class SummaryRow:
    """One tuned workload x target pair, as `autosched log` lists it.

    ``retimed_secs`` is the best record's median when a job's final last timed it again, with its
    confidence interval ``retimed_low_secs`` to ``retimed_high_secs`` (None: never re-timed).
    """

    workload_key: str
    workload_name: str
    workload_params: dict[str, object]
    target_key: str
    target_json: dict[str, object]
    best_latency_secs: float | None
    trials: int
    failed: int
    flops: float | None = None
    retimed_secs: float | None = None
    retimed_low_secs: float | None = None
    retimed_high_secs: float | None = None


@dataclass(frozen=True)
class WorkloadRef:
    """Enough to rebuild a workload in another process or on another machine.

    Built-in workloads travel as name and parameters; a user's workload carries its program as
    ``source``, TVM IR JSON (never TVMScript). ``key`` is the workload's portable key, checked
    after rebuilding.
    """

    name: str
    params: dict[str, object]
    key: str
    source: str | None = None


class SearchSettings(TypedDict):
    """How a job searches: its budget of ``trials``, measured ``batch_size`` a batch, by the
    search ``strategy``, from the random ``seed`` (None: not reproducible)."""

    trials: int
    batch_size: int
    strategy: str
    seed: int | None


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
    best_confirmed: bool = False  # the best and baseline are its final's re-timed medians
    cost_model_id: int | None = None  # the shared cost model version its search started from
    stop_reason: str | None = None  # why it ended before spending its budget
    baseline_latency_secs: float | None = None  # the untuned program's, once measured
    final: FinalProgress | None = None  # a service job's final, where it has one


@dataclass(frozen=True)
class ModelTaskProgress:
    """A task of a model job: its weight, the records of the log it reuses (0: it is tuned),
    the rounds and trials its tuning jobs were given and have measured (its final apart), its
    workload's best and untuned latencies on the model's target (once its final has timed both,
    their two re-timed medians), and why it keeps TVM's default schedule if it does (its
    workload is not admitted, or its search failed)."""

    position: int
    name: str
    weight: int
    workload_key: str | None
    reused_records: int
    rounds: int
    trials: int
    best_secs: float | None
    baseline_secs: float | None
    default_schedule: str | None


@dataclass(frozen=True)
class ModelRoundRecord:
    """A round of a model job: the tuning job of its task (a position) and, once that job
    ended, what the task scheduler learnt from it (``recorded``)."""

    id: int
    position: int
    task: int
    job_id: int
    trials: int
    recorded: bool
    measured: int
    best_secs: float | None
    task_finished: bool
    problem: str | None


@dataclass(frozen=True)
class ModelJobProgress:
    """A model job as its submitter follows it: its tasks and rounds, and the model's estimated
    latency (the sum of weight x latency over the tasks whose untuned latency is known), with the
    tasks' best schedules and untuned. Each tuned task's final times its ``finalists`` fastest
    candidates again in ``final_rounds`` (0 finalists: none)."""

    id: int
    name: str
    target: TargetInfo
    inputs: list[dict[str, Any]]
    trials: int
    batch_size: int
    strategy: str
    seed: int | None
    finalists: int
    final_rounds: int
    status: JobStatus
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    reason: str | None
    output_check: dict[str, Any] | None
    tasks: tuple[ModelTaskProgress, ...]
    rounds: tuple[ModelRoundRecord, ...]

    @property
    def trials_done(self) -> int:
        return sum(task.trials for task in self.tasks)

    @property
    def estimated(self) -> list[ModelTaskProgress]:
        return [task for task in self.tasks if task.baseline_secs is not None]

    @property
    def estimated_secs(self) -> float | None:
        tasks = self.estimated
        pairs = [(task.weight, task.best_secs or task.baseline_secs) for task in tasks]
        return weighted_latency(pairs) if tasks else None

    @property
    def untuned_secs(self) -> float | None:
        tasks = self.estimated
        return weighted_latency([(t.weight, t.baseline_secs) for t in tasks]) if tasks else None


def weighted_latency(tasks: Sequence[tuple[int, float | None]]) -> float:
    """A model's estimated latency: the sum of weight x latency over its ``tasks``."""
    return sum(weight * (latency or 0.0) for weight, latency in tasks)


# The worker protocol's messages, in-process (``autosched.protocol`` has their wire form).


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
class FinalEntrant:
    """A candidate of a final; one never ``verified`` must have its output checked first."""

    candidate_id: int
    trace_json: str
    verified: bool


@dataclass(frozen=True)
class LeasedFinal:
    """The final of job ``job_id``: its ``entrants`` timed again side by side in ``rounds``
    rounds on one machine; outputs are checked on inputs drawn from ``seed``."""

    final_id: int
    job_id: int
    workload: WorkloadRef
    target: dict
    rounds: int
    seed: int
    entrants: list[FinalEntrant]


@dataclass(frozen=True)
class Lease:
    """Candidates, or one final, held by worker ``worker_id`` until ``expires_at``; heartbeats
    extend it."""

    id: int
    worker_id: int
    expires_at: datetime
    candidates: list[LeasedCandidate]
    final: LeasedFinal | None = None


@dataclass(frozen=True)
class RetimedEntrant:
    """A worker's re-timing of an entrant of a final: its samples (none: its output was wrong,
    or it no longer built or ran) and whether its output was checked and matched."""

    candidate_id: int
    samples: tuple[float, ...]
    verified: bool


@dataclass(frozen=True)
class FinalProgress:
    """Where a service job's final stands: ``state`` (``pending``, ``queued``, ``leased``,
    ``timed``, ``skipped`` or ``failed``), how many finalists and rounds, and why it was skipped
    or failed."""

    state: str
    finalists: int
    rounds: int
    reason: str | None = None


@dataclass(frozen=True)
class ReportedResult:
    """A worker's measurement of a leased candidate; ``verified`` if checked against the
    reference."""

    candidate_id: int
    result: MeasureResult
    verified: bool


@dataclass(frozen=True)
class ReportOutcome:
    """What became of a report: stored, ignored (measured already, or not the lease's), requeued
    or poisoned."""

    stored: int
    ignored: int
    requeued: int
    poisoned: int


@dataclass(frozen=True)
class TunedRecord:
    """The best record of a workload on one target, with the fingerprint of the device that
    measured it (None: not known), as the nearest-hardware fallback weighs it."""

    target: TargetInfo
    record: RecordView
    device: dict[str, Any] | None
