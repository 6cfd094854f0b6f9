"""Benchmark: lease-and-report round trips of the work queue on PostgreSQL, with simulated workers.

Each simulated worker leases a batch of candidates, reports a tiny result for each at once (no TVM
build, no timing) and leases again, until the queue is empty. Prints results per second for 1, 4
and 16 concurrent workers. Workers are threads of this process talking to the database directly
(the queue's own cost, no HTTP), each with its own connection from the pool.

    python benchmarks/queue_roundtrips.py [--db postgresql+psycopg://root@127.0.0.1:5432/test]
        [--workers 1 4 16] [--candidates 4000] [--batch 8]
"""

from __future__ import annotations

import argparse
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from sqlalchemy import create_engine, make_url, text

from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.leases import LeaseQueue
from autosched.records import MeasureResult, ReportedResult
from autosched.workloads import get_workload

TARGET = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}


def fresh_database(admin_url: str) -> tuple[str, object]:
    """A new empty PostgreSQL database next to ``admin_url``, and a function that drops it."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"autosched_bench_{uuid.uuid4().hex[:12]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(admin_url).set(database=name).render_as_string(hide_password=False), drop


def run(url: str, workers: int, candidates: int, batch: int) -> float:
    """Results per second for ``workers`` concurrent workers draining ``candidates``."""
    with TuningLog(url) as log:
        jobs, queue = JobStore(log), LeaseQueue(log)
        job = jobs.submit(
            get_workload("matmul", {"M": 64 + workers, "N": 64, "K": 64}),
            TARGET,
            trials=candidates,
            batch_size=batch,
            strategy="evolutionary",
            seed=0,
        )
        jobs.claim_jobs("bench", ttl_secs=3600)
        prefix = uuid.uuid4().hex[:8]
        for start in range(0, candidates, 500):
            jobs.enqueue(
                job,
                [
                    (f'["{prefix}{i}"]', f"{prefix}{i}", None)
                    for i in range(start, min(start + 500, candidates))
                ],
            )
        ids = [
            queue.register_worker(name=f"sim{i}", target=TARGET, fingerprint={"sim": i})
            for i in range(workers)
        ]

        def drain(worker_id: int) -> int:
            reported = 0
            while (lease := queue.lease(worker_id, batch)) is not None:
                now = datetime.now(UTC)
                result = MeasureResult(samples=(1e-3,), started_at=now, finished_at=now)
                queue.report(
                    worker_id,
                    lease.id,
                    [ReportedResult(c.candidate_id, result, False) for c in lease.candidates],
                )
                reported += len(lease.candidates)
            return reported

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            reported = sum(pool.map(drain, ids))
        elapsed = time.perf_counter() - start
        assert reported == candidates, f"{reported} of {candidates} reported"
        return reported / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="postgresql+psycopg://root@127.0.0.1:5432/test")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--candidates", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    url, drop = fresh_database(args.db)
    try:
        print(f"work queue on PostgreSQL, batch {args.batch}, {args.candidates} candidates")
        print(f"{'workers':>8}{'results/s':>12}{'round trips/s':>15}")
        for workers in args.workers:
            rate = run(url, workers, args.candidates, args.batch)
            print(f"{workers:>8}{rate:>12.0f}{rate / args.batch:>15.0f}")
    finally:
        drop()


if __name__ == "__main__":
    main()
