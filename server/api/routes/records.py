"""Measured candidates of a workload on a target, page by page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from autosched.protocol import RecordPublic, RecordsPublic
from autosched.server.api.deps import (
    ClientAuth,
    LeasesDep,
    LogDep,
    PageDep,
    TargetQuery,
)
from autosched.server.api.resolve import stored_workload, tuned_target

router = APIRouter(prefix="/records", tags=["records"], dependencies=[ClientAuth])


@router.get("")
def list_records(
    workload: Annotated[str, Query(min_length=1, max_length=64, description="A workload key.")],
    target: TargetQuery,
    log: LogDep,
    leases: LeasesDep,
    page: PageDep,
) -> RecordsPublic:
    """Every measurement of the workload on the target, in the order they were stored."""
    found_workload = stored_workload(log, workload)
    found_target = tuned_target(log, leases, found_workload, target)
    records = log.records(found_workload.id, found_target.id, limit=page.limit, offset=page.offset)
    count = log.count_records(found_workload.id, found_target.id)
    return RecordsPublic(data=[RecordPublic.of(view) for view in records], count=count)
