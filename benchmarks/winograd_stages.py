"""Benchmark: a 3x3 convolution (with its bias and ReLU) of each ResNet stage as a one-layer model,
tuned and built with its convolution direct and as Winograd's F(4x4, 3x3), then both timed in one
process, round after round.

Each arm tunes the same PyTorch layer (exported, imported by the model loader as `autosched tune
MODEL.pt2` imports it) with ``--trials`` trials in a throw-away log of its own; the direct arm
fuses the model with the Winograd rewrite taken out. Per stage and arm the table gives the built
layer's median latency (and its fastest and slowest repeat) in each round, the estimate of the
tuning (the tasks' cold latencies summed) and the best of each task.

    python benchmarks/winograd_stages.py [--trials 128] [--stages 56x64,28x128,14x256,7x512]
                                         [--rounds 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
import tvm

import autosched.model.tasks as model_tasks
from autosched.bench.models import MODEL_REPEATS, cpu_name, vm_inference
from autosched.bench.timing import time_repeats, use_threads
from autosched.log import TuningLog
from autosched.measure import LocalMeasurer
from autosched.model.compile import best_schedules, compile_model, random_model_inputs
from autosched.model.load import load_model
from autosched.model.tasks import extract_tasks
from autosched.model.tuning import ModelTuneOptions, tune_model
from autosched.target import host_target

ARMS = {"direct": tvm.transform.Sequential([]), "winograd": model_tasks.winograd_convolutions}


def layer(side: int, channels: int, path: Path) -> Path:
    """Conv2d(channels, channels, 3, padding=1) and ReLU on 1 x channels x side x side, saved."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU())
    example = (torch.randn(1, channels, side, side),)
    torch.export.save(torch.export.export(module.eval(), example), str(path))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--stages", default="56x64,28x128,14x256,7x512", help="SIDExCHANNELS,...")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    target = host_target()
    use_threads(target["num-cores"])
    work = Path(tempfile.mkdtemp(prefix="winograd-stages-"))
    rows = []
    for stage in args.stages.split(","):
        side, channels = (int(n) for n in stage.split("x"))
        model = load_model(layer(side, channels, work / f"{stage}.pt2"))
        inputs = random_model_inputs(model.inputs)
        built = {}
        for arm, rewrite in ARMS.items():
            model_tasks.winograd_convolutions = rewrite
            log = TuningLog(f"sqlite:///{work / f'{arm}-{stage}.db'}")
            tasks = extract_tasks(model, target)
            measurer = LocalMeasurer(target)
            started = time.perf_counter()
            try:
                report = tune_model(
                    model, tasks, target, log, measurer, ModelTuneOptions(args.trials, seed=0)
                )
            finally:
                measurer.close()
            tune_secs = time.perf_counter() - started
            executable = compile_model(model, best_schedules(log, tasks, target), target)
            built[arm] = (vm_inference(executable, inputs), report, tune_secs)
        model_tasks.winograd_convolutions = ARMS["winograd"]
        for round_ in range(args.rounds):
            for arm, (inference, report, tune_secs) in built.items():
                timing = time_repeats(inference, MODEL_REPEATS)
                rows.append(
                    {
                        "stage": f"{side}x{side}x{channels}",
                        "arm": arm,
                        "round": round_,
                        "median_us": timing.median_secs * 1e6,
                        "fastest_us": timing.min_secs * 1e6,
                        "slowest_us": timing.max_secs * 1e6,
                        "estimated_us": report.tuned_secs * 1e6,
                        "tune_secs": tune_secs,
                        "max_abs_error": report.check.max_abs_error,
                        "tasks": {
                            task.name: None if task.best_secs is None else task.best_secs * 1e6
                            for task in report.tasks
                        },
                    }
                )
    if args.json:
        print(json.dumps({"cpu": cpu_name(target), "trials": args.trials, "rows": rows}, indent=2))
        return
    print(f"{cpu_name(target)}, {args.trials} trials per arm")
    header = ("stage", "arm", "round", "median us", "spread us", "est. us")
    print("{:<12} {:<9} {:>5} {:>10} {:>15} {:>8}".format(*header))
    for row in rows:
        spread = f"{row['fastest_us']:.0f}-{row['slowest_us']:.0f}"
        print(
            f"{row['stage']:<12} {row['arm']:<9} {row['round']:>5} {row['median_us']:>10.0f}"
            f" {spread:>15} {row['estimated_us']:>8.0f}"
        )


if __name__ == "__main__":
    main()
