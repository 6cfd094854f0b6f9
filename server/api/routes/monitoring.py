"""What clients watch the service with: its workers, its queue per target, and the versions of the
shared cost models with their scores. Read-only, for client and admin tokens (the worker
protocol's routes under /workers are for worker tokens)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from autosched.log.costmodels import CostModelStore
from autosched.protocol import (
    CostModelPublic,
    CostModelsPublic,
    QueuePublic,
    TargetQueuePublic,
    WorkersStatusPublic,
    WorkerStatusPublic,
)
from autosched.protocol.common import read
from autosched.server.api.deps import LeasesDep, LogDep, PageDep, ReaderAuth

router = APIRouter(tags=["monitoring"], dependencies=[ReaderAuth])


@router.get("/workers")
def list_workers(
    leases: LeasesDep,
    page: PageDep,
) -> WorkersStatusPublic:
    """Registered workers, the most recently heard from first: target, device, last heartbeat,
    the lease in hand and recent results."""
    found, count = leases.workers(limit=page.limit, offset=page.offset)
    data = [
        read(WorkerStatusPublic, worker, results_per_minute=worker.device_results_last_minute)
        for worker in found
    ]
    return WorkersStatusPublic(data=data, count=count)


@router.get("/queue")
def queue(leases: LeasesDep) -> QueuePublic:
    """Queue depth per target, leases, live workers, results per second and jobs by status."""
    metrics = leases.metrics()
    return read(
        QueuePublic,
        metrics,
        targets=[TargetQueuePublic.of(item) for item in leases.queue_by_target()],
        results_per_second=metrics.results_last_minute / 60,
    )


@router.get("/cost-models")
def list_cost_models(
    log: LogDep,
    family: Annotated[
        str | None,
        Query(min_length=1, max_length=255, description="Only this family (llvm:znver5, ...)."),
    ] = None,
) -> CostModelsPublic:
    """Versions of the shared cost models by family and version, with when and on how much they
    were trained and their leave-workload-out scores."""
    data = [CostModelPublic.of(model) for model in CostModelStore(log).versions(family)]
    return CostModelsPublic(data=data, count=len(data))
