"""Benchmark: where a tuned kernel's time goes, stage by stage. The workload's best schedule in the
log is built as its candidates are timed (weights packed or transformed ahead where the workload
declares them constant); then each loop nest at the top of the program (a stage, with whatever
the schedule fused into it) is built alone, with the buffers it reads and writes as arguments, and
timed beside the whole program and the workload's peer (each way it runs: PyTorch's convolutions
in both memory layouts), round after round.

    python benchmarks/kernel_stages.py conv2d_nchw_winograd -p preset=resnet50_res3_3x3 \\
        -p weights=weight --db sqlite:///log.db [--rounds 3] [--json]

A stage alone finds in the caches what its previous call left there, and its arguments are random;
so the stages' sum is near the whole program's time, not equal to it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable

import tvm
from tvm.ir import IRModule

from autosched.bench.models import cpu_name
from autosched.bench.timing import time_repeats, use_threads
from autosched.log import TuningLog
from autosched.measure.program import timed_program
from autosched.records import RecordView
from autosched.schedule import apply_trace, loop_nests, with_nests
from autosched.target import canonical_target, host_target, target_key, to_tvm_target
from autosched.workload import Workload, buffer_args, random_arrays, random_inputs
from autosched.workloads import get_workload, parse_param_overrides
from autosched.workloads.peers import has_peer, peer_for


def stage_programs(mod: IRModule) -> list[tuple[str, IRModule]]:
    """Each loop nest at the top of ``main`` as a program of its own, named by its blocks: the
    buffers the program allocates that its blocks read or write are its parameters after
    ``main``'s own."""
    func = mod["main"]
    allocated = list(func.body.block.alloc_buffers)
    programs = []
    for nest, blocks in loop_nests(mod):
        touched = {region.source for b in blocks for region in [*b.reads, *b.writes]}
        arguments = [buffer for buffer in allocated if buffer in touched]
        kept = [buffer for buffer in allocated if buffer not in touched]
        program = with_nests(mod, [nest], kept, [*func.params, *arguments])
        programs.append(("+".join(b.name_hint for b in blocks), program))
    return programs


def peer_calls(workload: Workload) -> dict[str, Callable[[], object]]:
    """Each way the workload's peer runs it (PyTorch's convolution in both memory layouts), bound
    to random inputs, by its name."""
    inputs = random_inputs(workload, seed=0)[: len(workload.args) - (workload.num_outputs or 0)]
    return {f"peer: {way.name}": way.bind(inputs) for way in peer_for(workload).ways if way.bind}


def time_program(mod: IRModule, target: dict) -> float:
    """Median microseconds of ``main`` on random arguments, timed by TVM's evaluator (no Python
    between the calls): 5 repeats of at least 50 ms after a warm-up call."""
    library = tvm.compile(mod, target=to_tvm_target(target)).jit()
    arrays = random_arrays(buffer_args(mod["main"], "stage"), 0, seed=0)
    tensors = [tvm.runtime.tensor(array) for array in arrays]
    library["main"](*tensors)
    timer = library.time_evaluator("main", tvm.cpu(), repeat=5, min_repeat_ms=50)
    return statistics.median(timer(*tensors).results) * 1e6


def logged_best(rounds: int) -> tuple[argparse.Namespace, dict, Workload, IRModule, RecordView]:
    """The command line of a benchmark that times a workload's best program in a log (its
    ``--rounds`` default ``rounds``), the host target with TVM on its cores, the workload, its
    best program as its candidates are timed and that record; exits with code 2 where the log
    holds none."""
    parser = argparse.ArgumentParser(description=sys.modules["__main__"].__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("-p", "--param", action="append", default=[])
    parser.add_argument("--db", required=True)
    parser.add_argument("--rounds", type=int, default=rounds)
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
    return args, target, workload, mod, best


def main() -> None:
    args, target, workload, mod, best = logged_best(rounds=3)
    parts = stage_programs(mod)
    peers = peer_calls(workload) if has_peer(workload.name) else {}
    rounds: dict[str, list[float]] = {
        "whole program": [],
        **{name: [] for name in peers},
        **{name: [] for name, _ in parts},
    }
    for _ in range(args.rounds):
        rounds["whole program"].append(time_program(mod, target))
        for name, call in peers.items():
            rounds[name].append(time_repeats(call).median_secs * 1e6)
        for name, program in parts:
            rounds[name].append(time_program(program, target))
    rows = [
        {"stage": name, "median_us": statistics.median(times), "rounds_us": times}
        for name, times in rounds.items()
    ]
    stage_rows = rows[1 + len(peers) :]
    report = {
        "cpu": cpu_name(target),
        "workload": workload.name,
        "params": workload.params,
        "recorded_us": best.median_secs * 1e6,
        "stages_summed_us": sum(row["median_us"] for row in stage_rows),
        "rows": rows,
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{workload.name} {workload.params} on {report['cpu']}")
    recorded, summed = report["recorded_us"], report["stages_summed_us"]
    print(f"recorded best {recorded:.1f} us, stages summed {summed:.1f} us")
    for row in rows:
        spread = " / ".join(f"{t:.1f}" for t in row["rounds_us"])
        print(f"  {row['stage']:<44} {row['median_us']:9.1f} us   ({spread})")


if __name__ == "__main__":
    main()
