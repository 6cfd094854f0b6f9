"""Tuning jobs, as clients submit and follow them: submit, list, progress, measurements, cancel,
best schedule. A client sees and cancels only its own jobs; an admin token every job."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from autosched.errors import UserError
from autosched.finals.timings import FinalistStore
from autosched.protocol import (
    BestPublic,
    JobCreate,
    JobMeasurementPublic,
    JobMeasurementsPublic,
    JobPublic,
    JobsPublic,
)
from autosched.protocol.common import read
from autosched.records import JobStatus
from autosched.server.api.deps import (
    JobScope,
    JobsDep,
    LeasesDep,
    LogDep,
    OwnJobId,
    PageDep,
    ReaderAuth,
    SettingsDep,
    Submitter,
    over_limit,
)
from autosched.server.api.resolve import best_schedule, build_workload, job_target

router = APIRouter(prefix="/jobs", tags=["jobs"], dependencies=[ReaderAuth])

OVER_LIMIT = over_limit("jobs")


@router.post("", status_code=status.HTTP_201_CREATED, responses=OVER_LIMIT)
def submit_job(
    job: JobCreate, jobs: JobsDep, leases: LeasesDep, settings: SettingsDep, owner: Submitter
) -> JobPublic:
    """Queue a tuning job of the client's. Everything is checked before anything is stored."""
    if job.trials > settings.max_job_trials:
        raise UserError(f"trials: at most {settings.max_job_trials} per job on this server")
    jobs.check_room(owner, settings.max_client_jobs)
    workload = build_workload(job.workload, max_bytes=settings.max_program_bytes)
    target = job_target(leases, job.target)
    job_id = jobs.submit(
        workload,
        target,
        **job.search(),
        finalists=job.finalists,
        rounds=job.rounds,
        owner=owner,
        max_open=settings.max_client_jobs,
    )
    return JobPublic.of(jobs.job(job_id))


@router.get("")
def list_jobs(
    jobs: JobsDep,
    scope: JobScope,
    page: PageDep,
    status: Annotated[JobStatus | None, Query(description="Only jobs of this status.")] = None,
    target: Annotated[
        str | None,
        Query(min_length=1, max_length=512, description="Only jobs on this target (its key)."),
    ] = None,
) -> JobsPublic:
    """A page of the caller's jobs (an admin's: every job), newest first; ``count`` counts the
    jobs that match the filters."""
    found, count = jobs.jobs(
        limit=page.limit, offset=page.offset, status=status, target_key=target, owner=scope
    )
    return JobsPublic(data=[JobPublic.of(job) for job in found], count=count)


@router.get("/{job_id}")
def get_job(job_id: OwnJobId, jobs: JobsDep, log: LogDep) -> JobPublic:
    """A job's status, trials done and failed, best latency, best-so-far curve and finalists."""
    return JobPublic.of(jobs.job(job_id), FinalistStore(log).of_job(job_id))


@router.get("/{job_id}/measurements")
def list_job_measurements(
    job_id: OwnJobId,
    jobs: JobsDep,
    page: PageDep,
) -> JobMeasurementsPublic:
    """The job's measurements in the order they were stored: timings, and failures by kind."""
    found, count = jobs.measurements(job_id, limit=page.limit, offset=page.offset)
    data = [read(JobMeasurementPublic, item.record, trial=item.trial) for item in found]
    return JobMeasurementsPublic(data=data, count=count)


@router.post("/{job_id}/cancel")
def cancel_job(job_id: OwnJobId, jobs: JobsDep) -> JobPublic:
    """Stop a job; one that already ended keeps its status."""
    return JobPublic.of(jobs.cancel(job_id))


@router.get("/{job_id}/best")
def get_job_best(job_id: OwnJobId, jobs: JobsDep, log: LogDep) -> BestPublic:
    """The best verified schedule of the job's workload on its target, as TVMScript and trace."""
    job = jobs.job(job_id)
    return best_schedule(log, job.workload, job.target)
