"""Isolated measurement: child processes, timing, failures recorded as data, verification."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from faults import Abort, Fail, FaultyMeasurer, ParentPid, Pid, Sleep, Threads, faulty_matmul
from helpers import host_pid, wait_for

from autosched.admission import COLD_CACHE, program_json
from autosched.measure import LocalMeasurer, MeasureConfig, program
from autosched.measure.child import ChildDied, ChildProcess, ChildTimeout, RequestFailed
from autosched.measure.program import ESTIMATE_CALLS, BuildRequest, fastest_call_ms
from autosched.measure.serving import Request
from autosched.records import BASELINE_TRACE, ErrorKind
from autosched.schedule import trace_to_json
from autosched.search.space import design_space
from autosched.target import host_target
from autosched.workload import workload_from_ir_json
from autosched.workloads import get_workload

# Builds real programs or starts processes.
pytestmark = pytest.mark.slow

FAST = MeasureConfig(repeat=2, min_repeat_ms=1, run_timeout_secs=2.5, build_timeout_secs=60)
SHAPE = {"M": 32, "N": 32, "K": 32}


@pytest.fixture(scope="module")
def matmul():
    return get_workload("matmul", SHAPE).ref


@pytest.mark.parametrize(
    ("call", "limit", "error", "message", "replaced"),
    [
        (Fail(), 30, RequestFailed, "this request always fails", False),
        (Sleep(60), 1, ChildTimeout, "killed", True),
        (Abort(), 30, ChildDied, "SIGABRT", True),
    ],
    ids=["request fails", "runs past its limit", "dies"],
)
def test_child_survives_a_failing_request_and_is_replaced_when_killed_or_dead(
    call: Request, limit: float, error: type[Exception], message: str, replaced: bool
) -> None:
    """A failing request leaves the child serving; one that runs past its limit gets it killed,
    one that kills it is reported with its signal: either way a new child serves the next."""
    child = ChildProcess()
    try:
        pid = child.call(Pid(), 30)
        with pytest.raises(error, match=message):
            child.call(call, limit)
        assert (child.call(Pid(), 30) != pid) is replaced
    finally:
        child.close()


def test_children_are_recycled_after_a_fixed_number_of_requests() -> None:
    child = ChildProcess(max_requests=2)
    try:
        pids = [child.call(Pid(), 30) for _ in range(5)]
    finally:
        child.close()
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]


def test_children_are_forked_by_one_fork_server_that_is_replaced_if_it_dies() -> None:
    first, second = ChildProcess(), ChildProcess()
    try:
        server = host_pid(first.call(ParentPid(), 30))
        assert host_pid(second.call(ParentPid(), 30)) == server != os.getpid()
        os.kill(server, signal.SIGKILL)
        # the children it forked serve on; one that dies is replaced from a new fork server
        assert first.call(Pid(), 30) > 0
        with pytest.raises(ChildDied, match="lost with its fork server"):
            first.call(Abort(), 30)
        replacement = host_pid(first.call(ParentPid(), 30))
        assert replacement not in (server, os.getpid())
        second.close()
        assert host_pid(second.call(ParentPid(), 30)) == replacement
    finally:
        first.close()
        second.close()


def test_the_fork_server_and_its_children_end_with_their_parent() -> None:
    program = textwrap.dedent(
        """
        from autosched.torch_guard import keep_torch_out
        keep_torch_out()
        from faults import ParentPid, Pid
        from helpers import host_pid
        from autosched.measure.child import ChildProcess
        child = ChildProcess()
        server, pid = child.call(ParentPid(), 30), child.call(Pid(), 30)
        print(host_pid(server), host_pid(pid), flush=True)
        """
    )
    parent = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    server, child = map(int, parent.stdout.split())
    wait_for(lambda: not _running(server) and not _running(child), "the processes to end")


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def test_candidates_are_timed_on_the_targets_cores_and_built_on_one() -> None:
    cores = os.cpu_count() or 1  # TVM's pool is at most as wide as the CPUs
    measurer = LocalMeasurer({**host_target(), "num-cores": cores}, FAST)
    try:
        assert measurer._runner.call(Threads(), 30) == cores
        assert measurer._all_builders[0].call(Threads(), 30) == 1
    finally:
        measurer.close()


def test_every_repeat_is_a_sample_and_failures_are_data(matmul) -> None:
    measurer = LocalMeasurer(host_target(), MeasureConfig(repeat=4, min_repeat_ms=1))
    try:
        results = measurer.measure(matmul, [BASELINE_TRACE, "not a trace"])
    finally:
        measurer.close()
    good, bad = results
    assert good.ok and len(good.samples) == 4 and all(s > 0 for s in good.samples)
    assert min(good.samples) <= good.median <= max(good.samples)
    assert good.build_secs is not None and good.started_at <= good.finished_at
    assert not bad.ok and bad.error_kind is ErrorKind.BUILD and "JSON" in bad.error_msg


def test_a_workload_timed_cold_is_timed_one_flushed_call_a_sample(matmul) -> None:
    workload = get_workload("matmul", SHAPE)
    marked = workload.func.with_attr(COLD_CACHE, True)
    cold = workload_from_ir_json(program_json(marked), name="matmul")
    assert cold.timed_cold and not workload.timed_cold and cold.key != workload.key
    config = MeasureConfig(repeat=2, cold_repeat=9, min_repeat_ms=1)
    measurer = LocalMeasurer(host_target(), config)
    try:
        (warm_result,) = measurer.measure(matmul, [BASELINE_TRACE])
        (cold_result,) = measurer.measure(cold.ref, [BASELINE_TRACE])
    finally:
        measurer.close()
    assert warm_result.ok and len(warm_result.samples) == 2
    assert cold_result.ok and len(cold_result.samples) == 9


def test_a_cold_timings_estimate_of_a_call_outlasts_one_call_that_waited_for_its_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the calls advance a clock of their own, so that the suite's load plays no part
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(program, "time", SimpleNamespace(perf_counter=lambda: clock.now))

    def calls_taking(secs: list[float]) -> tuple[Callable[[], None], list[float]]:
        taken: list[float] = []
        durations = iter(secs)

        def call() -> None:
            taken.append(next(durations))
            clock.now += taken[-1]

        return call, taken

    # the warm-up call waited 1.5 ms for its core (a busy machine): the calls after it, while
    # they fit in the 2 ms budget, show the kernel takes microseconds
    call, taken = calls_taking([1.5e-3, 2e-5, 2e-5, 2e-5])
    assert fastest_call_ms(call, warmup=1, budget_ms=2.0) == pytest.approx(0.02)
    assert len(taken) == ESTIMATE_CALLS
    # a kernel slower than the budget is called no more than its warm-up asks
    call, taken = calls_taking([3e-3, 3e-3])
    assert fastest_call_ms(call, warmup=1, budget_ms=2.0) == pytest.approx(3.0)
    assert len(taken) == 1


def test_crashing_and_hanging_candidates_are_recorded_and_the_batch_goes_on(matmul) -> None:
    faults = {
        '"crash"': faulty_matmul("crash", 32, 32, 32),
        '"hang"': faulty_matmul("hang", 32, 32, 32),
    }
    measurer = FaultyMeasurer(host_target(), FAST, faults)
    try:
        results = measurer.measure(matmul, ['"crash"', BASELINE_TRACE, '"hang"', BASELINE_TRACE])
    finally:
        measurer.close()
    kinds = [result.error_kind for result in results]
    assert kinds == [ErrorKind.CRASH, None, ErrorKind.RUN_TIMEOUT, None]
    assert "SIGABRT" in results[0].error_msg
    assert results[1].ok and results[3].ok


def test_verification_catches_a_wrong_answer(matmul) -> None:
    measurer = FaultyMeasurer(host_target(), FAST, {'"wrong"': faulty_matmul("wrong", 32, 32, 32)})
    try:
        measured = measurer.measure(matmul, ['"wrong"', BASELINE_TRACE])
        assert all(result.ok for result in measured)
        wrong = measurer.verify(matmul, '"wrong"', seed=1)
        right = measurer.verify(matmul, BASELINE_TRACE, seed=1)
    finally:
        measurer.close()
    assert wrong is not None and wrong.error_kind is ErrorKind.INCORRECT
    assert "differs from the reference" in wrong.error_msg
    assert right is None


def test_verification_builds_candidates_it_has_not_seen(matmul) -> None:
    measurer = LocalMeasurer(host_target(), FAST)
    try:
        assert measurer.verify(matmul, BASELINE_TRACE, seed=3) is None
    finally:
        measurer.close()


def test_weights_packed_ahead_are_timed_packed_and_checked_as_the_workload_takes_them(
    tmp_path: Path,
) -> None:
    workload = get_workload("matmul", {**SHAPE, "weights": "B"})
    target = host_target()
    space = design_space(workload, target, seed=0)
    traces = []
    for index in range(8):
        sch = space.sample(lambda _name, choices, index=index: choices[index % len(choices)])
        if sch is not None and "layout_rewrite_preproc" in sch.mod.script():
            traces.append(trace_to_json(sch.trace))
    assert traces, "no sampled schedule stores the weight in a layout of its own"
    measurer = LocalMeasurer(target, FAST)
    try:
        results = measurer.measure(workload.ref, [BASELINE_TRACE, *traces[:2]])
        assert all(result.ok for result in results), results
        for trace in [BASELINE_TRACE, *traces[:2]]:
            assert measurer.verify(workload.ref, trace, seed=5) is None
        # both ways of building: the timed program takes B packed, the checked one as it is
        request = BuildRequest(workload.ref, traces[0], target, str(tmp_path / "direct.so"))
        packed = request.execute()
        plain = replace(request, prepacked=False).execute()
    finally:
        measurer.close()
    assert packed.prepacked and not plain.prepacked and plain.args == tuple(workload.args)
    assert packed.args[0] == workload.args[0] and packed.args[2] == workload.args[2]


def test_build_that_runs_past_its_limit_is_a_build_timeout(matmul) -> None:
    config = MeasureConfig(repeat=1, min_repeat_ms=1, build_timeout_secs=0.001, builders=1)
    measurer = LocalMeasurer(host_target(), config)
    try:
        (result,) = measurer.measure(matmul, [BASELINE_TRACE])
    finally:
        measurer.close()
    assert result.error_kind is ErrorKind.BUILD_TIMEOUT
