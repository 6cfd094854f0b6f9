"""The search engine and worker daemons, wired in-process through the work queue."""

from __future__ import annotations

import threading

import pytest
from helpers import count_session_starts, on_sqlite, submit_job, wait_for
from recorded import DATA, load_recording

from autosched.costmodel.shared import train_shared
from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.leases import LeaseQueue
from autosched.measure import MeasureConfig
from autosched.records import JobStatus
from autosched.server.engine import Engine
from autosched.target import host_target, target_family
from autosched.workers.daemon import WorkerDaemon
from autosched.workloads import get_workload

# Builds real programs or starts processes.
pytestmark = pytest.mark.slow

FAST = MeasureConfig(repeat=2, min_repeat_ms=2, run_timeout_secs=10)


@on_sqlite
def test_jobs_are_tuned_to_their_budget_by_engine_and_workers(db_url: str) -> None:
    target = host_target()
    with TuningLog(db_url) as log:
        load_recording(DATA / "small_matmuls.json.gz", log, target)
        model = train_shared(log, target_family(target), evaluate=False).model
        store, queue = JobStore(log), LeaseQueue(log)
        jobs = [
            submit_job(
                store,
                get_workload("matmul", {"M": 32, "N": 32, "K": 32}),
                target,
                6,
                batch_size=3,
                seed=1,
            ),
            submit_job(
                store,
                get_workload("softmax", {"rows": 8, "cols": 32}),
                target,
                4,
                batch_size=2,
                strategy="tpe",
                seed=2,
            ),
        ]
        engine = Engine(log, poll_secs=0.1)
        stop = threading.Event()
        daemons = [
            WorkerDaemon(queue, target, batch=2, config=FAST, poll_secs=0.1) for _ in range(2)
        ]
        threads = [threading.Thread(target=d.run, args=(stop,)) for d in daemons]
        engine.start()
        for thread in threads:
            thread.start()
        try:
            wait_for(lambda: all(store.job(job).status.final for job in jobs), "the jobs to end")
        finally:
            stop.set()
            engine.stop()
            for thread in threads:
                thread.join()
        for job in jobs:
            progress = store.job(job)
            assert progress.status is JobStatus.FINISHED
            assert progress.trials_done == progress.trials
            assert progress.best_latency_secs is not None and progress.curve
            assert progress.cost_model_id == model.id  # every job starts from the shared model
            records = log.records(progress.workload.id, progress.target.id)
            hashes = [r.program_hash for r in records]
            assert len(hashes) == len(set(hashes)) == progress.trials + 1  # and the baseline
        assert queue.metrics().queued == 0


@on_sqlite
def test_the_next_job_of_a_workload_continues_the_finished_jobs_search(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = count_session_starts(monkeypatch)
    target = host_target()
    workload = get_workload("matmul", {"M": 32, "N": 32, "K": 32})
    with TuningLog(db_url) as log:
        load_recording(DATA / "small_matmuls.json.gz", log, target)
        model = train_shared(log, target_family(target), evaluate=False).model
        store, queue = JobStore(log), LeaseQueue(log)
        engine = Engine(log, poll_secs=0.1)
        stop = threading.Event()
        daemon = WorkerDaemon(queue, target, batch=2, config=FAST, poll_secs=0.1)
        worker = threading.Thread(target=daemon.run, args=(stop,))
        engine.start()
        worker.start()
        try:
            jobs = []
            for trials in (4, 3):  # one after the other, as a model job's rounds of a task
                jobs.append(submit_job(store, workload, target, trials, batch_size=2, seed=1))
                wait_for(lambda: store.job(jobs[-1]).status.final, "the job to end")
        finally:
            stop.set()
            engine.stop()
            worker.join()
        # the second job continued the first one's session
        assert [job.trials for _, job in started] == [4]
        for job in jobs:
            progress = store.job(job)
            assert progress.status is JobStatus.FINISHED
            assert progress.trials_done == progress.trials
            assert progress.cost_model_id == model.id
        records = log.records(progress.workload.id, progress.target.id)
        hashes = [r.program_hash for r in records]
        assert len(hashes) == len(set(hashes)) == 1 + 4 + 3
