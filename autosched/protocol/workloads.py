"""The bodies of the tuning log's contents: measured records, a workload's best schedule, and the
summary of the workloads tuned and their targets."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from autosched.protocol.common import (
    FromRecord,
    TargetPublic,
    WorkloadPublic,
    read,
    to_record,
)
from autosched.records import ErrorKind, RecordView, SummaryRow


class RecordPublic(FromRecord):
    """A measured candidate: its trace, and its timing (seconds) or its error."""

    candidate_id: int
    job_id: int | None
    program_hash: str
    trace_json: str
    median_secs: float | None
    samples: list[float]
    error_kind: ErrorKind | None
    error_msg: str | None
    verified: bool
    measured_at: datetime | None
    tvm_version: str | None = Field(None, description="The TVM version it was measured with.")
    imported: bool = Field(False, description="Whether it came from another log's file.")

    def to_view(self) -> RecordView:
        return to_record(self, RecordView)


class RecordsPublic(BaseModel):
    """A page of records in the order they were stored; ``count`` is the number in all."""

    data: list[RecordPublic]
    count: int


class BestPublic(BaseModel):
    """The best verified schedule of a workload on a target, with its scheduled TVMScript.

    ``level`` says how near ``target`` (the target the record was tuned for) is to the one asked
    for: ``exact``, or with ``fallback=true`` ``device``, ``processor`` or ``isa``.
    """

    workload: WorkloadPublic
    target: TargetPublic
    record: RecordPublic
    tvmscript: str
    level: Literal["exact", "device", "processor", "isa"] = "exact"


class TunedTargetPublic(BaseModel):
    """How far a workload is tuned on one target."""

    target_key: str
    target_json: dict[str, Any]
    best_latency_secs: float | None
    trials: int
    failed: int
    retimed_latency_secs: float | None = Field(
        None, description="The best's median when a final last timed it again (null: never)."
    )
    retimed_interval_secs: tuple[float, float] | None = Field(
        None, description="The 95% confidence interval of that median."
    )

    @classmethod
    def of(cls, row: SummaryRow) -> TunedTargetPublic:
        low, high = row.retimed_low_secs, row.retimed_high_secs
        return read(
            cls,
            row,
            retimed_latency_secs=row.retimed_secs,
            retimed_interval_secs=None if low is None or high is None else (low, high),
        )


class WorkloadSummaryPublic(WorkloadPublic):
    """A workload with candidates in the log, and the targets it was tuned for."""

    targets: list[TunedTargetPublic]

    @classmethod
    def of_rows(cls, rows: list[SummaryRow]) -> WorkloadSummaryPublic:
        """The summary of one workload from its rows of ``TuningLog.summary()``."""
        first = rows[0]
        return cls(
            key=first.workload_key,
            name=first.workload_name,
            params=dict(first.workload_params),
            flops=first.flops,
            targets=[TunedTargetPublic.of(row) for row in rows],
        )


class WorkloadsPublic(BaseModel):
    data: list[WorkloadSummaryPublic]
    count: int
