"""`autosched check`: does a workload compute what its reference says, untuned and tuned, and does
its peer agree? Each stage runs in the measuring child processes, as tuning does.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autosched.log import TuningLog
from autosched.measure import LocalMeasurer, MeasureConfig
from autosched.records import BASELINE_TRACE
from autosched.target import canonical_target, target_key
from autosched.tuner import TuneOptions, tune
from autosched.workload import Workload, mismatch, random_inputs
from autosched.workloads.peers import has_peer, peer_for

# Checks time nothing that matters: one short repeat per candidate is enough.
CHECK_MEASURE_CONFIG = MeasureConfig(repeat=1, min_repeat_ms=1)


@dataclass(frozen=True)
class CheckResult:
    """One stage of a check: ``ok`` is None when the stage does not apply."""

    stage: str
    ok: bool | None
    detail: str


def check_workload(
    workload: Workload, target: dict, *, trials: int, seed: int
) -> list[CheckResult]:
    """The untuned program, the best of a short tuning (``trials`` candidates, in a throw-away
    log) and the peer, each against the reference on inputs drawn from ``seed``."""
    results = []
    measurer = LocalMeasurer(target, CHECK_MEASURE_CONFIG)
    try:
        ref = workload.ref
        failure = measurer.verify(ref, BASELINE_TRACE, seed)
        results.append(_verified("untuned", failure, "matches the reference"))
        with tempfile.TemporaryDirectory(prefix="autosched-check-") as work:
            log = TuningLog(f"sqlite:///{Path(work) / 'check.db'}")
            try:
                results.append(_check_tuned(workload, target, log, measurer, trials, seed))
            finally:
                log.close()
    finally:
        measurer.close()
    results.append(check_peer(workload, seed))
    return results


def _check_tuned(
    workload: Workload,
    target: dict,
    log: TuningLog,
    measurer: LocalMeasurer,
    trials: int,
    seed: int,
) -> CheckResult:
    # a check of correctness: no final re-times the finalists (nor a slow untuned program)
    options = TuneOptions(trials=trials, batch_size=trials, seed=seed, finalists=0)
    report = tune(workload, target, log, measurer, options)
    found_workload = log.find_workload(workload.key)
    found_target = log.find_target(target_key(canonical_target(target)))
    assert found_workload is not None and found_target is not None
    best = log.best(found_workload.id, found_target.id)
    if best is None:
        return CheckResult("tuned", False, f"no candidate of {report.trials} built and matched")
    failure = measurer.verify(workload.ref, best.trace_json, seed + 1)
    summary = f"best of {report.trials} trials ({report.failed} failed)"
    return _verified("tuned", failure, f"{summary} matches the reference")


def _verified(stage: str, failure: object, success: str) -> CheckResult:
    if failure is None:
        return CheckResult(stage, True, success)
    return CheckResult(stage, False, f"{failure.error_kind.value}: {failure.error_msg}")  # type: ignore[attr-defined]


def check_peer(workload: Workload, seed: int) -> CheckResult:
    """The peer's outputs against the reference; a workload peer is checked as a workload."""
    if workload.reference is None or not has_peer(workload.name):
        return CheckResult("peer", None, "no peer")
    peer = peer_for(workload)
    if peer.bind is None:
        return CheckResult("peer", None, f"{peer.name}: check it with `autosched check`")
    assert workload.num_outputs is not None
    inputs = random_inputs(workload, seed)[: -workload.num_outputs]
    expected = workload.reference(inputs)
    ways = peer.ways
    for way in ways:
        assert way.bind is not None
        difference = compare_outputs(way.bind(inputs)(), expected)
        if difference is not None:
            return CheckResult("peer", False, f"{way.name}: {difference}")
    names = " and ".join(way.name for way in ways)
    return CheckResult("peer", True, f"{names} match{'' if len(ways) > 1 else 'es'} the reference")


def compare_outputs(got: list[np.ndarray], expected: list[np.ndarray]) -> str | None:
    """None when every output matches within its dtype's tolerance, else the first difference."""
    for index, (out, ref) in enumerate(zip(got, expected, strict=True)):
        difference = mismatch(np.asarray(out), ref)
        if difference is not None:
            return f"output {index} {difference}"
    return None
