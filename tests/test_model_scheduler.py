"""The task scheduler's split of a model's budget, on synthetic learning curves: every task gets
a warm-up round, then rounds go where weight x expected improvement is largest, not evenly, and
tasks that stop improving get fewer."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from autosched.model.scheduler import TaskCurve, TaskScheduler, gradient, next_task

Curve = Callable[[int], float]
"""A task's best latency in seconds after so many trials."""


def improving(start: float = 1.0) -> Curve:
    return lambda trials: start * (0.3 + 0.7 * math.exp(-trials / 48))


def flat(start: float = 1.0) -> Curve:
    return lambda trials: start


def simulate(
    curves: Sequence[Curve],
    weights: Sequence[int],
    budget: int = 256,
    batch: int = 16,
    floors: Sequence[float] | None = None,
) -> tuple[list[int], list[int]]:
    """Run the scheduler against the curves: the trials each task got, and the order of rounds."""
    scheduler = TaskScheduler(weights, budget, batch, floors)
    order = []
    while (planned := scheduler.next_round()) is not None:
        trials = scheduler.curves[planned.index].trials + planned.trials
        scheduler.record(planned.index, planned.trials, curves[planned.index](trials))
        order.append(planned.index)
    assert sum(scheduler.allocation) == budget
    return scheduler.allocation, order


def test_every_task_gets_a_warm_up_round_first() -> None:
    _, order = simulate([improving(), flat(), improving()], [1, 5, 2])
    assert order[:3] == [0, 1, 2]


def test_the_heavier_task_gets_more_trials_than_an_even_split() -> None:
    allocation, _ = simulate([improving(), improving()], [10, 1])
    assert allocation[0] > 128 > allocation[1] >= 16


def test_a_task_that_stops_improving_gets_fewer_trials() -> None:
    allocation, _ = simulate([improving(), flat()], [1, 1])
    assert allocation[0] > allocation[1] >= 32


def test_a_heavy_task_that_stops_improving_is_not_starved_by_a_light_one_that_improves() -> None:
    # The heavy task stalls after its first round; what it may still gain dwarfs the light one's.
    allocation, order = simulate([flat(1.0), improving(0.05)], [1, 1])
    assert allocation[0] > 2 * allocation[1]
    assert 0 in order[-4:]


def test_equal_tasks_split_about_evenly() -> None:
    allocation, _ = simulate([improving(), improving(), improving()], [1, 1, 1], budget=240)
    assert max(allocation) - min(allocation) <= 16


def test_a_task_with_a_larger_latency_share_is_worth_more() -> None:
    allocation, _ = simulate([improving(0.1), improving(1.0)], [1, 1])
    assert allocation[1] > allocation[0]


def test_a_heavy_task_near_its_floor_yields_its_rounds_to_a_lighter_one_far_from_its_own() -> None:
    # The heavy task's curve levels out at 0.3 s, a whisker above its arithmetic at the peak
    # (0.28 s, a language model's head); the light one levels out at 0.15 s with no floor known.
    heavy, light = improving(1.0), improving(0.5)
    blind, _ = simulate([heavy, light], [1, 1])
    assert blind[0] > blind[1]
    aware, _ = simulate([heavy, light], [1, 1], floors=[0.28, 0.0])
    assert aware[1] > aware[0] and aware[1] > blind[1]


def test_the_forward_estimate_counts_only_what_lies_above_the_floor() -> None:
    curve = TaskCurve(weight=2, floor_secs=0.4, trials=64, best_secs=[1.0, 0.8, 0.6, 0.5])
    backward = (0.5 - 1.0) / 3
    assert gradient(curve) == pytest.approx(2 * (0.2 * backward + 0.8 * -(0.5 - 0.4) / 4))
    # a best below the floor (a peak calibrated low) leaves nothing to gain forward
    under = TaskCurve(weight=2, floor_secs=0.6, trials=64, best_secs=[1.0, 0.8, 0.6, 0.5])
    assert gradient(under) == pytest.approx(2 * 0.2 * backward)


def test_gradient_mixes_the_observed_slope_and_the_forward_estimate() -> None:
    curve = TaskCurve(weight=2, trials=64, best_secs=[1.0, 0.8, 0.6, 0.5])
    backward = (0.5 - 1.0) / 3
    forward = -0.5 / 4
    assert gradient(curve) == pytest.approx(2 * (0.2 * backward + 0.8 * forward))
    # two rounds that left the best where it was count four rounds each in the forward estimate
    still = TaskCurve(weight=2, trials=80, best_secs=[1.0, 0.8, 0.5, 0.5, 0.5])
    backward = (0.5 - 0.8) / 3
    forward = -0.5 / (3 + 2 * 4)
    assert gradient(still) == pytest.approx(2 * (0.2 * backward + 0.8 * forward))
    assert gradient(TaskCurve(weight=3)) == 0.0
    assert gradient(TaskCurve(weight=3, trials=16, best_secs=[None])) == 0.0


def test_still_finished_and_failing_tasks() -> None:
    still = TaskCurve(weight=1, trials=64, best_secs=[1.0, 0.9, 0.9, 0.9, 0.9])
    moving = TaskCurve(weight=1, trials=64, best_secs=[1.0, 0.9, 0.9, 0.9, 0.8])
    failing = TaskCurve(weight=5, trials=64, best_secs=[None] * 4)
    assert gradient(moving) < gradient(still) < gradient(failing) == 0.0
    assert next_task([still, moving, failing]) == 1
    failing.finished = True
    moving.finished = True
    assert next_task([still, moving, failing]) == 0
    still.finished = True
    assert next_task([still, moving, failing]) is None


def test_the_batch_shrinks_so_the_warm_up_fits_and_the_loop_ends() -> None:
    scheduler = TaskScheduler([1, 1, 1], budget=6, batch=16)
    rounds = []
    while (planned := scheduler.next_round()) is not None:
        rounds.append(planned)
        scheduler.record(planned.index, 0, None)  # nothing new measured: still costs a trial
    assert [r.index for r in rounds[:3]] == [0, 1, 2]
    assert [r.trials for r in rounds] == [2, 2, 2, 2, 2, 1]


def test_a_tasks_floor_is_its_arithmetic_at_the_calibrated_peak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autosched.machine.roofline import Calibration, save_calibration
    from autosched.model.tasks import ModelTask
    from autosched.model.tuning import task_floors
    from autosched.target import host_target
    from autosched.workloads import get_workload

    monkeypatch.setenv("AUTOSCHED_CALIBRATION", str(tmp_path / "calibration.json"))
    tasks = [
        ModelTask("matmul", 1, None, get_workload("matmul", {"M": 64, "N": 64, "K": 64})),
        ModelTask("int8", 1, None, get_workload("matmul_int8", {"M": 64, "N": 64, "K": 64})),
        ModelTask("not admitted", 1, None, None, "too large"),
    ]
    assert task_floors(tasks, host_target()) == [0.0, 0.0, 0.0]  # never calibrated
    save_calibration(host_target(), Calibration(100.0, 20.0, 100.0, 90.0, "2026-12-07"))
    # 64^3 multiply-adds at 100 GFLOP/s; integer arithmetic has no float peak to bound it
    assert task_floors(tasks, host_target()) == [pytest.approx(2 * 64**3 / 100e9), 0.0, 0.0]
