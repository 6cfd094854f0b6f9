"""A job spends its whole budget in new measurements unless its design space has nothing new left,
and then it says so: in `autosched tune`, in the service engine, and after an engine takeover."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from helpers import on_sqlite, submit_job, wait_for

from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.leases import LeaseQueue
from autosched.measure.simulated import SimulatedMeasurer
from autosched.records import JobStatus, MeasureResult
from autosched.schedule import program_hash
from autosched.search.base import Proposal
from autosched.search.session import SearchSession
from autosched.search.space import design_space
from autosched.server.engine import Engine
from autosched.target import host_target
from autosched.tuner import TuneOptions, tune
from autosched.workers.daemon import WorkerDaemon
from autosched.workloads import get_workload

MATMUL = {"M": 64, "N": 64, "K": 64}


class StuckStrategy:
    """A strategy that has nothing new to offer: it proposes nothing, ever."""

    def __init__(self) -> None:
        self.told = 0
        self.observed = 0

    def propose(self) -> list[Proposal]:
        return []

    def tell(self, proposals: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
        self.told += len(proposals)

    def observe(self, proposals: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
        self.observed += len(proposals)


def test_rounds_a_strategy_cannot_fill_are_filled_from_the_design_space() -> None:
    workload = get_workload("matmul", {"M": 16, "N": 16, "K": 16})
    strategy = StuckStrategy()
    session = SearchSession(
        strategy,
        [],
        program_hash(workload.mod),
        space=lambda: design_space(workload, host_target(), seed=0),
        seed=0,
    )
    batch = session.propose(4)
    assert len(batch) == len({p.program_hash for p in batch}) == 4 and not session.exhausted
    session.learn((p.program_hash, MeasureResult(samples=(1e-3,))) for p in batch)
    assert (strategy.told, strategy.observed) == (0, 4)  # it observes what it did not propose
    assert {p.program_hash for p in session.propose(4)}.isdisjoint(p.program_hash for p in batch)


@on_sqlite
def test_a_tiny_design_space_ends_the_job_and_says_why(log: TuningLog) -> None:
    workload = get_workload("matmul", {"M": 1, "N": 1, "K": 1})  # a handful of programs
    options = TuneOptions(trials=500, batch_size=8, seed=0, strategy="random")
    report = tune(workload, host_target(), log, SimulatedMeasurer(), options)
    assert report.trials < 500 and report.stop_reason is not None
    distinct = len(log.records(*_ids(log, report.job_id)))
    assert report.stop_reason.startswith(f"exhausted: {distinct} distinct programs measured")
    progress = JobStore(log).job(report.job_id)
    assert progress.status is JobStatus.FINISHED and progress.stop_reason == report.stop_reason


def _ids(log: TuningLog, job_id: int) -> tuple[int, int]:
    job = JobStore(log).job(job_id)
    return job.workload.id, job.target.id


@pytest.mark.slow  # two searches of three rounds each, per seed
@on_sqlite
@pytest.mark.parametrize("seed", [16, 19])
def test_tuning_again_on_a_log_spends_the_whole_second_budget(log: TuningLog, seed: int) -> None:
    workload = get_workload("matmul", MATMUL)
    measurer = SimulatedMeasurer()
    options = TuneOptions(trials=24, batch_size=8, seed=seed)
    first = tune(workload, host_target(), log, measurer, options)
    second = tune(workload, host_target(), log, measurer, options)
    assert (first.trials, second.trials) == (24, 24)
    assert second.stop_reason is None
    assert len(log.records(*_ids(log, second.job_id))) == 1 + 24 + 24


@pytest.mark.slow  # two engines in turn, a worker and a search of six rounds
def test_a_job_taken_over_mid_way_spends_its_whole_budget(log: TuningLog) -> None:
    target = host_target()
    jobs, leases = JobStore(log), LeaseQueue(log, lease_secs=5)
    job = submit_job(jobs, get_workload("matmul", MATMUL), target, 24, batch_size=4, seed=3)
    stop = threading.Event()
    worker = WorkerDaemon(leases, target, batch=4, measurer=SimulatedMeasurer(0.01), poll_secs=0.05)
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    try:
        first = Engine(log, engine_id="first", claim_secs=0.5, poll_secs=0.05)
        first.start()
        wait_for(lambda: jobs.job(job).trials_done >= 8, "the first engine's measurements")
        first.stop()  # it dies: its claim lapses and its search state is lost
        second = Engine(log, engine_id="second", claim_secs=0.5, poll_secs=0.05)
        second.start()
        wait_for(lambda: jobs.job(job).status.final, "the job to end")
        second.stop()
    finally:
        stop.set()
        thread.join()
    progress = jobs.job(job)
    assert progress.status is JobStatus.FINISHED and progress.stop_reason is None
    assert progress.trials_done == 24
    hashes = [r.program_hash for r in log.records(progress.workload.id, progress.target.id)]
    assert len(hashes) == len(set(hashes)) == 1 + 24
