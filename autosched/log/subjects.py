"""What the log's records are about: a workload and a target, stored once and then referred to."""

from __future__ import annotations

from autosched.log.store import TuningLog
from autosched.records import TargetInfo, WorkloadInfo
from autosched.target import canonical_target, target_key, target_kind
from autosched.workload import Workload


def ensure_target(log: TuningLog, target: dict) -> TargetInfo:
    """The stored target (its canonical JSON), inserted first if the log has none."""
    target = canonical_target(target)
    return log.ensure_target(key=target_key(target), kind=target_kind(target), target_json=target)


def ensure_subject(
    log: TuningLog, workload: Workload, target: dict
) -> tuple[WorkloadInfo, TargetInfo]:
    """The stored workload and target, each inserted first if the log has none."""
    stored = log.ensure_workload(
        key=workload.key,
        name=workload.name,
        params=dict(workload.params),
        tvmscript=workload.tvmscript,
        flops=workload.flops,
        source=workload.source,
    )
    return stored, ensure_target(log, target)
