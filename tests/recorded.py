"""Recorded tuning logs shipped with the tests: real measurements of this project's workloads,
stored as gzipped JSON so tests about learning run without spending hardware time.

``write_recording`` made the files in ``tests/data/`` from a real log; ``load_recording`` replays
one into a fresh log, one job per workload, with the samples as they were measured.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from helpers import start_job

from autosched.log import TuningLog
from autosched.log.subjects import ensure_subject
from autosched.records import CandidateResult, ErrorKind, MeasureResult
from autosched.workloads import get_workload

DATA = Path(__file__).parent / "data"


def write_recording(log: TuningLog, path: Path) -> None:
    """Write every workload's measurements in ``log`` (one target) to ``path``."""
    workloads = []
    for row in log.summary():
        workload = log.find_workload(row.workload_key)
        target = log.find_target(row.target_key)
        assert workload is not None and target is not None
        records = log.records(workload.id, target.id)
        workloads.append(
            {
                "name": workload.name,
                "params": workload.params,
                "target": target.target_json,
                "records": [
                    [r.trace_json, r.program_hash, list(r.samples), r.error_kind, r.verified]
                    for r in records
                ],
            }
        )
    with gzip.open(path, "wt") as file:
        json.dump(workloads, file, separators=(",", ":"))


def load_recording(path: Path, log: TuningLog, target: dict | None = None) -> list[str]:
    """Record the measurements of ``path`` into ``log``, filed under ``target`` if given (else the
    recorded one); returns the workload keys, in order."""
    with gzip.open(path, "rt") as file:
        workloads = json.load(file)
    keys = []
    for item in workloads:
        workload = get_workload(item["name"], item["params"])
        stored, stored_target = ensure_subject(log, workload, target or item["target"])
        job = start_job(
            log,
            stored.id,
            stored_target.id,
            len(item["records"]),
            batch_size=32,
            strategy="evolutionary",
        )
        log.record_batch(
            job,
            [
                CandidateResult(
                    trace_json=trace,
                    program_hash=program,
                    result=MeasureResult(
                        samples=tuple(samples),
                        error_kind=None if error is None else ErrorKind(error),
                    ),
                    verified=verified,
                )
                for trace, program, samples, error, verified in item["records"]
            ],
        )
        keys.append(workload.key)
    return keys
