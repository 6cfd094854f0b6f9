"""The worker protocol: register, heartbeat, lease candidates (or a job's final), report their
results (or the final's timings), release.

Only worker tokens may call these routes, and only the token a worker registered with may act for
it (else 403), on a lease it holds. An unknown worker or lease is a 404: a worker that gets one
after a server restart or a lost lease registers again. A report counts only for what its lease
holds, and a latency no machine of the target could reach is refused (``autosched.ceiling``).
"""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from autosched.protocol import (
    FinalReportPublic,
    FinalReportRequest,
    LeasePublic,
    LeaseRequest,
    ReleasePublic,
    ReportOutcomePublic,
    ReportRequest,
    WorkerPublic,
    WorkerRegister,
)
from autosched.server.api.deps import (
    LeasesDep,
    OwnWorkerId,
    PathId,
    SettingsDep,
    WorkerAuth,
    WorkerCaller,
)
from autosched.target import check_client_target

router = APIRouter(prefix="/workers", tags=["workers"], dependencies=[WorkerAuth])


@router.post("", status_code=status.HTTP_201_CREATED)
def register_worker(
    worker: WorkerRegister, leases: LeasesDep, settings: SettingsDep, caller: WorkerCaller
) -> WorkerPublic:
    """Register a worker daemon with the exact target it measures (of the attributes a client's
    target may set) and its device fingerprint."""
    check_client_target(worker.target)
    worker_id = leases.register_worker(
        name=worker.name,
        target=worker.target,
        fingerprint=worker.fingerprint,
        token_id=None if caller is None else caller.id,
    )
    return WorkerPublic(id=worker_id, lease_secs=settings.lease_secs)


@router.post("/{worker_id}/heartbeat", status_code=status.HTTP_204_NO_CONTENT)
def heartbeat(worker_id: OwnWorkerId, leases: LeasesDep) -> None:
    """Note the worker alive and extend its leases."""
    leases.heartbeat(worker_id)


@router.post(
    "/{worker_id}/leases",
    response_model=LeasePublic,
    responses={status.HTTP_204_NO_CONTENT: {"description": "Nothing is queued for the target."}},
)
def lease(
    worker_id: OwnWorkerId, request: LeaseRequest, leases: LeasesDep
) -> LeasePublic | Response:
    """Lease up to ``n`` queued candidates of the worker's target."""
    leased = leases.lease(worker_id, request.n)
    if leased is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return LeasePublic.of(leased)


@router.post("/{worker_id}/leases/{lease_id}/report")
def report(
    worker_id: OwnWorkerId, lease_id: PathId, request: ReportRequest, leases: LeasesDep
) -> ReportOutcomePublic:
    """Store the results of a lease's candidates; results for any other candidate, as for the
    same results reported again, are ignored and counted. A sample beyond what any machine of the
    target could reach refuses the report whole (422)."""
    results = [result.to_reported() for result in request.results]
    return ReportOutcomePublic.of(leases.report(worker_id, lease_id, results))


@router.post("/{worker_id}/leases/{lease_id}/final")
def report_final(
    worker_id: OwnWorkerId, lease_id: PathId, request: FinalReportRequest, leases: LeasesDep
) -> FinalReportPublic:
    """Store the timings of the final the lease holds: its finalists are ranked, and the winner
    becomes the best record. A report for a final the lease no longer holds changes nothing."""
    retimed = [entrant.to_entrant() for entrant in request.entrants]
    return FinalReportPublic(taken=leases.report_final(worker_id, lease_id, retimed))


@router.post("/{worker_id}/leases/{lease_id}/release")
def release(worker_id: OwnWorkerId, lease_id: PathId, leases: LeasesDep) -> ReleasePublic:
    """Give the lease's unmeasured candidates, or its final, back to the queue."""
    return ReleasePublic(released=leases.release(worker_id, lease_id))
