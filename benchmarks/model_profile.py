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
of each round's median), the tuning's best latency times the calls, and their ratio; for each of
the model's kernels, its GFLOP/s in the model (TVM's count of its arithmetic) and the roofline's
least time for its calls (its arithmetic at the calibrated peak, or its operands and results
moved once at the calibrated bandwidth, whichever is longer; ``autosched calibrate`` first)
as a share of its time in the model: the kernels far below the roofline are what holds the
model back. The
instrument's own cost (a Python call before and after each kernel) falls between the calls, so it
inflates the model's instrumented time, not the kernels'.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import tvm
from tvm import relax
from tvm.s_tir.analysis import estimate_tir_flops

from autosched.bench.model_zoo import MODELS
from autosched.bench.models import MODEL_REPEATS, cpu_name, vm_inference
from autosched.bench.timing import time_repeats, use_threads
from autosched.log import TuningLog
from autosched.machine.roofline import Calibration, load_calibration
from autosched.model.compile import best_schedules, compile_model, random_model_inputs
from autosched.model.load import load_model
from autosched.model.tasks import ModelTask, extract_tasks
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


@dataclass(frozen=True)
class Work:
    """What one call of a kernel must do: its arithmetic (FLOPs, as TVM counts them) and the
    bytes of its operands and results."""

    flops: float
    bytes: float

    @staticmethod
    def of(task: ModelTask) -> Work | None:
        if task.workload is None:
            return None
        func = task.workload.func
        moved = sum(
            math.prod(int(extent) for extent in param.shape) * tvm.DataType(param.dtype).bits / 8
            for param in func.params
        )
        return Work(estimate_tir_flops(tvm.IRModule({"main": func})), moved)


@dataclass
class Build:
    """A compiled model to profile: its name, what the VM runs, per task its tuned latency and
    its work (none for a build whose log is not ours)."""

    name: str
    executable: relax.VMExecutable | tvm.runtime.Module
    tuned: dict[str, float] = field(default_factory=dict)
    work: dict[str, Work] = field(default_factory=dict)
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

    def summary(self, calibration: Calibration | None) -> dict:
        rows = []
        for symbol, medians in self.kernels.items():
            # a kernel that packs a weight is built under its task's name with this suffix
            best = self.tuned.get(symbol.removesuffix("_prepacked"))
            work = self.work.get(symbol.removesuffix("_prepacked"))
            calls = self.calls.get(symbol, 0)
            in_model_secs = statistics.median(medians)
            row = {
                "function": symbol,
                "calls": calls,
                "in_model_us": in_model_secs * 1e6,
                "tuned_us": None if best is None else best * calls * 1e6,
                "gflops": None,
                "of_roofline": None,
            }
            if work is not None and in_model_secs > 0:
                row["gflops"] = work.flops * calls / in_model_secs * 1e-9
                if calibration is not None:
                    bound = calibration.bound_secs(work.flops, work.bytes) * calls
                    row["of_roofline"] = bound / in_model_secs
            rows.append(row)
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
    work = {task.name: known for task in tasks if (known := Work.of(task)) is not None}
    build = Build("autosched", compile_model(model, schedules, target), tuned, work)
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
    print(
        f"{'function':<64} {'calls':>5} {'in model us':>11} {'tuned us':>9} {'ratio':>6}"
        f" {'GFLOP/s':>8} {'roofline':>8}"
    )
    for row in summary["kernels"]:
        tuned_us = row["tuned_us"]
        ratio = "" if not tuned_us else f"{row['in_model_us'] / tuned_us:.2f}"
        tuned_text = "" if tuned_us is None else f"{tuned_us:.0f}"
        gflops = "" if row["gflops"] is None else f"{row['gflops']:.1f}"
        share = "" if row["of_roofline"] is None else f"{row['of_roofline']:.0%}"
        print(
            f"{row['function'][:64]:<64} {row['calls']:>5} {row['in_model_us']:>11.0f}"
            f" {tuned_text:>9} {ratio:>6} {gflops:>8} {share:>8}"
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
    calibration = load_calibration(target)
    summaries = [build.summary(calibration) for build in builds]
    cpu = cpu_name(target)
    roofline = None if calibration is None else asdict(calibration)
    if args.json:
        document = {"cpu": cpu, "model": args.model, "roofline": roofline, "builds": summaries}
        print(json.dumps(document, indent=2))
        return
    if calibration is None:
        print("no calibration of this machine (autosched calibrate): no roofline column")
    else:
        print(
            f"roofline: {calibration.peak_gflops:.1f} GFLOP/s, {calibration.bandwidth_gbs:.1f} GB/s"
            f" (calibrated {calibration.measured_at})"
        )
    for summary in summaries:
        _print(cpu, args.model, summary)


if __name__ == "__main__":
    main()
