"""Benchmark: how far apart the host has placed this machine's cores, round after round, and what
it costs a tuned program. Side by side in each round (``autosched.bench.timing``): the FMA loop
(arithmetic on every core) and the workload's best program in the log, built as its candidates
are timed; after each round the placement (``autosched.machine.handoff.placement``: data each core
writes and the next reads, against each core reading back its own). The rounds read farther
apart than the others (``autosched.machine.handoff.farther``) are counted far.

    python benchmarks/core_placement.py conv2d_nhwc_winograd -p weights=weight \\
        --db sqlite:///log.db [--rounds 40] [--json]

"""

from __future__ import annotations

import json
import statistics

import tvm
from kernel_stages import logged_best

from autosched.bench.models import cpu_name
from autosched.bench.timing import time_side_by_side
from autosched.machine.fmaloop import built_fma_loop
from autosched.machine.handoff import farther, placement
from autosched.target import to_tvm_target
from autosched.workload import buffer_args, random_arrays

_FMA_STEPS = 20_000


def main() -> None:
    args, target, workload, mod, _best = logged_best(rounds=40)
    program = tvm.compile(mod, target=to_tvm_target(target)).jit()
    tensors = [
        tvm.runtime.tensor(array)
        for array in random_arrays(buffer_args(mod["main"], workload.name), 0, seed=0)
    ]
    fma_loop, out = built_fma_loop(target, _FMA_STEPS)
    timings, placements = time_side_by_side(
        {
            "FMA loop": lambda: fma_loop["main"](out),
            "program": lambda: program["main"](*tensors),
        },
        args.rounds,
        between=lambda: placement(target),
    )
    samples = {
        "handoff": [reading.handoff_secs * 1e6 for reading in placements],
        "own read": [reading.own_read_secs * 1e6 for reading in placements],
    } | {name: [secs * 1e6 for secs in timing.samples] for name, timing in timings.items()}
    far = farther(placements)
    # with no round read farther than the rest, every round was timed in one placement, near or far
    states = (("near", False), ("far", True)) if any(far) else (("one placement", False),)
    report = {
        "cpu": cpu_name(target),
        "workload": workload.name,
        "params": workload.params,
        "far_rounds": sum(far),
        "rounds": args.rounds,
        "medians_us": {
            state: {
                name: statistics.median(
                    us for us, is_far in zip(values, far, strict=True) if is_far == wanted
                )
                for name, values in samples.items()
            }
            for state, wanted in states
        },
        "rounds_us": samples,
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{workload.name} {workload.params} on {report['cpu']}")
    print(f"{report['far_rounds']} of {args.rounds} rounds far (read farther apart than the rest)")
    names = list(samples)
    print("round  " + "  ".join(f"{name:>10}" for name in names) + "  (us)")
    for index in range(args.rounds):
        values = "  ".join(f"{samples[name][index]:10.1f}" for name in names)
        print(f"{index:5}  {values}{'  far' if far[index] else ''}")
    for state, medians in report["medians_us"].items():
        values = ", ".join(f"{name} {us:.1f}" for name, us in medians.items())
        print(f"{state} rounds, medians: {values}")


if __name__ == "__main__":
    main()
