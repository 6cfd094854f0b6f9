"""What clients watch the service with: its workers, its queue per target, and the versions of the
shared cost models with their scores. Read-only, for client and admin tokens (the worker
protocol's routes under /workers are for worker tokens)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from autosched.log.costmodels import CostModelStore
from autosched.protocol import (
    MAX_ID,
    MAX_PAGE,
    CostModelPublic,
    CostModelsPublic,
    QueuePublic,
    TargetPublic,
    TargetQueuePublic,
    WorkersStatusPublic,
    WorkerStatusPublic,
)
from autosched.server.api.deps import LeasesDep, LogDep, ReaderAuth

router = APIRouter(tags=["monitoring"], dependencies=[ReaderAuth])


@router.get("/workers")
def list_workers(
    leases: LeasesDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> WorkersStatusPublic:
    """Registered workers, the most recently heard from first: target, device, last heartbeat,
    the lease in hand and recent results."""
    page, count = leases.workers(limit=limit, offset=offset)
    data = [
        WorkerStatusPublic(
            id=worker.id,
            name=worker.name,
            target=TargetPublic.of(worker.target),
            fingerprint=worker.fingerprint,
            registered_at=worker.registered_at,
            heartbeat_at=worker.heartbeat_at,
            alive=worker.alive,
            lease_id=worker.lease_id,
            leased=worker.leased,
            results_per_minute=worker.device_results_last_minute,
        )
        for worker in page
    ]
    return WorkersStatusPublic(data=data, count=count)


@router.get("/queue")
def queue(leases: LeasesDep) -> QueuePublic:
    """Queue depth per target, leases, live workers, results per second and jobs by status."""
    metrics = leases.metrics()
    targets = [
        TargetQueuePublic(
            target=TargetPublic.of(item.target),
            queued=item.queued,
            leased=item.leased,
            workers_alive=item.workers_alive,
        )
        for item in leases.queue_by_target()
    ]
    return QueuePublic(
        targets=targets,
        queued=metrics.queued,
        leased=metrics.leased,
        active_leases=metrics.active_leases,
        workers_alive=metrics.workers_alive,
        results_per_second=metrics.results_last_minute / 60,
        jobs_by_status=metrics.jobs_by_status,
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
    versions = CostModelStore(log).versions(family)
    data = [
        CostModelPublic(
            id=model.id,
            family=model.family,
            version=model.version,
            objective=model.objective,
            features=model.features,
            created_at=model.created_at,
            trained_on=model.trained_on,
            workloads=model.workloads,
            scores=model.scores,
        )
        for model in versions
    ]
    return CostModelsPublic(data=data, count=len(data))
