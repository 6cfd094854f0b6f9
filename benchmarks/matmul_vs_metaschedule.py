"""Benchmark: autosched against stock MetaSchedule `tune_tir` and numpy on one float32 matmul.

For each budget both tuners start from scratch with the same target and batch size; the best
schedule of each is then re-timed here with one protocol, next to numpy (OpenBLAS), so the
GFLOP/s figures compare like with like. Wall times are whole tunings, measurement included.

Every contender runs on the target's cores: the script sets ``TVM_NUM_THREADS``, which TVM's
thread pool reads here and in stock MetaSchedule's runner (left alone it takes half the logical
CPUs; autosched's measuring processes set it themselves). PyTorch, which TVM imports whenever it
is installed, is kept out of this process and of MetaSchedule's builder and runner processes
(with it, a build there takes tens of seconds), as autosched keeps it out of its own.

    python benchmarks/matmul_vs_metaschedule.py [--size 512] [--trials 64 256] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from autosched.torch_guard import keep_torch_out, torch_free_environment

keep_torch_out()

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm.s_tir import meta_schedule as ms  # noqa: E402

from autosched.exports.kernels import best_schedule  # noqa: E402
from autosched.log import TuningLog  # noqa: E402
from autosched.measure import LocalMeasurer  # noqa: E402
from autosched.target import host_target, to_tvm_target  # noqa: E402
from autosched.tuner import TuneOptions, tune  # noqa: E402
from autosched.workload import Workload  # noqa: E402
from autosched.workloads import get_workload  # noqa: E402

REPEATS = 20


def time_module(module: tvm.runtime.Module, size: int) -> float:
    """Median seconds of one call, timed the same way for every contender."""
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    a = tvm.runtime.tensor(rng.uniform(-1, 1, (size, size)).astype("float32"), dev)
    b = tvm.runtime.tensor(rng.uniform(-1, 1, (size, size)).astype("float32"), dev)
    c = tvm.runtime.empty((size, size), "float32", dev)
    evaluator = module.time_evaluator("main", dev, number=1, repeat=REPEATS, min_repeat_ms=50)
    return float(np.median(evaluator(a, b, c).results))


def time_numpy(size: int) -> float:
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (size, size)).astype("float32")
    b = rng.uniform(-1, 1, (size, size)).astype("float32")
    a @ b
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        calls = 0
        while time.perf_counter() - start < 0.05:
            a @ b
            calls += 1
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def run_autosched(
    workload: Workload, trials: int, seed: int, work: Path
) -> tuple[float, tvm.IRModule]:
    """autosched's wall seconds tuning ``workload`` on an empty log, and its best program."""
    target = host_target()
    log = TuningLog(f"sqlite:///{work / 'autosched.db'}")
    measurer = LocalMeasurer(target)
    start = time.perf_counter()
    try:
        tune(workload, target, log, measurer, TuneOptions(trials=trials, batch_size=64, seed=seed))
        wall = time.perf_counter() - start
        scheduled = best_schedule(log, workload, target).schedule.mod
    finally:
        measurer.close()
        log.close()
    return wall, scheduled


def run_stock(workload: Workload, trials: int, seed: int, work: Path) -> tuple[float, tvm.IRModule]:
    """Stock MetaSchedule's wall seconds tuning ``workload`` (`tune_tir`), and its best program."""
    target = to_tvm_target(host_target())
    start = time.perf_counter()
    database = ms.tune_tir(
        workload.mod,
        target,
        str(work / "stock"),
        max_trials_global=trials,
        num_trials_per_iter=64,
        seed=seed,
    )
    wall = time.perf_counter() - start
    return wall, ms.tir_integration.compile_tir(database, workload.mod, target).mod


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--trials", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    flops = 2.0 * args.size**3
    target = to_tvm_target(host_target())
    rows = [{"tuner": "numpy", "trials": None, "wall_secs": None, "secs": time_numpy(args.size)}]
    # for this process and the builders and runners it starts from here on
    os.environ["TVM_NUM_THREADS"] = str(host_target()["num-cores"])
    site = tempfile.TemporaryDirectory()
    os.environ.update(torch_free_environment(Path(site.name), os.environ))
    workload = get_workload("matmul", {"M": args.size, "N": args.size, "K": args.size})
    for trials in args.trials:
        for name, runner in (("autosched", run_autosched), ("metaschedule", run_stock)):
            with tempfile.TemporaryDirectory() as work:
                wall, scheduled = runner(workload, trials, args.seed, Path(work))
            secs = time_module(tvm.compile(scheduled, target=target).jit(), args.size)
            rows.append({"tuner": name, "trials": trials, "wall_secs": wall, "secs": secs})
    for row in rows:
        row["gflops"] = flops / row["secs"] / 1e9
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    numpy_gflops = rows[0]["gflops"]
    print(f"matmul {args.size}x{args.size}x{args.size} float32, target {json.dumps(host_target())}")
    print(f"{'tuner':<14}{'trials':>7}{'GFLOP/s':>10}{'vs numpy':>10}{'wall s':>9}")
    for row in rows:
        trials = "-" if row["trials"] is None else str(row["trials"])
        wall = "-" if row["wall_secs"] is None else f"{row['wall_secs']:.1f}"
        ratio = row["gflops"] / numpy_gflops
        print(f"{row['tuner']:<14}{trials:>7}{row['gflops']:>10.1f}{ratio:>10.2f}{wall:>9}")
    for trials in args.trials:
        ours, stock = (r for r in rows if r["trials"] == trials)
        gflops_ratio = ours["gflops"] / stock["gflops"]
        wall_ratio = ours["wall_secs"] / stock["wall_secs"]
        print(
            f"{trials} trials: autosched/metaschedule GFLOP/s {gflops_ratio:.2f},"
            f" wall {wall_ratio:.2f}"
        )


if __name__ == "__main__":
    main()
