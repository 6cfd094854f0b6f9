"""Workloads in the tuning log: what was tuned for which targets, and the best schedules."""

from __future__ import annotations

from itertools import groupby
from typing import Annotated

from fastapi import APIRouter, Query

from autosched.protocol import BestPublic, WorkloadsPublic, WorkloadSummaryPublic
from autosched.server.api.deps import ClientAuth, LeasesDep, LogDep, TargetQuery
from autosched.server.api.resolve import (
    best_schedule,
    nearest_schedule,
    stored_workload,
    tuned_target,
)

router = APIRouter(prefix="/workloads", tags=["workloads"], dependencies=[ClientAuth])


@router.get("")
def list_workloads(log: LogDep) -> WorkloadsPublic:
    """Every workload with measured candidates, with its best latency on each target."""
    rows = log.summary()  # ordered by workload key
    data = [
        WorkloadSummaryPublic.of_rows(list(group))
        for _key, group in groupby(rows, key=lambda row: row.workload_key)
    ]
    return WorkloadsPublic(data=data, count=len(data))


@router.get("/{key}/best")
def get_workload_best(
    key: str,
    target: TargetQuery,
    log: LogDep,
    leases: LeasesDep,
    fallback: Annotated[
        bool,
        Query(
            description="Without a record for the target, answer the nearest hardware's: the "
            "same device, processor model or ISA family (``level`` says which)."
        ),
    ] = False,
) -> BestPublic:
    """The best verified schedule of a workload on a target, as TVMScript and trace."""
    workload = stored_workload(log, key)
    if fallback:
        return nearest_schedule(log, leases, workload, target)
    return best_schedule(log, workload, tuned_target(log, leases, workload, target))
