"""The benchmarks' timing protocol: contenders timed side by side share every round, in an order
that rotates, so a change of the machine's speed in the middle of a run falls on all alike."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from itertools import pairwise

import pytest

from autosched.bench import timing as bench_timing
from autosched.bench.timing import SETTLE_SECS, time_side_by_side, use_threads


class _Clock:
    """Calls that record their order, and run ``slowdown`` times longer once it is raised."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.slowdown = 1.0

    def call(self, name: str, secs: float):
        def run() -> None:
            self.order.append(name)
            time.sleep(secs * self.slowdown)

        return run


def test_each_round_times_every_contender_once_starting_one_further_along() -> None:
    clock = _Clock()
    calls = {"a": clock.call("a", 0.05), "b": clock.call("b", 0.07)}
    probes = iter([1.0, 2.0, 3.0])
    timings, probed = time_side_by_side(calls, rounds=3, between=lambda: next(probes))
    # after each one's warm-up call and the call that sizes its repeats (one call, 50 ms or more)
    assert clock.order[4:] == ["a", "b", "b", "a", "a", "b"]
    assert probed == [1.0, 2.0, 3.0]
    assert {name: timing.repeats for name, timing in timings.items()} == {"a": 3, "b": 3}
    assert 0.05 <= timings["a"].min_secs <= timings["a"].median_secs < timings["b"].median_secs


def test_a_slowdown_in_the_middle_of_the_run_falls_on_every_contender() -> None:
    clock = _Clock()
    calls = {"a": clock.call("a", 0.02), "b": clock.call("b", 0.02)}
    rounds = iter(range(4))

    def slow_down_after_the_second_round() -> float:
        clock.slowdown = 3.0 if next(rounds) >= 1 else 1.0
        return 0.0

    timings, _ = time_side_by_side(calls, rounds=4, between=slow_down_after_the_second_round)
    for timing in timings.values():
        assert timing.samples[0] < 0.04 and timing.samples[1] < 0.04
        assert min(timing.samples[2:]) > 0.05


def test_a_contender_far_slower_than_the_rest_takes_the_first_rounds_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TVM's untuned model beside tuned ones: more rounds of it would not move it nearer."""
    monkeypatch.setattr(bench_timing, "FAR_SLOWER_CALL_SECS", 0.1)
    monkeypatch.setattr(bench_timing, "FAR_SLOWER_ROUNDS", 1)
    clock = _Clock()
    calls = {"tuned": clock.call("tuned", 0.01), "untuned": clock.call("untuned", 0.12)}
    timings, probed = time_side_by_side(calls, rounds=2, between=lambda: 0.0)
    assert {name: t.repeats for name, t in timings.items()} == {"tuned": 2, "untuned": 1}
    assert len(probed) == 2
    # no longer far slower than the tuned one: every round
    calls = {"tuned": clock.call("tuned", 0.02), "untuned": clock.call("untuned", 0.12)}
    timings, _ = time_side_by_side(calls, rounds=2)
    assert {name: t.repeats for name, t in timings.items()} == {"tuned": 2, "untuned": 2}


def test_every_repeat_and_probe_starts_after_the_last_ones_threads_have_settled() -> None:
    """A library's threads spin after its call returns; whatever runs next waits them out."""
    spans: list[tuple[str, float, float]] = []  # (what, started, ended)

    def timed(name: str, secs: float):
        def run() -> None:
            started = time.perf_counter()
            time.sleep(secs)
            spans.append((name, started, time.perf_counter()))

        return run

    calls = {"a": timed("a", 0.06), "b": timed("b", 0.06)}
    time_side_by_side(calls, rounds=2, between=timed("probe", 0.001))
    changes = [(before, after) for before, after in pairwise(spans) if before[0] != after[0]]
    assert len(changes) >= 6  # sizing a, sizing b, then two rounds of a, b and the probe
    for before, after in changes:
        assert after[1] - before[2] >= SETTLE_SECS


def test_tvm_runs_on_the_threads_asked_for_in_a_process_started_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Left alone, TVM's pool takes half the logical CPUs: one on a 2-vCPU machine. It takes no
    more threads than the CPUs, so all of them are asked for, after the variable said one."""
    cpus = os.cpu_count() or 1
    if cpus < 2:
        pytest.skip("one CPU: every pool has one thread")
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    monkeypatch.setattr("autosched.bench.timing.use_peer_threads", lambda threads: None)
    use_threads(cpus)
    probe = "import tvm; print(tvm.runtime.num_threads())"
    threads = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert threads.stdout.strip() == str(cpus), threads.stderr
