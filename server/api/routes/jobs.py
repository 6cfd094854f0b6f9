"""Tuning jobs, as clients submit and follow them: submit, list, progress, cancel, best schedule."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from autosched.protocol import MAX_ID, MAX_PAGE, BestPublic, JobCreate, JobPublic, JobsPublic
from autosched.server.api.deps import (
    ClientAuth,
    JobsDep,
    LeasesDep,
    LogDep,
    PathId,
    SettingsDep,
)
from autosched.server.api.resolve import best_schedule, build_workload, job_target

router = APIRouter(prefix="/jobs", tags=["jobs"], dependencies=[ClientAuth])


@router.post("", status_code=status.HTTP_201_CREATED)
def submit_job(
    job: JobCreate, jobs: JobsDep, leases: LeasesDep, settings: SettingsDep
) -> JobPublic:
    """Queue a tuning job. Everything is checked before anything is stored."""
    workload = build_workload(job.workload, max_bytes=settings.max_program_bytes)
    target = job_target(leases, job.target)
    job_id = jobs.submit(
        workload,
        target,
        trials=job.trials,
        batch_size=job.batch_size,
        strategy=job.strategy,
        seed=job.seed,
    )
    return JobPublic.of(jobs.job(job_id))


@router.get("")
def list_jobs(
    jobs: JobsDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> JobsPublic:
    """A page of jobs, newest first."""
    page, count = jobs.jobs(limit=limit, offset=offset)
    return JobsPublic(data=[JobPublic.of(job) for job in page], count=count)


@router.get("/{job_id}")
def get_job(job_id: PathId, jobs: JobsDep) -> JobPublic:
    """A job's status, trials done and failed, best latency and best-so-far curve."""
    return JobPublic.of(jobs.job(job_id))


@router.post("/{job_id}/cancel")
def cancel_job(job_id: PathId, jobs: JobsDep) -> JobPublic:
    """Stop a job; one that already ended keeps its status."""
    return JobPublic.of(jobs.cancel(job_id))


@router.get("/{job_id}/best")
def get_job_best(job_id: PathId, jobs: JobsDep, log: LogDep) -> BestPublic:
    """The best verified schedule of the job's workload on its target, as TVMScript and trace."""
    job = jobs.job(job_id)
    return best_schedule(log, job.workload, job.target)
