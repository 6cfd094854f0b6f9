"""The bodies of what clients watch: the workers, the queue per target, the shared cost models."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from autosched.protocol.common import FromRecord, TargetPublic


class WorkerStatusPublic(FromRecord):
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


class TargetQueuePublic(FromRecord):
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


class CostModelPublic(FromRecord):
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
