"""Benchmark: how far apart the host has placed this machine's cores, round after round, and what
it costs a tuned program. Side by side in each round (``autosched.bench.timing``): the handoff
(``autosched.handoff``: data each core writes and the next reads), the FMA loop (arithmetic on
every core) and the workload's best program in the log, built as its candidates are timed. A
round whose handoff took more than ``FAR`` times the run's fastest is counted far.

    python benchmarks/core_placement.py conv2d_nhwc_winograd -p weights=weight \\
        --db sqlite:///log.db [--rounds 40] [--json]

A run that stays in one placement throughout shows no far round: compare its handoff with the
figures of `benchmarks/README.md`.
"""

from __future__ import annotations

import argparse
import json
import statistics

import tvm

from autosched.bench.models import cpu_name, use_threads
from autosched.bench.timing import time_side_by_side
from autosched.fmaloop import built_fma_loop
from autosched.handoff import built_handoff
from autosched.log import TuningLog
from autosched.measure.program import timed_program
from autosched.schedule import apply_trace
from autosched.target import canonical_target, host_target, target_key, to_tvm_target
from autosched.workload import buffer_args, random_arrays
from autosched.workloads import get_workload, parse_param_overrides

FAR = 2.0
_FMA_STEPS = 20_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("-p", "--param", action="append", default=[])
    parser.add_argument("--db", required=True)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    target = host_target()
    use_threads(target["num-cores"])
    workload = get_workload(args.workload, parse_param_overrides(args.param))
    with TuningLog(args.db) as log:
        stored = log.find_workload(workload.key)
        stored_target = log.find_target(target_key(canonical_target(target)))
        best = (
            None
            if stored is None or stored_target is None
            else log.best(stored.id, stored_target.id)
        )
    if best is None:
        parser.exit(2, f"{args.db} holds no verified schedule of {workload.name} on this CPU\n")
    mod = timed_program(apply_trace(workload.mod, best.trace_json).mod)
    program = tvm.compile(mod, target=to_tvm_target(target)).jit()
    tensors = [
        tvm.runtime.tensor(array)
        for array in random_arrays(buffer_args(mod["main"], workload.name), 0, seed=0)
    ]
    fma_loop, out = built_fma_loop(target, _FMA_STEPS)
    handoff, handoff_args = built_handoff(target)
    timings, _ = time_side_by_side(
        {
            "handoff": lambda: handoff["main"](*handoff_args),
            "FMA loop": lambda: fma_loop["main"](out),
            "program": lambda: program["main"](*tensors),
        },
        args.rounds,
    )
    samples = {name: [secs * 1e6 for secs in timing.samples] for name, timing in timings.items()}
    fastest_handoff = min(samples["handoff"])
    far = [handoff > FAR * fastest_handoff for handoff in samples["handoff"]]
    report = {
        "cpu": cpu_name(target),
        "workload": workload.name,
        "params": workload.params,
        "far_rounds": sum(far),
        "rounds": args.rounds,
        "medians_us": {
            placement: {
                name: statistics.median(
                    us for us, is_far in zip(values, far, strict=True) if is_far == wanted
                )
                for name, values in samples.items()
            }
            for placement, wanted in (("near", False), ("far", True))
            if wanted in far
        },
        "rounds_us": samples,
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{workload.name} {workload.params} on {report['cpu']}")
    print(f"{report['far_rounds']} of {args.rounds} rounds far (handoff > {FAR} x its fastest)")
    names = list(samples)
    print("round  " + "  ".join(f"{name:>10}" for name in names) + "  (us)")
    for index in range(args.rounds):
        values = "  ".join(f"{samples[name][index]:10.1f}" for name in names)
        print(f"{index:5}  {values}{'  far' if far[index] else ''}")
    for placement, medians in report["medians_us"].items():
        values = ", ".join(f"{name} {us:.1f}" for name, us in medians.items())
        print(f"median of the {placement} rounds: {values}")


if __name__ == "__main__":
    main()
