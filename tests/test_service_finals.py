"""The finals of service jobs: planned when a job's trials are measured, leased to one worker
before any candidate, ranked from its report into the job's finalists, struck when its worker
vanishes; and end to end, an engine and a worker timing one for real."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from helpers import on_sqlite, submit_job, timed, wait_for

from autosched.errors import UserError
from autosched.finals.retiming import TOO_FEW, Finals
from autosched.finals.timings import FinalistStore
from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.leases import LeaseQueue
from autosched.log.tables import FinalState
from autosched.measure import MeasureConfig
from autosched.measure.child import ChildDied
from autosched.records import (
    BASELINE_TRACE,
    ErrorKind,
    JobStatus,
    Lease,
    MeasureResult,
    ReportedResult,
    RetimedEntrant,
    WorkloadRef,
)
from autosched.server.engine import Engine
from autosched.target import host_target
from autosched.workers.daemon import WorkerDaemon, time_final
from autosched.workload import Workload
from autosched.workloads import get_workload

TARGET = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}
FINGERPRINT = {"cpu_model": "test cpu", "physical_cores": 2}
MATMUL = get_workload("matmul", {"M": 16, "N": 16, "K": 16})


def _measured_job(
    log: TuningLog,
    singles: dict[str, tuple[float, bool]],
    *,
    finalists: int = 2,
    workload: Workload = MATMUL,
) -> int:
    """A running job with a final of ``finalists``, its candidates (by trace: single-shot
    seconds and whether verified) measured; the trace BASELINE_TRACE is the untuned program."""
    jobs, queue = JobStore(log), LeaseQueue(log)
    job = submit_job(
        jobs,
        workload,
        TARGET,
        sum(trace != BASELINE_TRACE for trace in singles),
        batch_size=8,
        seed=3,
        finalists=finalists,
        rounds=4,
    )
    assert job in jobs.claim_jobs("engine-1", ttl_secs=60)
    jobs.enqueue(job, [(trace, f"hash{trace}", None) for trace in singles])
    worker = queue.register_worker(name="w", target=TARGET, fingerprint=FINGERPRINT)
    lease = queue.lease(worker, len(singles))
    assert lease is not None and len(lease.candidates) == len(singles)
    queue.report(
        worker,
        lease.id,
        [
            ReportedResult(
                c.candidate_id, timed(singles[c.trace_json][0]), singles[c.trace_json][1]
            )
            for c in lease.candidates
        ],
    )
    return job


def _final_lease(log: TuningLog) -> tuple[int, Lease]:
    queue = LeaseQueue(log)
    worker = queue.register_worker(name="timer", target=TARGET, fingerprint=FINGERPRINT)
    lease = queue.lease(worker, 8)
    assert lease is not None and lease.final is not None
    return worker, lease


SINGLES = {
    '["fast"]': (1.0e-3, True),
    '["second"]': (1.1e-3, True),
    '["third"]': (1.5e-3, True),
    BASELINE_TRACE: (9.0e-3, True),
}


def test_a_final_is_planned_once_the_trials_are_measured_and_leased_before_candidates(
    log: TuningLog,
) -> None:
    jobs = JobStore(log)
    job = _measured_job(log, SINGLES)
    assert jobs.job(job).final is not None and jobs.job(job).final.state == "pending"
    assert Finals(log).plan(job) is FinalState.QUEUED
    assert Finals(log).plan(job) is FinalState.QUEUED  # planned once
    other = submit_job(jobs, get_workload("matmul", {"M": 32, "N": 16, "K": 16}), TARGET, 4)
    assert other in jobs.claim_jobs("engine-1", ttl_secs=60)
    jobs.enqueue(other, [('["waiting"]', "waiting", None)])
    _worker, lease = _final_lease(log)
    assert lease.candidates == []  # the final comes first: it ends a job
    final = lease.final
    assert final is not None
    assert final.job_id == job and final.rounds == 4 and final.seed == 3
    assert final.workload.key == MATMUL.key and final.target["mcpu"] == "skylake-avx512"
    # the two fastest tuned candidates, then the untuned program
    assert [e.trace_json for e in final.entrants] == ['["fast"]', '["second"]', BASELINE_TRACE]
    assert all(e.verified for e in final.entrants)
    assert jobs.job(job).final.state == "leased"
    assert jobs.job(job).status is JobStatus.RUNNING


def test_the_report_ranks_the_entrants_and_the_winner_becomes_the_best_record(
    log: TuningLog,
) -> None:
    jobs, queue = JobStore(log), LeaseQueue(log)
    job = _measured_job(log, SINGLES)
    Finals(log).plan(job)
    worker, lease = _final_lease(log)
    assert lease.final is not None
    ids = {e.trace_json: e.candidate_id for e in lease.final.entrants}
    # re-timed, the second-fastest single shot is the fastest program
    retimed = [
        RetimedEntrant(ids['["fast"]'], (1.3e-3, 1.2e-3, 1.25e-3, 1.3e-3), False),
        RetimedEntrant(ids['["second"]'], (1.0e-3, 1.05e-3, 1.0e-3, 1.02e-3), False),
        RetimedEntrant(ids[BASELINE_TRACE], (9e-3, 9.1e-3, 9e-3, 9.2e-3), False),
    ]
    assert queue.report_final(worker, lease.id, retimed)
    finalists = FinalistStore(log).of_job(job)
    assert [f.trace_json for f in finalists] == ['["second"]', '["fast"]', BASELINE_TRACE]
    assert finalists[0].samples == (1.0e-3, 1.05e-3, 1.0e-3, 1.02e-3)
    assert finalists[0].first_median_secs == pytest.approx(1.1e-3)
    best = log.best(*_subject(log, job))
    assert best is not None and best.program_hash == 'hash["second"]'
    assert jobs.job(job).final.state == "timed"
    assert Finals(log).plan(job) is FinalState.TIMED
    # a retry of the report changes nothing
    assert not queue.report_final(worker, lease.id, retimed[:1])
    assert len(FinalistStore(log).of_job(job)) == 3


def test_an_entrant_never_verified_wins_only_where_the_worker_checked_it(log: TuningLog) -> None:
    singles = {'["unchecked"]': (0.5e-3, False), **SINGLES}
    job = _measured_job(log, singles, finalists=3)
    Finals(log).plan(job)
    worker, lease = _final_lease(log)
    assert lease.final is not None
    entrants = {e.trace_json: e for e in lease.final.entrants}
    assert not entrants['["unchecked"]'].verified and entrants['["fast"]'].verified
    samples = {'["unchecked"]': 0.4e-3, '["fast"]': 1e-3, '["second"]': 1.1e-3}
    samples[BASELINE_TRACE] = 9e-3
    retimed = [
        RetimedEntrant(entrants[trace].candidate_id, (secs,) * 4, False)
        for trace, secs in samples.items()
    ]
    # timed, but not shown to compute the right answer: left out
    assert LeaseQueue(log).report_final(worker, lease.id, retimed)
    finalists = FinalistStore(log).of_job(job)
    assert [f.trace_json for f in finalists] == ['["fast"]', '["second"]', BASELINE_TRACE]

    singles = {'["checked"]': (0.5e-3, False), BASELINE_TRACE: (9e-3, True)}
    again = _measured_job(log, singles, workload=get_workload("softmax", {"rows": 4, "cols": 8}))
    Finals(log).plan(again)
    worker, lease = _final_lease(log)
    assert lease.final is not None
    checked = [
        RetimedEntrant(e.candidate_id, (singles[e.trace_json][0],) * 4, not e.verified)
        for e in lease.final.entrants
    ]
    assert LeaseQueue(log).report_final(worker, lease.id, checked)
    winner = FinalistStore(log).of_job(again)[0]
    assert winner.trace_json == '["checked"]'
    record = next(r for r in log.records(*_subject(log, again)) if r.trace_json == '["checked"]')
    assert record.verified  # the worker's check made it verified, as every best record is


def test_a_report_naming_a_stranger_or_more_samples_than_rounds_is_refused(
    log: TuningLog,
) -> None:
    job = _measured_job(log, SINGLES)
    Finals(log).plan(job)
    worker, lease = _final_lease(log)
    assert lease.final is not None
    entrant = lease.final.entrants[0].candidate_id
    queue = LeaseQueue(log)
    with pytest.raises(UserError, match="not an entrant"):
        queue.report_final(worker, lease.id, [RetimedEntrant(10**6, (1e-3,), False)])
    with pytest.raises(UserError, match="4 rounds"):
        queue.report_final(worker, lease.id, [RetimedEntrant(entrant, (1e-3,) * 5, False)])
    with pytest.raises(UserError, match="twice"):
        queue.report_final(worker, lease.id, [RetimedEntrant(entrant, (1e-3,), False)] * 2)
    with pytest.raises(UserError, match="not a time"):
        queue.report_final(worker, lease.id, [RetimedEntrant(entrant, (float("nan"),), False)])
    # nothing was stored: the final is still the worker's to report
    assert FinalistStore(log).of_job(job) == []
    assert JobStore(log).job(job).final.state == "leased"


def test_a_final_whose_worker_vanishes_goes_back_once_then_fails(log: TuningLog) -> None:
    job = _measured_job(log, SINGLES)
    Finals(log).plan(job)
    queue = LeaseQueue(log, lease_secs=0.05)
    worker = queue.register_worker(name="doomed", target=TARGET, fingerprint=FINGERPRINT)
    first = queue.lease(worker, 8)
    assert first is not None and first.final is not None
    time.sleep(0.1)
    queue.expire_leases()
    assert JobStore(log).job(job).final.state == "queued"  # one strike: back in the queue
    second = queue.lease(worker, 8)
    assert second is not None and second.final is not None
    assert second.final.final_id == first.final.final_id
    time.sleep(0.1)
    queue.expire_leases()
    final = JobStore(log).job(job).final
    assert (
        final is not None and final.state == "failed" and "lost 2 workers" in (final.reason or "")
    )
    assert queue.lease(worker, 8) is None
    # a report of the expired lease comes too late to count
    late = [RetimedEntrant(e.candidate_id, (1e-3,), False) for e in second.final.entrants]
    assert not queue.report_final(worker, second.id, late)


def test_a_released_final_goes_back_without_a_strike(log: TuningLog) -> None:
    job = _measured_job(log, SINGLES)
    Finals(log).plan(job)
    queue = LeaseQueue(log)
    worker, lease = _final_lease(log)
    assert queue.release(worker, lease.id) == 0
    assert JobStore(log).job(job).final.state == "queued"
    _worker, again = _final_lease(log)
    assert again.final is not None and again.final.final_id == lease.final.final_id


def test_a_final_with_fewer_than_two_entrants_is_skipped(log: TuningLog) -> None:
    job = _measured_job(log, {'["only"]': (1e-3, True)})
    assert Finals(log).plan(job) is FinalState.SKIPPED
    final = JobStore(log).job(job).final
    assert final is not None and final.reason == TOO_FEW
    worker = LeaseQueue(log).register_worker(name="w", target=TARGET, fingerprint=FINGERPRINT)
    assert LeaseQueue(log).lease(worker, 8) is None


def test_a_program_far_slower_than_the_fastest_entrant_is_not_timed_again(
    log: TuningLog,
) -> None:
    slow = {'["fast"]': (1e-3, False), '["second"]': (0.02, True), '["slow"]': (0.3, True)}
    job = _measured_job(log, {**slow, BASELINE_TRACE: (0.5, True)}, finalists=3)
    assert Finals(log).plan(job) is FinalState.QUEUED
    _worker, lease = _final_lease(log)
    assert lease.final is not None
    # the pace is the fastest verified single shot's (0.02 s): 0.3 s and 0.5 s stay out
    assert [e.trace_json for e in lease.final.entrants] == ['["fast"]', '["second"]']


def test_a_job_that_ends_before_its_final_is_leased_skips_it(log: TuningLog) -> None:
    jobs = JobStore(log)
    pending = _measured_job(log, SINGLES)
    jobs.cancel(pending)
    final = jobs.job(pending).final
    assert final is not None and final.state == "skipped"
    assert final.reason == "the job was cancelled first"
    assert Finals(log).plan(pending) is FinalState.SKIPPED
    queued = _measured_job(log, SINGLES, workload=get_workload("softmax", {"rows": 4, "cols": 8}))
    Finals(log).plan(queued)
    jobs.end_job(queued, JobStatus.FAILED)
    final = jobs.job(queued).final
    assert final is not None and final.state == "skipped" and "failed" in (final.reason or "")
    worker = LeaseQueue(log).register_worker(name="w", target=TARGET, fingerprint=FINGERPRINT)
    assert LeaseQueue(log).lease(worker, 8) is None


def test_a_job_without_finalists_has_no_final(log: TuningLog) -> None:
    job = _measured_job(log, SINGLES, finalists=0)
    assert JobStore(log).job(job).final is None
    assert Finals(log).plan(job) is None


class _DyingRetimer:
    """A measurer whose outputs are right and whose rounds of timing kill the runner."""

    def verify(self, workload: WorkloadRef, trace: str, seed: int) -> None:
        return None

    def retime(self, workload: WorkloadRef, traces: Sequence[str], rounds: int) -> list:
        raise ChildDied("the runner died (signal 11)")


def test_a_worker_whose_rounds_fail_reports_the_final_untimed(log: TuningLog) -> None:
    job = _measured_job(log, SINGLES)
    Finals(log).plan(job)
    worker, lease = _final_lease(log)
    assert lease.final is not None
    retimed = time_final(_DyingRetimer(), lease.final)  # type: ignore[arg-type]
    assert [r.samples for r in retimed] == [(), (), ()]
    assert LeaseQueue(log).report_final(worker, lease.id, retimed)
    final = JobStore(log).job(job).final
    assert final is not None and final.state == "failed"
    assert final.reason == "no entrant could be timed again"


class _ScriptedRetimer:
    """A measurer whose rounds time each trace at its scripted seconds, and whose checks fail
    for the traces named ``wrong``; it records what it was asked to check."""

    def __init__(self, secs: dict[str, float], wrong: set[str]) -> None:
        self.secs, self.wrong = secs, wrong
        self.verified: list[str] = []

    def verify(self, workload: WorkloadRef, trace: str, seed: int) -> MeasureResult | None:
        self.verified.append(trace)
        wrong = MeasureResult(error_kind=ErrorKind.INCORRECT, error_msg="outputs differ")
        return wrong if trace in self.wrong else None

    def retime(self, workload: WorkloadRef, traces: Sequence[str], rounds: int) -> list:
        return [[self.secs[trace]] * rounds for trace in traces]


def test_a_worker_checks_the_finalists_in_their_ranking_until_one_passes(log: TuningLog) -> None:
    singles = {
        '["wrong"]': (0.5e-3, False),
        '["fast"]': (1.0e-3, True),
        '["unchecked"]': (1.2e-3, False),
        BASELINE_TRACE: (9.0e-3, True),
    }
    job = _measured_job(log, singles, finalists=3)
    Finals(log).plan(job)
    worker, lease = _final_lease(log)
    assert lease.final is not None and len(lease.final.entrants) == 4
    measurer = _ScriptedRetimer(
        {'["wrong"]': 0.4e-3, '["fast"]': 1e-3, '["unchecked"]': 1.1e-3, BASELINE_TRACE: 9e-3},
        wrong={'["wrong"]'},
    )
    retimed = time_final(measurer, lease.final)  # type: ignore[arg-type]
    # the fastest re-timed is checked and fails; the verified one after it wins unchecked, and
    # the one ranked after the winner is never checked
    assert measurer.verified == ['["wrong"]']
    by_trace = {e.trace_json: r for e, r in zip(lease.final.entrants, retimed, strict=True)}
    assert by_trace['["wrong"]'].samples == () and not by_trace['["wrong"]'].verified
    assert len(by_trace['["unchecked"]'].samples) == 4 and not by_trace['["unchecked"]'].verified
    assert LeaseQueue(log).report_final(worker, lease.id, retimed)
    finalists = FinalistStore(log).of_job(job)
    assert [f.trace_json for f in finalists] == ['["fast"]', '["unchecked"]', BASELINE_TRACE]
    records = {r.trace_json: r for r in log.records(*_subject(log, job))}
    best = log.best(*_subject(log, job))
    assert best is not None and best.program_hash == 'hash["fast"]'
    assert not records['["unchecked"]'].verified  # a finalist after the winner stays unchecked


def _subject(log: TuningLog, job_id: int) -> tuple[int, int]:
    progress = JobStore(log).job(job_id)
    return progress.workload.id, progress.target.id


@pytest.mark.slow
@on_sqlite
def test_an_engine_and_a_worker_time_a_jobs_finalists_for_real(db_url: str) -> None:
    target = host_target()
    with TuningLog(db_url) as log:
        jobs, queue = JobStore(log), LeaseQueue(log)
        job = submit_job(
            jobs,
            get_workload("softmax", {"rows": 8, "cols": 32}),
            target,
            4,
            seed=2,
            finalists=2,
            rounds=3,
        )
        engine = Engine(log, poll_secs=0.1)
        config = MeasureConfig(repeat=2, min_repeat_ms=2, run_timeout_secs=10)
        daemon = WorkerDaemon(queue, target, batch=4, config=config, poll_secs=0.1)
        stop = threading.Event()
        threads = [threading.Thread(target=loop.run, args=(stop,)) for loop in (engine, daemon)]
        for thread in threads:
            thread.start()
        try:
            wait_for(lambda: jobs.job(job).status.final, "the job to end", timeout=300)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        progress = jobs.job(job)
        assert progress.status is JobStatus.FINISHED and progress.trials_done == 4
        assert progress.final is not None and progress.final.state == "timed", progress.final
        finalists = FinalistStore(log).of_job(job)
        assert len(finalists) == 3 and sum(f.trace_json == BASELINE_TRACE for f in finalists) == 1
        assert all(len(f.samples) == 3 for f in finalists)
        assert [f.median_secs for f in finalists] == sorted(f.median_secs for f in finalists)
        best = log.best(progress.workload.id, progress.target.id)
        assert best is not None and best.program_hash == finalists[0].program_hash
        assert best.verified
