"""Tuning jobs, as clients submit and follow them: submit, list, progress, cancel, best schedule."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from autosched.errors import UserError
from autosched.log.queue import JobProgress, WorkQueue
from server.deps import ClientAuth, LogDep, PathId, QueueDep
from server.resolve import best_schedule, build_workload, job_target
from server.schemas import MAX_ID, MAX_PAGE, BestPublic, JobCreate, JobPublic, JobsPublic

router = APIRouter(prefix="/jobs", tags=["jobs"], dependencies=[ClientAuth])


@router.post("", status_code=status.HTTP_201_CREATED)
def submit_job(job: JobCreate, queue: QueueDep) -> JobPublic:
    """Queue a tuning job. Everything is checked before anything is stored."""
    workload = build_workload(job.workload)
    target = job_target(queue, job.target)
    job_id = queue.submit(
        workload,
        target,
        trials=job.trials,
        batch_size=job.batch_size,
        strategy=job.strategy,
        seed=job.seed,
    )
    return JobPublic.of(queue.job(job_id))


@router.get("")
def list_jobs(
    queue: QueueDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> JobsPublic:
    """A page of jobs, newest first."""
    jobs, count = queue.jobs(limit=limit, offset=offset)
    return JobsPublic(data=[JobPublic.of(job) for job in jobs], count=count)


@router.get("/{job_id}")
def get_job(job_id: PathId, queue: QueueDep) -> JobPublic:
    """A job's status, trials done and failed, best latency and best-so-far curve."""
    return JobPublic.of(_found(queue, job_id))


@router.post("/{job_id}/cancel")
def cancel_job(job_id: PathId, queue: QueueDep) -> JobPublic:
    """Stop a job; one that already ended keeps its status."""
    _found(queue, job_id)
    return JobPublic.of(queue.cancel(job_id))


@router.get("/{job_id}/best")
def get_job_best(job_id: PathId, queue: QueueDep, log: LogDep) -> BestPublic:
    """The best verified schedule of the job's workload on its target, as TVMScript and trace."""
    job = _found(queue, job_id)
    return best_schedule(log, job.workload, job.target)


def _found(queue: WorkQueue, job_id: int) -> JobProgress:
    try:
        return queue.job(job_id)
    except UserError as error:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(error)) from None
