"""Slow spells: candidates timed while the machine ran slow are timed again, by a control program
timed between them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import tvm

from autosched.machine.handoff import Placement, farther, handoff
from autosched.measure import LocalMeasurer, MeasureConfig
from autosched.measure.spells import CONTROL_EVERY, RETIMES, SLOW_SPELL, SpellWatch
from autosched.records import BASELINE_TRACE, ErrorKind, MeasureResult
from autosched.target import host_target, to_tvm_target
from autosched.workloads import get_workload


def _scripted(values: list[float | None]) -> Iterator[float | None]:
    yield from values
    while True:  # quiet from then on
        yield 1.0


def _median(result: MeasureResult) -> float | None:
    return result.median


class _Timings:
    """Times candidate ``i`` as ``base[i]`` times the slowdown of the moment (``slow``)."""

    def __init__(self, base: dict[int, float]) -> None:
        self.base = base
        self.slow = 1.0
        self.calls: list[int] = []

    def __call__(self, index: int) -> MeasureResult:
        self.calls.append(index)
        if self.base[index] < 0:
            return MeasureResult(error_kind=ErrorKind.RUN, error_msg="it failed")
        return MeasureResult(samples=(self.base[index] * self.slow,))


def test_candidates_timed_between_quiet_controls_are_timed_once() -> None:
    controls = _scripted([0.5, 1.0, 1.1, 0.95])  # the first control only warms up
    watch = SpellWatch(lambda: next(controls), stretch_secs=0)
    timings = _Timings({i: 1e-3 * (i + 1) for i in range(2 * CONTROL_EVERY)})
    kept = watch.time(list(timings.base), timings, _median)
    assert timings.calls == list(timings.base)
    assert {i: r.median for i, r in kept.items()} == timings.base
    assert watch.spells == 0
    assert watch.quiet == 0.95


def test_a_stretch_next_to_a_slow_control_is_timed_again_and_its_quiet_timing_kept() -> None:
    timings = _Timings({i: 1e-3 * (i + 1) for i in range(2 * CONTROL_EVERY)})
    first, second = list(range(CONTROL_EVERY)), list(range(CONTROL_EVERY, 2 * CONTROL_EVERY))
    # after a warm-up control, the machine runs at half speed from the first control to the
    # third: both stretches of the first pass are timed in the spell, the second and third
    # controls see it
    controls = iter([(0.5, 1.0), (1.0, 2.0), (2.0, 2.0), (2.0, 1.0)])

    def control() -> float:
        secs, timings.slow = next(controls, (1.0, 1.0))
        return secs

    watch = SpellWatch(control, stretch_secs=0)
    kept = watch.time(first + second, timings, _median)
    assert timings.calls == first + second + first + second
    assert {i: r.median for i, r in kept.items()} == timings.base
    assert watch.spells == 2


def test_a_spell_that_never_ends_keeps_each_candidates_fastest_timing() -> None:
    watch = SpellWatch(lambda: SLOW_SPELL * 2, stretch_secs=0)
    watch.quiet = 1.0
    slowdowns = iter([3.0, 2.0, 4.0])
    timings = _Timings({0: 1e-3, 1: -1.0})

    def slowed(index: int) -> MeasureResult:
        if index == 0:
            timings.slow = next(slowdowns)
        return timings(index)

    kept = watch.time([0, 1], slowed, _median)
    assert timings.calls == [0, 1, *([0] * RETIMES)]  # a failure is not timed again
    assert kept[0].median == pytest.approx(2e-3)
    assert kept[1].error_kind is ErrorKind.RUN
    assert watch.spells == 1 + RETIMES


def test_controls_that_could_not_be_timed_judge_nothing() -> None:
    watch = SpellWatch(lambda: None, stretch_secs=0)
    timings = _Timings({0: 1e-3, 1: 2e-3})
    kept = watch.time([0, 1], timings, _median)
    assert timings.calls == [0, 1]
    assert set(kept) == {0, 1}
    assert watch.spells == 0


def test_a_control_comes_after_a_stretch_long_enough_to_outweigh_it() -> None:
    """Rounds of 0.1 s: a control after every three (0.3 s, at least the watch's 0.25 s) and after
    the last; candidates of a second each: a control after every ``CONTROL_EVERY`` of them."""
    now = [0.0]
    controls: list[float] = []

    def control() -> float:
        controls.append(now[0])
        return 1.0

    def taking(secs: float) -> Callable[[int], float]:
        def time_one(index: int) -> float:
            now[0] += secs
            return secs

        return time_one

    watch = SpellWatch(control, stretch_secs=0.25, clock=lambda: now[0])
    kept = watch.time(range(10), taking(0.1), lambda secs: secs, every=1)
    assert len(kept) == 10
    # the warm-up and the control before the first round, then one after each stretch
    assert controls == pytest.approx([0.0, 0.0, 0.3, 0.6, 0.9, 1.0])
    controls.clear()
    watch.time(range(2 * CONTROL_EVERY), taking(1.0), lambda secs: secs)
    assert controls == pytest.approx([1.0, 1.0 + CONTROL_EVERY, 1.0 + 2 * CONTROL_EVERY])


def _hog_every_core(secs: float) -> None:
    spin = f"import time\nend = time.time() + {secs}\nwhile time.time() < end: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)]
    for hog in hogs:
        hog.wait()


@pytest.mark.slow
def test_a_local_measurer_times_again_what_it_timed_while_every_core_was_taken() -> None:
    ref = get_workload("matmul", {"M": 64, "N": 64, "K": 64}).ref
    config = MeasureConfig(repeat=2, min_repeat_ms=20)
    measurer = LocalMeasurer(host_target(), config)
    try:
        traces = [BASELINE_TRACE] * (4 * CONTROL_EVERY)
        quiet = measurer.measure(ref, traces)
        assert all(r.ok for r in quiet)
        before = measurer.spells
        # every core is taken from the end of the batch's builds (as long as the quiet batch's)
        # through its first stretches of timing; the stretches are timed again after it. Under
        # another test's load the builds' length can be misjudged and the spell fall after the
        # timing: then it is made again, at most three times in all
        builds = sum(r.build_secs or 0.0 for r in quiet) / config.builders
        for _attempt in range(3):
            spell = threading.Timer(builds, _hog_every_core, args=(0.6,))
            spell.start()
            try:
                slowed = measurer.measure(ref, traces)
            finally:
                spell.join()
            if measurer.spells > before:
                break
        assert measurer.spells > before
        assert all(r.ok for r in slowed)
        # the machine's own speed may change over the three batches (another test's load, the
        # host moving the cores apart): the slowed batch is read against the quiet ones around it
        after = measurer.measure(ref, traces)
        quiet_latency = max(
            min(r.median for r in batch if r.median is not None) for batch in (quiet, after)
        )
        assert min(r.median for r in slowed if r.median is not None) < 1.5 * quiet_latency
    finally:
        measurer.close()


def test_rounds_timed_with_a_control_after_each_keep_the_quiet_timing_of_a_slowed_round() -> None:
    # rounds of a final: a control after every round; the second round falls in a spell that
    # has passed when it is timed again
    slow = {"now": 1.0}
    controls = iter([(0.5, 1.0), (1.0, 1.0), (1.0, 2.0), (2.0, 1.0)])

    def control() -> float:
        secs, slow["now"] = next(controls, (1.0, 1.0))
        return secs

    calls: list[int] = []

    def time_round(start: int) -> dict[str, float]:
        calls.append(start)
        return {"a": 1.0 * slow["now"], "b": 2.0 * slow["now"]}

    watch = SpellWatch(control, stretch_secs=0)
    kept = watch.time(range(3), time_round, lambda samples: sum(samples.values()), every=1)
    assert calls == [0, 1, 2, 1, 2]  # the rounds next to the slow control, timed again
    assert all(kept[start] == {"a": 1.0, "b": 2.0} for start in range(3))
    assert watch.spells == 2


@pytest.mark.slow
def test_the_handoff_sums_on_each_core_the_slab_its_neighbour_wrote_the_own_read_its_own() -> None:
    cores, floats = 3, 64
    module = tvm.compile(handoff(cores, floats), target=to_tvm_target(host_target())).jit()
    seed = np.arange(cores * 16, dtype="float32").reshape(cores, 16)
    sums = tvm.runtime.tensor(np.zeros((cores, 16), "float32"))
    module["main"](tvm.runtime.tensor(seed), sums)
    rows = floats // 16
    neighbour = np.roll(seed, -1, axis=0)
    np.testing.assert_allclose(sums.numpy(), rows * neighbour + sum(range(rows)))
    own_read = tvm.compile(handoff(cores, floats, offset=0), target=to_tvm_target(host_target()))
    own_read.jit()["main"](tvm.runtime.tensor(seed), sums)
    np.testing.assert_allclose(sums.numpy(), rows * seed + sum(range(rows)))
    with pytest.raises(ValueError, match="multiple of 16"):
        handoff(cores, 40)


def test_a_runs_readings_split_near_from_far_at_their_widest_gap_only_where_it_is_wide() -> None:
    # (handoff us, own read us) of ResNet-18's ten timing rounds on a Zen 5 host: seven near
    # (1.6 to 2.6x the own read), then three far (6.4 to 8.1x)
    zen5 = [
        Placement(handoff * 1e-6, own * 1e-6)
        for handoff, own in [
            (12.7, 5.4), (11.3, 4.8), (11.9, 5.0), (12.1, 7.5), (11.8, 5.2),
            (13.6, 5.6), (12.4, 4.7), (43.1, 6.7), (50.6, 7.6), (56.6, 7.0),
        ]
    ]  # fmt: skip
    assert farther(zen5) == [False] * 7 + [True] * 3
    # near on a Zen 4 host (about 5x) is a larger ratio than far on the Zen 5 (about 7x):
    # read against each other within each run, both split right
    zen4 = [Placement(36e-6, 8e-6), Placement(140e-6, 8e-6), Placement(46e-6, 8e-6)]
    assert farther(zen4) == [False, True, False]
    # one placement throughout, whichever: nothing is read far, nor is a single reading
    assert farther(zen5[7:]) == [False] * 3
    assert farther(zen4[:1]) == [False]
    assert farther([]) == []
