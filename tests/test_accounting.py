"""A job's trial count and the log agree: ``trials_done`` is the number of new measurements stored
for the job, the baseline apart, in the service engine and in `autosched tune`, however slowly or
concurrently things are measured."""

from __future__ import annotations

from collections.abc import Sequence

from helpers import start_job, submit_job

from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.leases import LeaseQueue
from autosched.log.subjects import ensure_subject
from autosched.measure.simulated import SimulatedMeasurer
from autosched.records import (
    BASELINE_TRACE,
    CandidateResult,
    JobStatus,
    MeasureResult,
    ReportedResult,
    WorkloadRef,
)
from autosched.schedule import apply_trace, program_hash
from autosched.server.engine import Engine
from autosched.target import device_fingerprint, host_target
from autosched.tuner import TuneOptions, tune
from autosched.workloads import get_workload

SHAPE = {"M": 16, "N": 16, "K": 16}
OK = MeasureResult(samples=(1e-3, 1e-3))


def test_a_job_ends_only_once_its_baseline_is_measured_too(log: TuningLog) -> None:
    """The trials are measured while the baseline went back to the queue (its worker lost it):
    the job waits for the baseline, so its records hold every trial and the baseline."""
    target = host_target()
    jobs, leases = JobStore(log), LeaseQueue(log)
    job = submit_job(jobs, get_workload("matmul", SHAPE), target, 2, strategy="random")
    engine = Engine(log)
    worker = leases.register_worker(name="w", target=target, fingerprint=device_fingerprint(target))
    engine.step()  # claims the job, queues the baseline and two trials
    lease = leases.lease(worker, 10)
    assert lease is not None and len(lease.candidates) == 3
    trials = [c for c in lease.candidates if c.trace_json != BASELINE_TRACE]
    reported = [ReportedResult(c.candidate_id, OK, True) for c in trials]
    assert leases.report(worker, lease.id, reported).stored == 2  # the baseline goes back

    engine.step()
    budget = jobs.budget(job)
    assert budget.measured == budget.trials == 2 and budget.baseline_outstanding
    assert not budget.spent and jobs.job(job).status is JobStatus.RUNNING

    again = leases.lease(worker, 10)
    assert again is not None and [c.trace_json for c in again.candidates] == [BASELINE_TRACE]
    leases.report(worker, again.id, [ReportedResult(again.candidates[0].candidate_id, OK, True)])
    engine.step()
    progress = jobs.job(job)
    assert progress.status is JobStatus.FINISHED and progress.trials_done == 2
    assert len(log.records(progress.workload.id, progress.target.id)) == 2 + 1


class RacedMeasurer(SimulatedMeasurer):
    """Slow enough that another job records the first candidate of each batch of several
    meanwhile, as a concurrent job on the same log can."""

    def __init__(self, log: TuningLog, rival_job: int) -> None:
        super().__init__()
        self._log = log
        self._rival_job = rival_job

    def measure(self, workload: WorkloadRef, traces: Sequence[str]) -> list[MeasureResult]:
        results = super().measure(workload, traces)
        if len(traces) > 1:
            mod = get_workload("matmul", SHAPE).mod
            digest = program_hash(apply_trace(mod, traces[0]).mod)
            raced = CandidateResult(traces[0], digest, results[0], verified=True)
            assert self._log.record_batch(self._rival_job, [raced]) == 1
        return results


def test_tune_counts_only_the_measurements_it_stored(log: TuningLog) -> None:
    target = host_target()
    workload = get_workload("matmul", SHAPE)
    stored_workload, stored_target = ensure_subject(log, workload, target)
    rival = start_job(log, stored_workload.id, stored_target.id, 100, batch_size=4, seed=None)
    measurer = RacedMeasurer(log, rival)
    options = TuneOptions(trials=8, batch_size=4, seed=3, strategy="random")
    report = tune(workload, target, log, measurer, options)

    mine = [
        r for r in log.records(stored_workload.id, stored_target.id) if r.job_id == report.job_id
    ]
    new = [r for r in mine if r.trace_json != BASELINE_TRACE]
    assert report.trials == len(new) == 8  # the whole budget, in programs this job measured
    assert len(measurer.measured) > 1 + 8  # it measured more: the rival stored some first
    progress = JobStore(log).job(report.job_id)
    assert progress.trials_done == report.trials and progress.failed == report.failed == 0
