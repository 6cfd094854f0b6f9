"""Benchmark: where a tuned model's time goes. Every kernel call of the compiled model is timed
inside the model (a VM instrument around each call) and set beside the latency its tuning recorded
(timed cache-cold, as the scheduler estimates the model); the model's own latency beside the sum
of its calls shows what the VM spends between kernels.

The model is a zoo model's name or a model file (ONNX, ``.pt2``: a model of the conformance
corpus, ``conformance.py``). The log must hold the model's tuning, for example from
``autosched bench models --models resnet18 --db sqlite:///resnet18.db`` or
``autosched tune MODEL.onnx --db sqlite:///model.db``; a zoo model is rebuilt with its seeded
weights, so its tasks are the ones that run tuned; a log without the model's records profiles the
model as it runs untuned. ``--library`` profiles a model
built elsewhere too, such as stock TVM's (``stock/model.so`` in the work folder of
``autosched bench models --work-dir``); with ``--rounds``, the builds are profiled in turn that
many times, so that a slow spell of the host falls on both.

    python benchmarks/model_profile.py --model resnet18|MODEL.onnx --db sqlite:///resnet18.db
                                       [--library stock=PATH.so] [--rounds 3] [--runs 20] [--json]

Per build and function the VM calls (the kernels, and its builtins: allocations, reshapes): calls
per run, median microseconds per run inside the model (all its calls; the median over the rounds
of each round's median), the tuning's best latency times the calls, and their ratio. The
instrument's own cost (a Python call before and after each kernel) falls between the calls, so it
inflates the model's instrumented time, not the kernels'.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch
import tvm
from tvm import relax

from autosched.bench.model_zoo import MODELS
from autosched.bench.models import MODEL_REPEATS, cpu_name, vm_inference
from autosched.bench.timing import time_repeats, use_threads
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


@dataclass
class Build:
    """A compiled model to profile: its name, what the VM runs, and per task its tuned latency
    (none for a build whose log is not ours)."""

    name: str
    executable: relax.VMExecutable | tvm.runtime.Module
    tuned: dict[str, float] = field(default_factory=dict)
    model_secs: list[float] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    kernels: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    calls: dict[str, int] = field(default_factory=dict)

    def profile(self, inputs: list, runs: int) -> None:
        """One round: the model's latency, then each function's time inside it."""
        self.model_secs.append(
            time_repeats(vm_inference(self.executable, inputs), MODEL_REPEATS).median_secs
        )
        per_run, self.calls, walls = kernel_times(self.executable, inputs, runs)
        self.walls.append(statistics.median(walls))
        for symbol, samples in per_run.items():
            self.kernels[symbol].append(statistics.median(samples))

    def summary(self) -> dict:
        rows = []
        for symbol, medians in self.kernels.items():
            # a kernel that packs a weight is built under its task's name with this suffix
            best = self.tuned.get(symbol.removesuffix("_prepacked"))
            calls = self.calls.get(symbol, 0)
            rows.append(
                {
                    "function": symbol,
                    "calls": calls,
                    "in_model_us": statistics.median(medians) * 1e6,
                    "tuned_us": None if best is None else best * calls * 1e6,
                }
            )
        rows.sort(key=lambda row: -row["in_model_us"])
        return {
            "build": self.name,
            "model_us": statistics.median(self.model_secs) * 1e6,
            "model_rounds_us": [secs * 1e6 for secs in self.model_secs],
            "instrumented_us": statistics.median(self.walls) * 1e6,
            "kernels_us": sum(row["in_model_us"] for row in rows),
            "tuned_us": sum(row["tuned_us"] or 0.0 for row in rows),
            "without_tuning": sorted(row["function"] for row in rows if row["tuned_us"] is None),
            "kernels": rows,
        }


def _ours(model_name: str, db: str, target: dict) -> tuple[Build, list]:
    """The model (a zoo model's name or a model file) built with the log's best schedules, and
    random inputs for it."""
    if model_name in MODELS:
        module, example = MODELS[model_name].instantiate()
        with tempfile.TemporaryDirectory(prefix="model-profile-") as work:
            path = Path(work) / f"{model_name}.pt2"
            torch.export.save(torch.export.export(module, example), str(path))
            model = load_model(path)
    else:
        model = load_model(Path(model_name))
    tasks = extract_tasks(model, target)
    with TuningLog(db) as log:
        schedules = best_schedules(log, tasks, target)
    tuned = {
        schedule.task.name: schedule.record.median_secs
        for schedule in schedules
        if schedule.record is not None and schedule.record.median_secs is not None
    }
    build = Build("autosched", compile_model(model, schedules, target), tuned)
    return build, random_model_inputs(model.inputs)


def _library(text: str) -> Build:
    name, _, path = text.rpartition("=")
    return Build(name or Path(path).stem, tvm.runtime.load_module(path))


def _print(cpu: str, model: str, summary: dict) -> None:
    rounds = ", ".join(f"{us:.0f}" for us in summary["model_rounds_us"])
    print(
        f"{cpu}, {model}, {summary['build']}: model {summary['model_us']:.0f} us (rounds: "
        f"{rounds}; instrumented {summary['instrumented_us']:.0f}), its kernels "
        f"{summary['kernels_us']:.0f} us in the model, {summary['tuned_us']:.0f} us as tuned"
    )
    print(f"{'function':<64} {'calls':>5} {'in model us':>11} {'tuned us':>9} {'ratio':>6}")
    for row in summary["kernels"]:
        tuned_us = row["tuned_us"]
        ratio = "" if not tuned_us else f"{row['in_model_us'] / tuned_us:.2f}"
        tuned_text = "" if tuned_us is None else f"{tuned_us:.0f}"
        print(
            f"{row['function'][:64]:<64} {row['calls']:>5} {row['in_model_us']:>11.0f}"
            f" {tuned_text:>9} {ratio:>6}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", required=True, help=f"a model file or a zoo model: {', '.join(sorted(MODELS))}"
    )
    parser.add_argument("--db", required=True, help="the tuning log that holds the model's tuning")
    parser.add_argument(
        "--library",
        action="append",
        default=[],
        metavar="[NAME=]PATH",
        help="a library of the same model built elsewhere (stock TVM's model.so), profiled too",
    )
    parser.add_argument("--rounds", type=int, default=1, help="profiles of each build, in turn")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    target = host_target()
    use_threads(target["num-cores"])
    ours, inputs = _ours(args.model, args.db, target)
    builds = [ours, *(_library(text) for text in args.library)]
    for _ in range(args.rounds):
        for build in builds:
            build.profile(inputs, args.runs)
    summaries = [build.summary() for build in builds]
    cpu = cpu_name(target)
    if args.json:
        print(json.dumps({"cpu": cpu, "model": args.model, "builds": summaries}, indent=2))
        return
    for summary in summaries:
        _print(cpu, args.model, summary)


if __name__ == "__main__":
    main()
