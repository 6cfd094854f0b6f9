"""The service's work queue: claiming jobs, leasing fairly, idempotent reports, expiry, poison."""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import start_job, submit_job, timed

from autosched.errors import UserError
from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.leases import LeaseQueue
from autosched.records import ErrorKind, JobStatus, MeasureResult, ReportedResult
from autosched.workloads import get_workload

TARGET = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}
OTHER_TARGET = {"kind": "llvm", "mcpu": "znver3", "num-cores": 8}
FINGERPRINT = {"cpu_model": "test cpu", "physical_cores": 2}


def _running_job(jobs: JobStore, trials: int = 8, name: str = "matmul", m: int = 16) -> int:
    workload = get_workload(name, {"M": m, "N": 16, "K": 16})
    job = submit_job(jobs, workload, TARGET, trials, batch_size=4)
    assert job in jobs.claim_jobs("engine-1", ttl_secs=60)
    return job


def _queued(log: TuningLog, n: int, **options: float) -> tuple[JobStore, LeaseQueue, int, int]:
    """A running job with ``n`` candidates queued, and a worker of its target: the stores (the
    queue with ``options``), the job and the worker."""
    jobs, queue = JobStore(log), LeaseQueue(log, **options)
    job = _running_job(jobs)
    jobs.enqueue(job, _candidates("a", n))
    worker = queue.register_worker(name="w", target=TARGET, fingerprint=FINGERPRINT)
    return jobs, queue, job, worker


def _candidates(prefix: str, n: int) -> list[tuple[str, str, float | None]]:
    return [(f'["{prefix}{i}"]', f"{prefix}{i}", None) for i in range(n)]


def _crash() -> MeasureResult:
    return MeasureResult(error_kind=ErrorKind.CRASH, error_msg="killed by SIGSEGV")


def test_a_submitted_job_is_queued_until_an_engine_claims_it(log: TuningLog) -> None:
    jobs = JobStore(log)
    job = submit_job(
        jobs, get_workload("matmul", {"M": 16, "N": 16, "K": 16}), TARGET, 8, batch_size=4, seed=1
    )
    assert jobs.job(job).status is JobStatus.QUEUED
    assert jobs.claim_jobs("engine-1", ttl_secs=60) == [job]
    assert jobs.claim_jobs("engine-2", ttl_secs=60) == []  # held by a live engine
    progress = jobs.job(job)
    assert progress.status is JobStatus.RUNNING and progress.started_at is not None


def test_a_job_whose_engine_died_is_taken_over(log: TuningLog) -> None:
    jobs = JobStore(log)
    job = submit_job(jobs, get_workload("softmax", {"rows": 4, "cols": 8}), TARGET, 4, seed=None)
    assert jobs.claim_jobs("engine-1", ttl_secs=0.2) == [job]
    time.sleep(0.3)
    assert jobs.claim_jobs("engine-2", ttl_secs=60) == [job]
    assert jobs.claim_jobs("engine-1", ttl_secs=60) == []


def test_a_job_tuned_on_one_machine_is_never_claimed_by_a_service_engine(log: TuningLog) -> None:
    workload = log.ensure_workload(key="w", name="matmul", params={}, tvmscript="", flops=None)
    target = log.ensure_target(key="t", kind="llvm", target_json=TARGET)
    jobs = JobStore(log)
    local = start_job(log, workload.id, target.id, 4, strategy="evolutionary")
    assert jobs.claim_jobs("engine-1", ttl_secs=0.01) == []
    time.sleep(0.05)
    assert jobs.claim_jobs("engine-1", ttl_secs=60) == []
    assert jobs.job(local).status is JobStatus.RUNNING


def test_workers_lease_their_targets_candidates_in_batches(log: TuningLog) -> None:
    jobs, queue = JobStore(log), LeaseQueue(log)
    job = _running_job(jobs)
    assert len(jobs.enqueue(job, _candidates("a", 6))) == 6
    assert jobs.enqueue(job, _candidates("a", 6)) == []  # known programs are not queued twice
    stranger = queue.register_worker(name="other", target=OTHER_TARGET, fingerprint=FINGERPRINT)
    assert queue.lease(stranger, 4) is None
    worker = queue.register_worker(name="w", target=TARGET, fingerprint=FINGERPRINT)
    first = queue.lease(worker, 4)
    second = queue.lease(worker, 4)
    assert first is not None and second is not None and queue.lease(worker, 4) is None
    leased = [c.candidate_id for c in first.candidates + second.candidates]
    assert len(leased) == len(set(leased)) == 6
    candidate = first.candidates[0]
    assert candidate.job_id == job and candidate.workload.name == "matmul"
    assert candidate.target["mcpu"] == "skylake-avx512" and candidate.best_latency_secs is None
    assert jobs.budget(job).outstanding == 6


def test_jobs_take_turns(log: TuningLog) -> None:
    jobs, queue = JobStore(log), LeaseQueue(log)
    first_job = _running_job(jobs, m=16)
    second_job = _running_job(jobs, m=32)
    jobs.enqueue(first_job, _candidates("a", 4))
    jobs.enqueue(second_job, _candidates("b", 4))
    worker = queue.register_worker(name="w", target=TARGET, fingerprint=FINGERPRINT)
    lease = queue.lease(worker, 4)
    assert lease is not None
    assert sorted(c.job_id for c in lease.candidates) == sorted([first_job, second_job] * 2)


def test_reports_are_stored_once_and_only_verified_results_become_best(log: TuningLog) -> None:
    jobs, queue, job, worker = _queued(log, 3)
    lease = queue.lease(worker, 3)
    assert lease is not None
    ids = [c.candidate_id for c in lease.candidates]
    report = [
        ReportedResult(ids[0], timed(2e-3), verified=True),
        ReportedResult(ids[1], timed(1e-3), verified=False),  # faster, but never checked
        ReportedResult(ids[2], MeasureResult(error_kind=ErrorKind.BUILD, error_msg="no"), False),
    ]
    outcome = queue.report(worker, lease.id, report)
    assert (outcome.stored, outcome.ignored) == (3, 0)
    again = queue.report(worker, lease.id, report)
    assert (again.stored, again.ignored) == (0, 3)
    progress = jobs.job(job)
    assert progress.trials_done == 3 and progress.failed == 1
    assert progress.best_latency_secs == pytest.approx(2e-3)
    assert progress.curve == [(1, pytest.approx(2e-3))]
    assert jobs.budget(job).outstanding == 0
    assert jobs.budget(job).measured == 3
    assert [m.record.program_hash for m in jobs.measured_since(job, 0)] == ["a0", "a1", "a2"]
    last = jobs.measured_since(job, 0)[1].measurement_id
    assert [m.record.program_hash for m in jobs.measured_since(job, last)] == ["a2"]


def test_an_expired_lease_goes_back_and_its_late_report_is_not_double_counted(
    log: TuningLog,
) -> None:
    jobs, queue = JobStore(log), LeaseQueue(log, lease_secs=0.3)
    job = _running_job(jobs)
    jobs.enqueue(job, _candidates("a", 2))
    dead = queue.register_worker(name="dead", target=TARGET, fingerprint=FINGERPRINT)
    alive = queue.register_worker(name="alive", target=TARGET, fingerprint=FINGERPRINT)
    lost = queue.lease(dead, 2)
    assert lost is not None
    time.sleep(0.4)
    retry = queue.lease(alive, 2)
    assert retry is not None
    assert {c.candidate_id for c in retry.candidates} == {c.candidate_id for c in lost.candidates}
    results = [ReportedResult(c.candidate_id, timed(1e-3), True) for c in retry.candidates]
    assert queue.report(alive, retry.id, results).stored == 2
    late = [ReportedResult(c.candidate_id, timed(5e-4), True) for c in lost.candidates]
    assert queue.report(dead, lost.id, late).ignored == 2
    assert jobs.job(job).trials_done == 2
    assert jobs.job(job).best_latency_secs == pytest.approx(1e-3)


@pytest.mark.parametrize("secs", [0.0, -1e-3, math.inf, math.nan])
def test_a_report_of_a_latency_that_is_no_time_is_refused_whole(
    log: TuningLog, secs: float
) -> None:
    jobs, queue, job, worker = _queued(log, 2)
    lease = queue.lease(worker, 2)
    assert lease is not None
    first, second = (c.candidate_id for c in lease.candidates)
    report = [ReportedResult(first, timed(1e-3), True), ReportedResult(second, timed(secs), True)]
    with pytest.raises(UserError, match=f"candidate {second}: .* is not a time"):
        queue.report(worker, lease.id, report)
    assert jobs.job(job).trials_done == 0 and jobs.job(job).best_latency_secs is None
    assert jobs.budget(job).outstanding == 2


def test_heartbeats_keep_a_lease(log: TuningLog) -> None:
    _jobs, queue, _job, worker = _queued(log, 1, lease_secs=0.4)
    other = queue.register_worker(name="o", target=TARGET, fingerprint=FINGERPRINT)
    lease = queue.lease(worker, 1)
    assert lease is not None
    for _ in range(3):
        time.sleep(0.2)
        queue.heartbeat(worker)
    assert queue.lease(other, 1) is None
    assert queue.expire_leases() == 0


def test_a_candidate_that_crashes_twice_is_poisoned_and_never_sent_again(log: TuningLog) -> None:
    jobs, queue, job, worker = _queued(log, 1)
    for expected in ("requeued", "poisoned"):
        lease = queue.lease(worker, 1)
        assert lease is not None
        (candidate,) = lease.candidates
        outcome = queue.report(
            worker, lease.id, [ReportedResult(candidate.candidate_id, _crash(), False)]
        )
        assert getattr(outcome, expected) == 1
    assert queue.lease(worker, 1) is None
    (measured,) = jobs.measured_since(job, 0)
    assert measured.record.error_kind is ErrorKind.CRASH
    assert "poisoned" in measured.record.error_msg
    assert jobs.job(job).failed == 1


def test_a_released_lease_is_requeued_without_a_strike(log: TuningLog) -> None:
    _jobs, queue, _job, worker = _queued(log, 2)
    for _ in range(3):  # releasing never poisons
        lease = queue.lease(worker, 2)
        assert lease is not None and len(lease.candidates) == 2
        assert queue.release(worker, lease.id) == 2


def test_a_cancelled_job_hands_out_no_more_work(log: TuningLog) -> None:
    jobs, queue, job, worker = _queued(log, 4)
    lease = queue.lease(worker, 1)
    assert lease is not None
    assert jobs.cancel(job).status is JobStatus.CANCELLED
    assert queue.lease(worker, 4) is None
    assert jobs.enqueue(job, _candidates("b", 2)) == []
    assert jobs.claim_jobs("engine-1", ttl_secs=60) == []
    # the measurement in flight still lands in the log
    (candidate,) = lease.candidates
    assert (
        queue.report(
            worker, lease.id, [ReportedResult(candidate.candidate_id, timed(1e-3), True)]
        ).stored
        == 1
    )


def test_concurrent_workers_never_lease_the_same_candidate(log: TuningLog) -> None:
    jobs, queue = JobStore(log), LeaseQueue(log)
    job = _running_job(jobs, trials=40)
    jobs.enqueue(job, _candidates("a", 40))
    workers = [
        queue.register_worker(name=f"w{i}", target=TARGET, fingerprint=FINGERPRINT)
        for i in range(8)
    ]

    def drain(worker: int) -> list[int]:
        taken = []
        while (lease := queue.lease(worker, 1)) is not None:
            taken.extend(c.candidate_id for c in lease.candidates)
        return taken

    with ThreadPoolExecutor(max_workers=8) as pool:
        taken = [c for batch in pool.map(drain, workers) for c in batch]
    assert len(taken) == len(set(taken)) == 40


def test_worker_targets_metrics_and_unknown_ids(log: TuningLog) -> None:
    jobs, queue, _job, worker = _queued(log, 3)
    assert queue.lease(worker, 1) is not None
    (target,) = queue.worker_targets("llvm")
    assert target["mcpu"] == "skylake-avx512" and queue.worker_targets("cuda") == []
    metrics = queue.metrics()
    assert (metrics.queued, metrics.leased, metrics.active_leases) == (2, 1, 1)
    assert metrics.workers_alive == 1 and metrics.jobs_by_status["running"] == 1
    with pytest.raises(UserError, match="no tuning job"):
        jobs.job(999)
    with pytest.raises(UserError, match="no worker"):
        queue.lease(999, 1)
    with pytest.raises(UserError, match="no lease"):
        queue.report(worker, 999, [])
