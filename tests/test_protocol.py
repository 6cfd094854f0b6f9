"""The wire protocol's one rule of conversion: a record sent over HTTP comes back as the record it
was, and the fields a body renames or derives say what the record says."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pytest

from autosched.finals.ranking import Finalist, Interval
from autosched.protocol import (
    FinalistPublic,
    JobPublic,
    LeasePublic,
    ModelJobPublic,
    RecordPublic,
    ReportOutcomePublic,
    ResultIn,
    RetimedIn,
    TunedTargetPublic,
)
from autosched.records import (
    BASELINE_TRACE,
    ErrorKind,
    FinalEntrant,
    FinalProgress,
    JobProgress,
    JobStatus,
    Lease,
    LeasedCandidate,
    LeasedFinal,
    MeasureResult,
    ModelJobProgress,
    ModelRoundRecord,
    ModelTaskProgress,
    RecordView,
    ReportedResult,
    ReportOutcome,
    RetimedEntrant,
    SummaryRow,
    TargetInfo,
    WorkloadInfo,
    WorkloadRef,
)

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
TARGET = TargetInfo(2, "llvm-key", "llvm", {"kind": "llvm", "mcpu": "skylake"})
REF = WorkloadRef("matmul", {"n": 64}, "matmul-key")
LEASE = Lease(
    9,
    2,
    NOW,
    [
        LeasedCandidate(5, 3, REF, {"kind": "llvm"}, "[[1],[]]", 1e-3),
        LeasedCandidate(6, 4, WorkloadRef("user", {}, "user-key", "{ir}"), {}, "[]", None),
    ],
    LeasedFinal(1, 3, REF, {"kind": "llvm"}, 5, 42, [FinalEntrant(5, "[[1],[]]", False)]),
)


ROUND_TRIPS = [
    (LEASE, LeasePublic, LeasePublic.to_lease),
    (Lease(10, 2, NOW, []), LeasePublic, LeasePublic.to_lease),
    (
        ReportedResult(5, MeasureResult((1e-3, 2e-3), None, None, 0.5, NOW, NOW), True),
        ResultIn,
        ResultIn.to_reported,
    ),
    (
        ReportedResult(6, MeasureResult((), ErrorKind.RUN_TIMEOUT, "slow"), False),
        ResultIn,
        ResultIn.to_reported,
    ),
    (RetimedEntrant(5, (1e-3, 2e-3), True), RetimedIn, RetimedIn.to_entrant),
    (ReportOutcome(1, 2, 3, 4), ReportOutcomePublic, ReportOutcomePublic.to_outcome),
    (
        RecordView(5, "[]", "hash", 1e-3, (1e-3,), None, None, True, 3, NOW, "0.27", True),
        RecordPublic,
        RecordPublic.to_view,
    ),
]


@pytest.mark.parametrize(("record", "body", "back"), ROUND_TRIPS)
def test_a_record_sent_as_json_comes_back_as_it_was(
    record: object, body: type[Any], back: Callable[[Any], object]
) -> None:
    wire = body.of(record).model_dump_json()
    assert back(body.model_validate_json(wire)) == record


def test_a_jobs_curve_and_finalists_are_read_from_its_progress() -> None:
    workload = WorkloadInfo(1, "matmul-key", "matmul", {"n": 64}, "# script", 5e5)
    progress = JobProgress(
        id=3,
        workload=workload,
        target=TARGET,
        trials=64,
        batch_size=8,
        strategy="evolutionary",
        seed=None,
        status=JobStatus.FINISHED,
        created_at=NOW,
        started_at=NOW,
        finished_at=NOW,
        trials_done=10,
        failed=1,
        best_latency_secs=1e-3,
        curve=[(1, 2e-3), (4, 1e-3)],
        final=FinalProgress("timed", 2, 5),
    )
    winner = Finalist("h", "[[1],[]]", 1e-3, (1e-3, 2e-3), 1.5e-3, Interval(1e-3, 2e-3, 0.9), False)
    untuned = Finalist("u", BASELINE_TRACE, 3e-3, (3e-3,), 3e-3, Interval(3e-3, 3e-3, 0.5), False)
    job = JobPublic.of(progress, [winner, untuned])
    assert (job.workload.key, job.target.target_json) == ("matmul-key", TARGET.target_json)
    assert [(p.trials, p.best_latency_secs) for p in job.curve] == progress.curve
    assert job.final is not None and job.final.state == "timed"
    assert job.finalists == [FinalistPublic.of(winner), FinalistPublic.of(untuned)]
    assert job.finalists[0].interval_secs == (1e-3, 2e-3) and job.finalists[0].confidence == 0.9
    assert [f.untuned for f in job.finalists] == [False, True]


def test_a_model_jobs_renamed_and_derived_fields_say_what_its_progress_says() -> None:
    tasks = (
        ModelTaskProgress(0, "dense", 2, "dense-key", 0, 2, 16, 1e-3, 4e-3, None),
        ModelTaskProgress(1, "gather", 1, None, 0, 0, 0, None, None, "not admitted"),
    )
    rounds = (
        ModelRoundRecord(1, 0, 0, 11, 8, True, 8, 1e-3, False, None),
        ModelRoundRecord(2, 1, 0, 12, 8, False, 0, None, False, None),
        ModelRoundRecord(3, 2, 1, 13, 0, False, 0, None, False, None),
    )
    progress = ModelJobProgress(
        id=4,
        name="resnet",
        target=TARGET,
        inputs=[{"name": "x"}],
        trials=64,
        batch_size=8,
        strategy="evolutionary",
        seed=1,
        finalists=3,
        final_rounds=5,
        status=JobStatus.RUNNING,
        created_at=NOW,
        started_at=NOW,
        finished_at=None,
        reason=None,
        output_check={"ran": False, "reference": "onnxruntime"},
        tasks=tasks,
        rounds=rounds,
    )
    job = ModelJobPublic.of(progress)
    assert (job.trials_done, job.rounds, job.round_job_id) == (16, 2, 12)
    assert (job.estimated_latency_secs, job.untuned_latency_secs) == (2e-3, 8e-3)
    assert job.output_check is not None and job.output_check.reference == "onnxruntime"
    assert (job.tasks[0].best_latency_secs, job.tasks[0].untuned_latency_secs) == (1e-3, 4e-3)
    assert job.tasks[1].default_schedule == "not admitted"
    ended = ModelJobPublic.of(replace(progress, status=JobStatus.CANCELLED))
    assert ended.round_job_id is None


def test_a_tuned_target_has_an_interval_only_where_both_ends_are_known() -> None:
    row = SummaryRow("k", "matmul", {}, "t", {}, 1e-3, 10, 1, None, 1e-3, 9e-4, 1.1e-3)
    assert TunedTargetPublic.of(row).retimed_interval_secs == (9e-4, 1.1e-3)
    assert TunedTargetPublic.of(row).retimed_latency_secs == 1e-3
    half = SummaryRow("k", "matmul", {}, "t", {}, 1e-3, 10, 1, None, 1e-3, None, 1.1e-3)
    assert TunedTargetPublic.of(half).retimed_interval_secs is None
