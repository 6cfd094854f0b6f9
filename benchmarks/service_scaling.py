"""Benchmark: trials per minute of the tuning service with 1, 2, 4 and 8 workers.

The workers use a simulated measurement backend that takes a fixed time per candidate and returns
a latency derived from the candidate's trace (no build, no run), so the figure is the service's:
the engine's search, the queue, leases and reports. Engine and workers run in this process, each
worker in its own thread with its own database connections, against a fresh PostgreSQL database.

    python benchmarks/service_scaling.py [--db postgresql+psycopg://root@127.0.0.1:5432/test]
        [--workers 1 2 4 8] [--secs 1.0] [--trials-per-worker 24]
"""

from __future__ import annotations

import argparse
import threading
import time

from queue_roundtrips import fresh_database

from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.leases import LeaseQueue
from autosched.measure.simulated import SimulatedMeasurer
from autosched.server.engine import Engine
from autosched.target import host_target
from autosched.workers.daemon import WorkerDaemon
from autosched.workloads import get_workload


def trials_per_minute(url: str, workers: int, secs: float, trials: int) -> float:
    target = host_target()
    with TuningLog(url) as log:
        jobs, queue = JobStore(log), LeaseQueue(log)
        workload = get_workload("matmul", {"M": 128 + workers, "N": 128, "K": 128})
        job = jobs.submit(
            workload,
            target,
            trials=trials,
            batch_size=8 * workers,
            strategy="evolutionary",
            seed=0,
        )
        engine = Engine(log, poll_secs=0.05)
        stop = threading.Event()
        daemons = [
            WorkerDaemon(queue, target, batch=4, measurer=SimulatedMeasurer(secs), poll_secs=0.5)
            for _ in range(workers)
        ]
        threads = [threading.Thread(target=d.run, args=(stop,)) for d in daemons]
        engine.start()
        for thread in threads:
            thread.start()
        try:
            while jobs.job(job).trials_done == 0:
                time.sleep(0.05)
            start, done_at_start = time.perf_counter(), jobs.job(job).trials_done
            while not jobs.job(job).status.final:
                time.sleep(0.1)
            elapsed = time.perf_counter() - start
            done = jobs.job(job).trials_done - done_at_start
        finally:
            stop.set()
            engine.stop()
            for thread in threads:
                thread.join()
        return done / elapsed * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="postgresql+psycopg://root@127.0.0.1:5432/test")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--secs", type=float, default=1.0)
    parser.add_argument("--trials-per-worker", type=int, default=24)
    args = parser.parse_args()
    url, drop = fresh_database(args.db)
    try:
        print(f"simulated measurement of {args.secs} s per candidate; PostgreSQL work queue")
        print(f"{'workers':>8}{'trials/min':>12}{'vs 1 worker':>13}{'ideal':>7}")
        base = None
        for workers in args.workers:
            rate = trials_per_minute(url, workers, args.secs, args.trials_per_worker * workers)
            base = base or rate / workers
            print(f"{workers:>8}{rate:>12.0f}{rate / base:>13.2f}{workers:>7}")
    finally:
        drop()


if __name__ == "__main__":
    main()
