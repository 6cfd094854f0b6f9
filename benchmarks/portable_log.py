"""Benchmark: the portable tuning log's file size and its export and import times.

Builds a SQLite log of ``--measurements`` synthetic measurements of real candidates: schedules
sampled from MetaSchedule's design space of a few small matmuls (real traces, real program
hashes), each measured on several targets with made-up timings (three samples) and provenance.
Then times `export_log` to a file, `import_log` of it into a fresh SQLite log and, when one
answers, a fresh PostgreSQL database, and prints the file's size per 1,000 measurements.

    python benchmarks/portable_log.py [--measurements 10000] [--programs 170]
        [--pg postgresql+psycopg://root@127.0.0.1:5432/test] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError

from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.portable import export_log, import_log
from autosched.log.subjects import ensure_subject
from autosched.records import CandidateResult, MeasureResult
from autosched.schedule import program_hash, trace_to_json
from autosched.search.space import design_space
from autosched.workloads import get_workload

SHAPES = ({"M": 64, "N": 64, "K": 64}, {"M": 128, "N": 64, "K": 32})
CPUS = ("znver3", "znver4", "skylake-avx512", "icelake-server", "haswell", "sapphirerapids")
BATCH = 500


def sample_candidates(shape: dict, programs: int, seed: int) -> list[tuple[str, str]]:
    """Up to ``programs`` distinct (trace, program hash) of the matmul's design space."""
    workload = get_workload("matmul", shape)
    space = design_space(workload, {"kind": "llvm", "mcpu": "znver3", "num-cores": 4}, seed=seed)
    rng = random.Random(seed)
    found: dict[str, str] = {}
    for _ in range(programs * 4):
        if len(found) == programs:
            break
        sch = space.sample(lambda _name, choices: rng.choice(choices))
        if sch is not None:
            found.setdefault(program_hash(sch.mod), trace_to_json(sch.trace))
    return [(trace, digest) for digest, trace in found.items()]


def build_log(url: str, measurements: int, programs: int) -> int:
    """Fill the log at ``url`` with ``measurements`` measurements; returns how many it holds."""
    candidates = {
        index: sample_candidates(shape, programs, seed=index) for index, shape in enumerate(SHAPES)
    }
    rng = random.Random(0)
    stored = 0
    started = datetime(2026, 11, 1, tzinfo=UTC)
    with TuningLog(url) as log:
        jobs = JobStore(log)
        targets = [
            {"kind": "llvm", "mcpu": cpu, "mtriple": "x86_64-unknown-linux-gnu", "num-cores": cores}
            for cpu in CPUS
            for cores in (4, 8, 16, 32, 64)
        ]
        for target in targets:
            device = log.ensure_device(
                {
                    "kind": "llvm",
                    "hostname": f"host-{target['mcpu']}-{target['num-cores']}",
                    "cpu_model": f"CPU {target['mcpu']}",
                    "physical_cores": target["num-cores"],
                    "tvm_version": "0.27.0",
                    "llvm_version": 17,
                }
            )
            for index, shape in enumerate(SHAPES):
                if stored >= measurements:
                    return stored
                stored_workload, stored_target = ensure_subject(
                    log, get_workload("matmul", shape), target
                )
                chosen = candidates[index][: measurements - stored]
                job = jobs.start_job(
                    workload_id=stored_workload.id,
                    target_id=stored_target.id,
                    trials=len(chosen),
                    batch_size=BATCH,
                    strategy="evolutionary",
                    seed=0,
                )
                results = []
                for trace, digest in chosen:
                    secs = rng.lognormvariate(-9, 0.5)
                    when = started + timedelta(seconds=stored + len(results))
                    results.append(
                        CandidateResult(
                            trace,
                            digest,
                            MeasureResult(
                                samples=(secs, secs * 1.02, secs * 0.99),
                                build_secs=0.4,
                                started_at=when,
                                finished_at=when + timedelta(seconds=1),
                            ),
                            verified=rng.random() < 0.2,
                            device_id=device,
                        )
                    )
                for start in range(0, len(results), BATCH):
                    stored += log.record_batch(job, results[start : start + BATCH])
    return stored


def postgres(admin_url: str) -> tuple[str, Callable[[], None]] | None:
    """A fresh PostgreSQL database and a function that drops it; None if the server is down."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"autosched_bench_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError:
        admin.dispose()
        return None

    def drop() -> None:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(admin_url).set(database=name).render_as_string(hide_password=False), drop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measurements", type=int, default=10_000)
    parser.add_argument("--programs", type=int, default=170, help="Sampled per matmul shape.")
    parser.add_argument("--pg", default="postgresql+psycopg://root@127.0.0.1:5432/test")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        source = f"sqlite:///{work / 'source.db'}"
        began = time.perf_counter()
        count = build_log(source, args.measurements, args.programs)
        build_secs = time.perf_counter() - began
        file = work / "log.jsonl.gz"
        with TuningLog(source) as log:
            began = time.perf_counter()
            summary = export_log(log, file)
            export_secs = time.perf_counter() - began
        imports: dict[str, float] = {}
        with TuningLog(f"sqlite:///{work / 'copy.db'}") as log:
            began = time.perf_counter()
            import_log(log, file)
            imports["sqlite"] = time.perf_counter() - began
        database = postgres(args.pg)
        if database is not None:
            url, drop = database
            try:
                with TuningLog(url) as log:
                    began = time.perf_counter()
                    import_log(log, file)
                    imports["postgresql"] = time.perf_counter() - began
            finally:
                drop()
    result = {
        "measurements": count,
        "file_bytes": summary.bytes,
        "bytes_per_1000_measurements": round(summary.bytes * 1000 / count),
        "build_secs": round(build_secs, 1),
        "export_secs": round(export_secs, 2),
        "import_secs": {name: round(secs, 2) for name, secs in imports.items()},
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"{count} measurements ({summary.counts}), built in {build_secs:.1f} s")
    print(
        f"file {summary.bytes / 1e6:.2f} MB, {result['bytes_per_1000_measurements'] / 1e3:.1f} kB "
        f"per 1,000 measurements"
    )
    print(f"export (SQLite)     {export_secs:6.2f} s")
    for name, secs in imports.items():
        print(f"import ({name:10}) {secs:6.2f} s")


if __name__ == "__main__":
    main()
