"""Benchmark: candidates timed through a slow spell of the machine, watched and not.

A batch of programs of one workload (samples of its design space, the same for every round) is
timed once on a quiet machine, then again while every core is taken for ``--spell`` seconds,
starting ``--delay`` seconds into the batch's timing: the spell a host causes when it takes a
virtual CPU away, made on purpose. For each round and each setting (spell watch off, on) the table
gives how many programs came out more than 1.25x slower than their quiet timing, the worst such
ratio, whether the fastest program is still the fastest, the batch's wall time, and the stretches
of candidates the watch timed again (in brackets: in the quiet batch, where there was no spell).

    python benchmarks/slow_spells.py [--programs 24] [--rounds 3] [--spell 1.5] [--delay 0.5]
                                     [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time

from autosched.machine.cpu import cpu_peak
from autosched.measure import LocalMeasurer, MeasureConfig
from autosched.schedule import trace_to_json
from autosched.search.space import design_space
from autosched.target import host_target
from autosched.workload import Workload
from autosched.workloads import get_workload

WORKLOAD = ("conv2d_nhwc", {"H": 28, "W": 28, "CI": 64, "CO": 64})
SLOWER = 1.25


def programs(count: int) -> tuple[Workload, list[str]]:
    """The workload and ``count`` distinct programs sampled from its design space (seeded)."""
    workload = get_workload(*WORKLOAD)
    space = design_space(workload, host_target(), seed=0)
    rng = random.Random(0)
    traces: dict[str, None] = {}
    while len(traces) < count:
        sch = space.sample(lambda _name, choices: rng.choice(choices))
        if sch is not None:
            traces.setdefault(trace_to_json(sch.trace))
    return workload, list(traces)


def spell(secs: float) -> None:
    """Take every core for ``secs`` seconds."""
    spin = f"import time\nend = time.time() + {secs}\nwhile time.time() < end: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)]
    for hog in hogs:
        hog.wait()


def run(
    watch: bool, workload: Workload, traces: list[str], spell_secs: float, delay: float
) -> dict:
    config = MeasureConfig(watch_spells=watch)
    measurer = LocalMeasurer(host_target(), config)
    try:
        quiet_results = measurer.measure(workload.ref, traces)
        quiet = [r.median for r in quiet_results]
        quiet_spells = measurer.spells  # stretches a quiet machine was taken to be slow in
        # the spell starts ``delay`` seconds after the builds, which take about as long as the
        # quiet batch's builds did on the measurer's builders
        builds = sum(r.build_secs or 0.0 for r in quiet_results) / config.builders
        timer = threading.Timer(builds + delay, spell, args=(spell_secs,))
        started = time.perf_counter()
        timer.start()
        slowed = [r.median for r in measurer.measure(workload.ref, traces)]
        wall = time.perf_counter() - started
        timer.join()
        spells = measurer.spells - quiet_spells
    finally:
        measurer.close()
    pairs = [(q, s) for q, s in zip(quiet, slowed, strict=True) if q and s]
    ratios = [s / q for q, s in pairs]
    best_quiet = min(range(len(pairs)), key=lambda i: pairs[i][0])
    best_slowed = min(range(len(pairs)), key=lambda i: pairs[i][1])
    return {
        "watch": watch,
        "programs": len(pairs),
        "slowed": sum(ratio > SLOWER for ratio in ratios),
        "worst": max(ratios),
        "same_best": best_quiet == best_slowed,
        "wall_secs": wall,
        "spells": spells,
        "quiet_spells": quiet_spells,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spell", type=float, default=1.5, help="seconds every core is taken")
    parser.add_argument("--delay", type=float, default=0.5, help="seconds into the batch")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    workload, traces = programs(args.programs)
    rows = []
    for round_ in range(args.rounds):
        for watch in (False, True):
            row = run(watch, workload, traces, args.spell, args.delay)
            rows.append({"round": round_, **row})
    peak = cpu_peak()
    machine = peak.model if peak else "unknown CPU"
    if args.json:
        print(json.dumps({"machine": machine, "workload": WORKLOAD, "rows": rows}, indent=2))
        return
    print(f"{WORKLOAD[0]} {WORKLOAD[1]}, {args.programs} programs, spell {args.spell} s; {machine}")
    print("round  watch  >1.25x slower  worst  same best  wall s  spells (quiet batch)")
    for row in rows:
        print(
            f"{row['round']:5d}  {'on' if row['watch'] else 'off':5s}  "
            f"{row['slowed']:6d} of {row['programs']:2d}  {row['worst']:5.2f}  "
            f"{'yes' if row['same_best'] else 'no':9s}  {row['wall_secs']:6.1f}  "
            f"{row['spells']:6d} ({row['quiet_spells']})"
        )


if __name__ == "__main__":
    main()
