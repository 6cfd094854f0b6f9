"""The tuning loop end to end: trials, the log, resume without re-measuring, faults, the gate."""

from __future__ import annotations

from dataclasses import replace

import pytest
from faults import FaultyMeasurer, faulty_matmul
from helpers import count_session_starts, on_sqlite, one_core_target
from tvm.s_tir.meta_schedule import TuneContext

from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.measure import MeasureConfig
from autosched.records import BASELINE_TRACE, ErrorKind, JobStatus
from autosched.sessions import OpenSession, OpenSessions
from autosched.target import host_target, target_key
from autosched.tuner import TuneOptions, tune
from autosched.workloads import get_workload

# Builds real programs or starts processes.
pytestmark = pytest.mark.slow

FAST = MeasureConfig(repeat=2, min_repeat_ms=2, run_timeout_secs=2.5)
SHAPE = {"M": 64, "N": 64, "K": 64}


def _ids(log: TuningLog, workload, target: dict) -> tuple[int, int]:
    found_workload = log.find_workload(workload.key)
    found_target = log.find_target(target_key(target))
    assert found_workload is not None and found_target is not None
    return found_workload.id, found_target.id


@on_sqlite
def test_tune_measures_the_budget_and_resume_adds_new_candidates_only(db_url: str) -> None:
    workload = get_workload("matmul", SHAPE)
    target = one_core_target()
    log = TuningLog(db_url)
    measurer = FaultyMeasurer(target, FAST, {})
    try:
        # single measurements decide here (no finalists), so the best can only improve
        options = TuneOptions(trials=8, batch_size=4, seed=1, finalists=0)
        first = tune(workload, target, log, measurer, options)
        ids = _ids(log, workload, target)
        after_first = {r.program_hash for r in log.records(*ids)}
        measured_first = len(measurer.measured)

        options = TuneOptions(trials=6, batch_size=4, seed=2, finalists=0)
        second = tune(workload, target, log, measurer, options)
        records = log.records(*ids)
    finally:
        measurer.close()
        log.close()

    assert first.trials == 8 and second.trials == 6
    # the untuned baseline once, then every trial; nothing measured twice
    assert measured_first == 1 + 8
    assert len(measurer.measured) == 1 + 8 + 6
    assert len(records) == 1 + 8 + 6
    assert len({r.program_hash for r in records}) == len(records)
    assert after_first < {r.program_hash for r in records}
    assert first.baseline_latency_secs == second.baseline_latency_secs
    # the best only improves, is verified, and is what the report says
    assert second.best_latency_secs <= first.best_latency_secs
    with TuningLog(db_url) as reopened:
        best = reopened.best(*ids)
        job = JobStore(reopened).job(second.job_id)
    assert best is not None and best.verified and best.median_secs == second.best_latency_secs
    assert best.median_secs < first.baseline_latency_secs
    assert job.status is JobStatus.FINISHED and job.trials_done == 6
    assert first.speedup is not None and first.speedup > 1
    assert first.gflops == pytest.approx(2 * 64**3 / first.best_latency_secs / 1e9)


def test_hanging_and_crashing_candidates_are_recorded_and_tuning_finishes(tmp_path) -> None:
    workload = get_workload("matmul", SHAPE)
    target = host_target()
    log = TuningLog(f"sqlite:///{tmp_path / 'log.db'}")
    measurer = SabotageMeasurer(target, {"crash": 1, "hang": 2})
    options = TuneOptions(trials=6, batch_size=6, seed=3, finalists=0)
    try:
        report = tune(workload, target, log, measurer, options)
        records = log.records(*_ids(log, workload, target))
    finally:
        measurer.close()
        log.close()
    kinds = {r.trace_json: r.error_kind for r in records}
    assert kinds[measurer.sabotaged["crash"]] is ErrorKind.CRASH
    assert kinds[measurer.sabotaged["hang"]] is ErrorKind.RUN_TIMEOUT
    assert report.trials == 6 and report.failed == 2
    assert sum(r.error_kind is None for r in records) == 1 + 4


def test_an_incorrect_candidate_never_becomes_best(tmp_path) -> None:
    workload = get_workload("matmul", SHAPE)
    target = host_target()
    log = TuningLog(f"sqlite:///{tmp_path / 'log.db'}")
    measurer = SabotageMeasurer(target, {"wrong": 0})
    try:
        report = tune(workload, target, log, measurer, TuneOptions(trials=4, batch_size=4, seed=4))
        ids = _ids(log, workload, target)
        records = {r.trace_json: r for r in log.records(*ids)}
        best = log.best(*ids)
    finally:
        measurer.close()
        log.close()
    wrong = records[measurer.sabotaged["wrong"]]
    assert wrong.error_kind is ErrorKind.INCORRECT and not wrong.verified
    # it was the fastest program of all (it only writes zeros), yet the best is another one
    assert wrong.samples and min(wrong.samples) < report.baseline_latency_secs
    assert best is not None and best.trace_json != wrong.trace_json and best.verified
    # nor through the final, whose winner is the best record at its re-timed median
    assert wrong.program_hash not in {finalist.program_hash for finalist in report.finalists}
    assert best.program_hash == report.finalists[0].program_hash
    assert report.best_latency_secs == report.finalists[0].median_secs


def test_a_final_winner_never_checked_before_is_checked_and_its_record_verified(tmp_path) -> None:
    # one batch verifies only its fastest candidate; the re-timing here makes one of the others
    # the final's winner, as noise can, so the final checks it
    workload = get_workload("matmul", SHAPE)
    target = host_target()
    with TuningLog(f"sqlite:///{tmp_path / 'log.db'}") as log:
        measurer = UncheckedWinsMeasurer(target, log, workload)
        try:
            report = tune(
                workload, target, log, measurer, TuneOptions(trials=4, batch_size=4, seed=4)
            )
        finally:
            measurer.close()
        ids = _ids(log, workload, target)
        best = log.best(*ids)
        records = {r.program_hash: r for r in log.records(*ids)}
    assert measurer.winner is not None  # an entrant that was unverified when the final began
    assert report.finalists[0].trace_json == measurer.winner
    assert best is not None and best.trace_json == measurer.winner and best.verified
    # the finalists after the winner were not checked: only a best record must be shown correct
    after = [f for f in report.finalists[1:] if f.trace_json in measurer.unverified]
    assert after and not any(records[f.program_hash].verified for f in after)


def test_the_untuned_program_enters_the_final_and_wins_where_no_candidate_beats_it(
    tmp_path,
) -> None:
    workload = get_workload("matmul", SHAPE)
    target = host_target()
    with TuningLog(f"sqlite:///{tmp_path / 'log.db'}") as log:
        measurer = UntunedWinsMeasurer(target)
        try:
            report = tune(
                workload, target, log, measurer, TuneOptions(trials=4, batch_size=4, seed=4)
            )
        finally:
            measurer.close()
        best = log.best(*_ids(log, workload, target))
    entered = [finalist.trace_json for finalist in report.finalists]
    assert BASELINE_TRACE in measurer.entrants and len(entered) == len(measurer.entrants) >= 2
    assert entered[0] == BASELINE_TRACE
    assert best is not None and best.trace_json == BASELINE_TRACE and best.verified
    # both latencies of the report come from the one re-timing
    assert report.best_latency_secs == report.baseline_latency_secs == 1e-3
    assert report.speedup == 1


class UntunedWinsMeasurer(FaultyMeasurer):
    """Re-times the untuned program faster than every tuned candidate of the final."""

    def __init__(self, target: dict) -> None:
        super().__init__(target, FAST, {})
        self.entrants: list[str] = []

    def retime(self, workload, traces, rounds):  # type: ignore[no-untyped-def]
        self.entrants = list(traces)
        return [[1e-3 if trace == BASELINE_TRACE else 2e-3] * rounds for trace in traces]


class UncheckedWinsMeasurer(FaultyMeasurer):
    """Re-times the entrants of a final so that one whose record is not verified yet wins."""

    def __init__(self, target: dict, log: TuningLog, workload) -> None:  # type: ignore[no-untyped-def]
        super().__init__(target, FAST, {})
        self._log = log
        self._workload = workload
        self.winner: str | None = None
        self.unverified: set[str] = set()  # the programs not verified when the final began

    def retime(self, workload, traces, rounds):  # type: ignore[no-untyped-def]
        records = self._log.records(*_ids(self._log, self._workload, self._target))
        self.unverified = {r.trace_json for r in records if not r.verified}
        self.winner = next((trace for trace in traces if trace in self.unverified), None)
        return [[2e-3 if trace != self.winner else 1e-3] * rounds for trace in traces]


class SabotageMeasurer(FaultyMeasurer):
    """Replaces the i-th measured candidate (0-based, baseline excluded) by a faulty program."""

    def __init__(self, target: dict, positions: dict[str, int]) -> None:
        super().__init__(target, FAST, {})
        self._positions = {index: fault for fault, index in positions.items()}
        self.sabotaged: dict[str, str] = {}
        self._seen = 0

    def measure(self, workload, traces):  # type: ignore[no-untyped-def]
        for trace in traces:
            if trace == BASELINE_TRACE:
                continue
            fault = self._positions.get(self._seen)
            if fault is not None:
                self.faults[trace] = faulty_matmul(fault, 64, 64, 64)
                self.sabotaged[fault] = trace
            self._seen += 1
        return super().measure(workload, traces)


class InterruptingMeasurer(FaultyMeasurer):
    """Raises KeyboardInterrupt, as Ctrl-C would, on its ``at``-th call to measure."""

    def __init__(self, target: dict, at: int) -> None:
        super().__init__(target, FAST, {})
        self._at = at
        self._calls = 0

    def measure(self, workload, traces):  # type: ignore[no-untyped-def]
        self._calls += 1
        if self._calls == self._at:
            raise KeyboardInterrupt
        return super().measure(workload, traces)


@on_sqlite
def test_an_interrupted_run_keeps_its_completed_batches(db_url: str) -> None:
    workload = get_workload("matmul", SHAPE)
    target = host_target()
    log = TuningLog(db_url)
    measurer = InterruptingMeasurer(target, at=3)  # baseline, one batch, then Ctrl-C
    try:
        with pytest.raises(KeyboardInterrupt):
            tune(workload, target, log, measurer, TuneOptions(trials=12, batch_size=4, seed=5))
        records = log.records(*_ids(log, workload, target))
        job = JobStore(log).job(1)
    finally:
        measurer.close()
        log.close()
    assert len(records) == 1 + 4  # the baseline and the one completed batch
    assert job.status is JobStatus.INTERRUPTED and job.trials_done == 4  # the baseline apart


def test_a_program_whose_epilogue_cannot_be_fused_is_still_tuned(tmp_path) -> None:
    """MetaSchedule's multi-level tiling cannot fuse conv1d_glu's gate (it reads two channels of
    one convolution); the search falls back to the space without that fusion."""
    workload = get_workload("conv1d_glu", {"L": 16, "C": 32})
    target = host_target()
    log = TuningLog(f"sqlite:///{tmp_path / 'log.db'}")
    measurer = FaultyMeasurer(target, FAST, {})
    options = TuneOptions(trials=3, batch_size=3, seed=6, finalists=0)
    try:
        report = tune(workload, target, log, measurer, options)
    finally:
        measurer.close()
        log.close()
    assert report.trials == 3 and report.failed == 0
    assert report.best_latency_secs is not None


@on_sqlite
def test_a_kept_session_continues_in_the_next_job_and_catches_up_on_the_log(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = count_session_starts(monkeypatch)
    workload = get_workload("matmul", SHAPE)
    target = one_core_target()
    log = TuningLog(db_url)
    measurer = InterruptingMeasurer(target, at=5)  # the fourth job's batch
    sessions = OpenSessions()
    options = TuneOptions(trials=4, batch_size=4, seed=1, finalists=0)
    try:
        first = tune(workload, target, log, measurer, options, sessions=sessions)
        assert len(sessions) == 1
        # another job measures the workload in between, without the kept session
        tune(workload, target, log, measurer, replace(options, trials=3, seed=2))
        second = tune(workload, target, log, measurer, options, sessions=sessions)
        assert len(sessions) == 1
        with pytest.raises(KeyboardInterrupt):
            tune(workload, target, log, measurer, options, sessions=sessions)
        records = log.records(*_ids(log, workload, target))
    finally:
        measurer.close()
        log.close()
    # the kept session was started once and continued; the job in between started its own
    assert [strategy for strategy, _ in started] == ["evolutionary", "evolutionary"]
    assert second.cost_model == first.cost_model
    # nothing measured twice: the kept session learnt what the other job measured
    assert len(records) == 1 + 4 + 3 + 4
    assert len({r.program_hash for r in records}) == len(records)
    assert len(measurer.measured) == len(records)
    # a job that was stopped leaves no session open: the next one starts from the log
    assert len(sessions) == 0


@on_sqlite
def test_a_job_of_fewer_trials_than_its_batch_evolves_once_a_round_toward_its_trials(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model's round is a job of a few trials in batches of 64: its search picks as many
    programs as the round measures, in one evolution, not 64 in two or three."""
    started = count_session_starts(monkeypatch)
    evolutions: list[TuneContext] = []
    evolve = TuneContext.generate_measure_candidates

    def counting_evolve(context: TuneContext) -> object:
        evolutions.append(context)
        return evolve(context)

    monkeypatch.setattr(TuneContext, "generate_measure_candidates", counting_evolve)
    target = one_core_target()
    log = TuningLog(db_url)
    measurer = FaultyMeasurer(target, FAST, {})
    try:
        report = tune(
            get_workload("matmul", SHAPE),
            target,
            log,
            measurer,
            TuneOptions(trials=3, batch_size=64, seed=1, finalists=0),
        )
    finally:
        measurer.close()
        log.close()
    assert report.trials == 3
    assert [job.batch_size for _, job in started] == [3]
    assert len(evolutions) == 1


def test_open_sessions_close_the_least_recently_kept_beyond_their_capacity() -> None:
    sessions = OpenSessions(capacity=2)
    kept = {name: OpenSession(session=object(), started_from=None) for name in "abc"}  # type: ignore[arg-type]
    keys = {name: (name, "llvm", "evolutionary") for name in "abc"}
    sessions.keep(keys["a"], kept["a"])
    sessions.keep(keys["b"], kept["b"])
    sessions.keep(keys["a"], kept["a"])  # kept again: now the most recent
    sessions.keep(keys["c"], kept["c"])
    assert len(sessions) == 2
    assert sessions.take(keys["b"]) is None
    assert sessions.take(keys["a"]) is kept["a"] and sessions.take(keys["a"]) is None
    assert sessions.take(keys["c"]) is kept["c"] and len(sessions) == 0
