"""The bodies of the worker protocol: registration, leases of candidates or of a job's final, and
the reports of their measurements, with the in-process records (``autosched.records``) that the
worker daemon and the lease queue pass."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import AwareDatetime, BaseModel, Field, StrictBool, StrictInt, model_validator

from autosched.finals.ranking import MAX_FINALISTS, MAX_ROUNDS
from autosched.protocol.common import (
    MAX_LEASE,
    FromRecord,
    Id,
    Latency,
    RequestBody,
    Seconds,
    read,
    to_record,
)
from autosched.records import (
    ErrorKind,
    Lease,
    MeasureResult,
    ReportedResult,
    ReportOutcome,
    RetimedEntrant,
)


class WorkerRegister(RequestBody):
    """A worker daemon announcing itself: the exact target it measures and its device."""

    name: str = Field(min_length=1, max_length=255)
    target: dict[str, Any]
    fingerprint: dict[str, Any] = Field(max_length=64)


class WorkerPublic(BaseModel):
    """A registered worker; it must heartbeat more often than every ``lease_secs``."""

    id: int
    lease_secs: float


class LeaseRequest(RequestBody):
    n: StrictInt = Field(1, ge=1, le=MAX_LEASE, description="Candidates wanted at most.")


class WorkloadRefPublic(BaseModel):
    name: str
    params: dict[str, Any]
    key: str
    source: str | None


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


class LeasePublic(FromRecord):
    """Candidates, or one job's final, held by a worker until ``expires_at``; heartbeats extend
    it."""

    id: int
    worker_id: int
    expires_at: datetime
    candidates: list[LeasedCandidatePublic]
    final: LeasedFinalPublic | None = None

    def to_lease(self) -> Lease:
        return to_record(self, Lease)


class ResultIn(RequestBody):
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
        """The wire form of ``reported``: its measurement's fields beside its candidate's."""
        return read(
            cls, reported.result, candidate_id=reported.candidate_id, verified=reported.verified
        )

    def to_reported(self) -> ReportedResult:
        return ReportedResult(self.candidate_id, to_record(self, MeasureResult), self.verified)


class ReportRequest(RequestBody):
    results: list[ResultIn] = Field(max_length=MAX_LEASE)


class ReportOutcomePublic(FromRecord):
    """What became of a report: stored, ignored (measured already, or not the lease's), requeued
    or poisoned."""

    stored: int
    ignored: int
    requeued: int
    poisoned: int

    def to_outcome(self) -> ReportOutcome:
        return to_record(self, ReportOutcome)


class RetimedIn(RequestBody):
    """An entrant of a final as the worker timed it: its samples (none: its output was wrong,
    or it no longer built or ran) and whether its output was checked here and matched."""

    candidate_id: Id
    samples: list[Latency] = Field(default_factory=list, max_length=MAX_ROUNDS)
    verified: StrictBool = False

    @classmethod
    def of(cls, entrant: RetimedEntrant) -> RetimedIn:
        return read(cls, entrant)

    def to_entrant(self) -> RetimedEntrant:
        return to_record(self, RetimedEntrant)


class FinalReportRequest(RequestBody):
    entrants: list[RetimedIn] = Field(max_length=MAX_FINALISTS + 1)


class FinalReportPublic(BaseModel):
    """Whether the report was taken: false where the lease no longer holds the final (a retry,
    or a lease that expired meanwhile), which then changed nothing."""

    taken: bool


class ReleasePublic(BaseModel):
    """How many candidates of a released lease went back to the queue."""

    released: int
