"""Benchmark: where a tuned model's time goes. Every kernel call of the compiled model is timed
inside the model (a VM instrument around each call) and set beside the latency its tuning recorded
(timed cache-cold, as the scheduler estimates the model); the model's own latency beside the sum
of its calls shows what the VM spends between kernels.

The log must hold the model's tuning, for example from
``autosched bench models --models resnet18 --db sqlite:///resnet18.db``; the zoo model is rebuilt
with its seeded weights, so its tasks are the ones that run tuned.

    python benchmarks/model_profile.py --model resnet18 --db sqlite:///resnet18.db
                                       [--runs 20] [--json]

Per function the VM calls (the kernels, and its builtins: allocations, reshapes): calls per run,
median microseconds per run inside the model (all its calls), the tuning's best latency times the
calls, and their ratio. The instrument's own cost (a Python call before and after each kernel)
falls between the calls, so it inflates the model's instrumented time, not the kernels'.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
import tvm
from tvm import relax

from autosched.bench.model_zoo import MODELS
from autosched.bench.models import MODEL_REPEATS, cpu_name, use_threads, vm_inference
from autosched.bench.timing import time_repeats
from autosched.log import TuningLog
from autosched.model.compile import best_schedules, compile_model, random_model_inputs
from autosched.model.load import load_model
from autosched.model.tasks import extract_tasks
from autosched.target import host_target


def kernel_times(
    executable: relax.VMExecutable, inputs: list, runs: int
) -> tuple[dict[str, list[float]], dict[str, int], list[float]]:
    """Per function the VM calls, the seconds each run spent in its calls; its calls per run; and
    each instrumented run's wall seconds."""
    device = tvm.cpu()
    vm = relax.VirtualMachine(executable, device)
    arguments = [tvm.runtime.tensor(array, device) for array in inputs]
    started: dict[str, int] = {}
    spent: dict[str, int] = defaultdict(int)
    calls: dict[str, int] = defaultdict(int)

    def instrument(_func, symbol: str, before: bool, _ret, *_args) -> int:
        now = time.perf_counter_ns()
        if before:
            started[symbol] = now
        else:
            spent[symbol] += now - started.pop(symbol)
            calls[symbol] += 1
        return 0  # VMInstrumentReturnKind.NO_OP

    vm.set_instrument(instrument)
    vm["main"](*arguments)  # warm-up
    per_run: dict[str, list[float]] = defaultdict(list)
    walls = []
    for _ in range(runs):
        spent.clear()
        calls.clear()
        start = time.perf_counter()
        vm["main"](*arguments)
        walls.append(time.perf_counter() - start)
        for symbol, nanos in spent.items():
            per_run[symbol].append(nanos * 1e-9)
    return per_run, dict(calls), walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    parser.add_argument("--db", required=True, help="the tuning log that holds the model's tuning")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    target = host_target()
    use_threads(target["num-cores"])
    module, example = MODELS[args.model].instantiate()
    with tempfile.TemporaryDirectory(prefix="model-profile-") as work:
        path = Path(work) / f"{args.model}.pt2"
        torch.export.save(torch.export.export(module, example), str(path))
        model = load_model(path)
    tasks = extract_tasks(model, target)
    log = TuningLog(args.db)
    try:
        schedules = best_schedules(log, tasks, target)
    finally:
        log.close()
    executable = compile_model(model, schedules, target)
    inputs = random_model_inputs(model.inputs)
    model_secs = time_repeats(vm_inference(executable, inputs), MODEL_REPEATS).median_secs
    per_run, calls, walls = kernel_times(executable, inputs, args.runs)
    tuned = {
        schedule.task.name: schedule.record.median_secs
        for schedule in schedules
        if schedule.record is not None and schedule.record.median_secs is not None
    }
    rows = []
    for symbol, samples in per_run.items():
        # a kernel that packs a weight is built under its task's name with this suffix
        best = tuned.get(symbol.removesuffix("_prepacked"))
        rows.append(
            {
                "function": symbol,
                "calls": calls.get(symbol, 0),
                "in_model_us": statistics.median(samples) * 1e6,
                "tuned_us": None if best is None else best * calls.get(symbol, 0) * 1e6,
            }
        )
    rows.sort(key=lambda row: -row["in_model_us"])
    summary = {
        "cpu": cpu_name(target),
        "model": args.model,
        "model_us": model_secs * 1e6,
        "instrumented_us": statistics.median(walls) * 1e6,
        "kernels_us": sum(row["in_model_us"] for row in rows),
        "tuned_us": sum(row["tuned_us"] or 0.0 for row in rows),
        "without_tuning": sorted(row["function"] for row in rows if row["tuned_us"] is None),
        "kernels": rows,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(
        f"{summary['cpu']}, {args.model}: model {summary['model_us']:.0f} us "
        f"(instrumented {summary['instrumented_us']:.0f}), its kernels {summary['kernels_us']:.0f}"
        f" us in the model, {summary['tuned_us']:.0f} us as tuned"
    )
    print(f"{'function':<64} {'calls':>5} {'in model us':>11} {'tuned us':>9} {'ratio':>6}")
    for row in rows:
        tuned_us = row["tuned_us"]
        ratio = "" if not tuned_us else f"{row['in_model_us'] / tuned_us:.2f}"
        tuned_text = "" if tuned_us is None else f"{tuned_us:.0f}"
        print(
            f"{row['function'][:64]:<64} {row['calls']:>5} {row['in_model_us']:>11.0f}"
            f" {tuned_text:>9} {ratio:>6}"
        )


if __name__ == "__main__":
    main()
