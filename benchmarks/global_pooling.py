"""Benchmark: the squeeze-and-excite means of efficientnet_b0 (global average pooling of
channels-last tensors) tuned by autosched and by stock MetaSchedule at the same budget, against
the untuned program and numpy.

Each mean reduces the pixels of an NHWC tensor to one number a channel: the channels are
innermost in memory, the reduction outermost in the loop nest TVM writes. autosched's design space
holds a sketch for it (`autosched/search/global_pooling.py`: the pixels split among the cores,
each part read in memory order, channels innermost and vectorized); stock MetaSchedule's sketches
keep each channel's sum striding across the whole tensor.

    python benchmarks/global_pooling.py [--trials 32] [--seed 0]

Both tuners start from an empty log. Each best program is built again here and timed by TVM's
evaluator (200 calls a repeat, the fastest of 5 repeats), its input warm in the cache as in the
model, where the kernel before it has just written it; its output checked against numpy. TVM's
pool runs on the target's cores, here and in both tuners' measurements.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import timeit
from pathlib import Path

from autosched.torch_guard import keep_torch_out, torch_free_environment

keep_torch_out()

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from matmul_vs_metaschedule import run_autosched, run_stock  # noqa: E402

from autosched.bench.models import cpu_name  # noqa: E402
from autosched.target import host_target, to_tvm_target  # noqa: E402
from autosched.workloads import get_workload  # noqa: E402

SHAPES = ((112, 112, 32), (56, 56, 96), (56, 56, 144), (28, 28, 144), (28, 28, 240))
CALLS, REPEATS = 200, 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    target = host_target()
    # for this process and the builders and runners both tuners start from here on
    os.environ["TVM_NUM_THREADS"] = str(target["num-cores"])
    site = tempfile.TemporaryDirectory()
    os.environ.update(torch_free_environment(Path(site.name), os.environ))

    print(f"{cpu_name(target)}, TVM's pool on {target['num-cores']} threads, {args.trials} trials")
    print(f"{'(H, W, C)':<16}{'MB':>6}{'untuned us':>12}{'MetaSchedule us':>17}"
          f"{'autosched us':>14}{'numpy us':>10}{'vs MetaSchedule':>17}{'GB/s':>7}")  # fmt: skip
    for height, width, channels in SHAPES:
        workload = get_workload("global_avg_pool", {"H": height, "W": width, "C": channels})
        data = np.random.default_rng(0).uniform(-1, 1, (1, height, width, channels))
        data = data.astype("float32")
        programs = [workload.mod]
        for runner in (run_stock, run_autosched):
            with tempfile.TemporaryDirectory() as work:
                programs.append(runner(workload, args.trials, args.seed, Path(work))[1])
        untuned, stock, ours = (_timed(program, data, target) for program in programs)
        numpy_secs = _numpy_secs(data)
        megabytes = data.nbytes / 1e6
        print(f"{(height, width, channels)!s:<16}{megabytes:>6.2f}{untuned * 1e6:>12.1f}"
              f"{stock * 1e6:>17.1f}{ours * 1e6:>14.1f}{numpy_secs * 1e6:>10.1f}"
              f"{stock / ours:>16.1f}x{megabytes / 1e3 / ours:>7.0f}")  # fmt: skip


def _timed(program: tvm.IRModule, data: np.ndarray, target: dict) -> float:
    """The fastest of the repeats' mean seconds a call, once the output matches numpy's."""
    library = tvm.compile(program, target=to_tvm_target(target))
    device = tvm.cpu()
    inputs = tvm.runtime.tensor(data, device)
    output = tvm.runtime.tensor(np.zeros((1, data.shape[-1]), "float32"), device)
    library["main"](inputs, output)
    np.testing.assert_allclose(output.numpy(), data.mean(axis=(1, 2)), rtol=1e-4, atol=1e-6)
    evaluator = library.mod.time_evaluator("main", device, number=CALLS, repeat=REPEATS)
    return min(evaluator(inputs, output).results)


def _numpy_secs(data: np.ndarray) -> float:
    return min(timeit.repeat(lambda: data.mean(axis=(1, 2)), number=CALLS, repeat=REPEATS)) / CALLS


if __name__ == "__main__":
    main()
