"""Replaying a recorded tuning log as a measurer: recorded results, predictions and refusals."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import start_job

from autosched.errors import UserError
from autosched.log import TuningLog
from autosched.log.subjects import ensure_subject
from autosched.measure import LocalMeasurer, MeasureConfig
from autosched.records import (
    BASELINE_TRACE,
    CandidateResult,
    ErrorKind,
    MeasureResult,
    RecordView,
    WorkloadRef,
)
from autosched.replay import ReplayCounts, ReplayMeasurer, check_not_source
from autosched.schedule import apply_trace, program_hash
from autosched.target import canonical_target, host_target, target_key
from autosched.tuner import TuneOptions, tune
from autosched.workload import Workload
from autosched.workloads import get_workload

FAST = MeasureConfig(repeat=2, min_repeat_ms=1, run_timeout_secs=5)
SHAPE = {"M": 32, "N": 32, "K": 32}


@dataclass(frozen=True)
class Recorded:
    """A log of one real tuning run of a small matmul on this machine."""

    workload: Workload
    target: dict
    log: TuningLog
    records: list[RecordView]

    @property
    def ref(self) -> WorkloadRef:
        return self.workload.ref

    @property
    def baseline(self) -> RecordView:
        return next(record for record in self.records if record.trace_json == BASELINE_TRACE)

    def unrecorded_traces(self) -> Iterator[str]:
        """Recorded traces with one sampled tiling reversed: programs the run never measured."""
        hashes = {record.program_hash for record in self.records}
        for record in self.records:
            insts, decisions = json.loads(record.trace_json)
            for decision in decisions:
                if isinstance(decision[1], list):
                    decision[1].reverse()
                    trace = json.dumps([insts, decisions])
                    if program_hash(apply_trace(self.workload.mod, trace).mod) not in hashes:
                        yield trace

    def unrecorded_trace(self) -> str:
        return next(self.unrecorded_traces())


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    workload = get_workload("matmul", SHAPE)
    target = canonical_target(host_target())
    log = TuningLog(f"sqlite:///{tmp_path_factory.mktemp('recorded') / 'log.db'}")
    measurer = LocalMeasurer(target, FAST)
    try:
        tune(workload, target, log, measurer, TuneOptions(trials=8, batch_size=8, seed=1))
    finally:
        measurer.close()
    stored_workload = log.find_workload(workload.key)
    stored_target = log.find_target(target_key(target))
    assert stored_workload is not None and stored_target is not None
    records = log.records(stored_workload.id, stored_target.id)
    yield Recorded(workload, target, log, records)
    log.close()


def test_every_recorded_candidate_replays_to_its_recorded_samples(recorded: Recorded) -> None:
    traces = [record.trace_json for record in recorded.records]
    assert len(traces) == 1 + 8  # the baseline and every trial
    measurer = ReplayMeasurer(recorded.log, recorded.target)
    results = measurer.measure(recorded.ref, traces)
    assert [result.samples for result in results] == [r.samples for r in recorded.records]
    assert all(result.ok for result in results)
    assert measurer.counts == ReplayCounts(replayed=len(traces), predicted=0, refused=0)


def test_a_program_the_log_never_measured_is_refused(recorded: Recorded) -> None:
    measurer = ReplayMeasurer(recorded.log, recorded.target)
    unrecorded = recorded.unrecorded_trace()
    not_replayable = recorded.records[1].trace_json.replace('"C","main"', '"X","main"')
    results = measurer.measure(recorded.ref, [unrecorded, not_replayable])
    other_workload = get_workload("matmul", {"M": 16, "N": 32, "K": 32}).ref
    results += measurer.measure(other_workload, [BASELINE_TRACE])

    assert all(r.error_kind is ErrorKind.UNRECORDED and not r.samples for r in results)
    assert "is not in the replayed log" in (results[0].error_msg or "")
    assert "does not replay onto matmul" in (results[1].error_msg or "")
    assert measurer.counts == ReplayCounts(replayed=0, predicted=0, refused=3)
    assert measurer.verify(recorded.ref, unrecorded, seed=0) == results[0]


def test_predict_answers_what_the_log_lacks_and_is_counted(recorded: Recorded) -> None:
    unrecorded, unguessed = itertools.islice(recorded.unrecorded_traces(), 2)
    not_replayable = recorded.records[1].trace_json.replace('"C","main"', '"X","main"')
    asked: list[Sequence[str]] = []

    def predict(workload: WorkloadRef, traces: Sequence[str]) -> list[float | None]:
        asked.append(traces)
        return [2e-6 if trace == unrecorded else None for trace in traces]

    measurer = ReplayMeasurer(recorded.log, recorded.target, predict=predict)
    baseline, guessed, not_guessed, refused = measurer.measure(
        recorded.ref, [BASELINE_TRACE, unrecorded, unguessed, not_replayable]
    )

    assert baseline.samples == recorded.baseline.samples
    assert guessed == MeasureResult(samples=(2e-6,))
    assert not_guessed.error_kind is refused.error_kind is ErrorKind.UNRECORDED
    assert asked == [[unrecorded, unguessed]]  # once per batch, for what replays but is unrecorded
    assert measurer.counts == ReplayCounts(replayed=1, predicted=1, refused=2)
    assert measurer.verify(recorded.ref, unrecorded, seed=0) is None
    assert measurer.verify(recorded.ref, unguessed, seed=0) == not_guessed


def test_a_prediction_that_is_no_latency_is_an_error(recorded: Recorded) -> None:
    measurer = ReplayMeasurer(recorded.log, recorded.target, predict=lambda _, t: [-1.0] * len(t))
    with pytest.raises(ValueError, match="not a positive number of seconds"):
        measurer.measure(recorded.ref, [recorded.unrecorded_trace()])


def test_verify_returns_the_recorded_check(recorded: Recorded, db_url: str) -> None:
    """Timing a program never checks its output: an incorrect program's samples come back from
    measure, its recorded incorrectness from verify, as a real measurer's would."""
    wrong, broken = recorded.records[1].trace_json, recorded.unrecorded_trace()
    results = {
        BASELINE_TRACE: MeasureResult(samples=(4e-6,)),
        wrong: MeasureResult(samples=(1e-6,), error_kind=ErrorKind.INCORRECT, error_msg="zeros"),
        broken: MeasureResult(error_kind=ErrorKind.BUILD, error_msg="no code"),
    }
    with TuningLog(db_url) as source:
        _record(source, recorded.workload, recorded.target, results)
        measurer = ReplayMeasurer(source, recorded.target)
        measured = measurer.measure(recorded.ref, list(results))
        checks = [measurer.verify(recorded.ref, trace, seed=1) for trace in results]

    assert measured == [
        MeasureResult(samples=(4e-6,)),
        MeasureResult(samples=(1e-6,)),
        MeasureResult(error_kind=ErrorKind.BUILD, error_msg="no code"),
    ]
    assert checks == [
        None,
        MeasureResult(error_kind=ErrorKind.INCORRECT, error_msg="zeros"),
        MeasureResult(error_kind=ErrorKind.BUILD, error_msg="no code"),
    ]
    assert measurer.counts == ReplayCounts(replayed=3, predicted=0, refused=0)


def test_simulated_measurements_cannot_be_recorded_into_their_source(db_url: str) -> None:
    target = host_target()
    with TuningLog(db_url) as source, TuningLog(db_url) as same:
        measurer = ReplayMeasurer(source, target)
        with pytest.raises(UserError, match="cannot be recorded into the log they replay"):
            check_not_source(measurer, same)


def test_the_source_is_recognised_by_any_path_to_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    target = host_target()
    with (
        TuningLog(f"sqlite:///{tmp_path / 'log.db'}") as source,
        TuningLog("sqlite:///log.db") as same,
        TuningLog("sqlite:///other.db") as other,
    ):
        measurer = ReplayMeasurer(source, target)
        with pytest.raises(UserError):
            check_not_source(measurer, same)
        check_not_source(measurer, other)


def test_tune_runs_on_a_replayed_log(recorded: Recorded, db_url: str) -> None:
    """The baseline replays, and so does any program proposed again; the others are refused and
    logged as failures. A log of such a run, replayed in turn, holds no measurement of them."""
    measurer = ReplayMeasurer(recorded.log, recorded.target)
    recorded_by_hash = {record.program_hash: record for record in recorded.records}
    with TuningLog(db_url) as scratch:
        check_not_source(measurer, scratch)
        report = tune(
            recorded.workload,
            recorded.target,
            scratch,
            measurer,
            TuneOptions(trials=8, batch_size=8, seed=1),
        )
        stored_workload, stored_target = ensure_subject(scratch, recorded.workload, recorded.target)
        simulated = scratch.records(stored_workload.id, stored_target.id)
        refused = [r for r in simulated if r.error_kind is ErrorKind.UNRECORDED]
        replay_of_replay = ReplayMeasurer(
            scratch, recorded.target, predict=lambda _, t: [1e-6] * len(t)
        )
        replay_of_replay.measure(recorded.ref, [r.trace_json for r in refused])

    counts = measurer.counts
    assert report.trials == 8 and counts.predicted == 0
    assert counts.replayed + counts.refused == len(simulated) == 1 + 8
    assert report.baseline_latency_secs == recorded.baseline.median_secs
    assert replay_of_replay.counts == ReplayCounts(replayed=0, predicted=len(refused), refused=0)
    assert len(refused) == counts.refused == report.failed
    for record in simulated:
        if record.error_kind is not ErrorKind.UNRECORDED:
            assert record.samples == recorded_by_hash[record.program_hash].samples
    assert report.best_latency_secs == min(
        r.median_secs for r in simulated if r.median_secs is not None
    )


def _record(
    log: TuningLog, workload: Workload, target: dict, results: dict[str, MeasureResult]
) -> None:
    """Store ``results`` (trace -> result) as one job's measurements."""
    stored_workload, stored_target = ensure_subject(log, workload, target)
    job = start_job(
        log, stored_workload.id, stored_target.id, len(results), strategy="evolutionary", seed=None
    )
    log.record_batch(
        job,
        [
            CandidateResult(trace, program_hash(apply_trace(workload.mod, trace).mod), result)
            for trace, result in results.items()
        ],
    )
