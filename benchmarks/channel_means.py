"""Benchmark: the squeeze-and-excite means of a channels-last model, untuned, as a schedule of
hand, and as numpy computes them. Each mean reduces the pixels of an NHWC tensor to one number a
channel: the channels are innermost in memory, the reduction outermost in the loop nest TVM
writes, so each channel's sum strides across the whole tensor.

The schedule of hand splits the pixel rows among the cores (``rfactor``), puts the channels
innermost and vectorizes them, so every cache line is read once. After 2,000 trials on
efficientnet_b0 (32 a task) MetaSchedule's best schedules of these means took 10 to 14 GB/s
(benchmarks/README.md): no sketch of its design space puts the channels inside the reduction.

    python benchmarks/channel_means.py [--threads N]

Shapes: efficientnet_b0's squeeze-and-excite means over its largest inputs. Each build is timed
by TVM's evaluator (200 calls a repeat, the fastest of 5 repeats), its input warm in the cache as
in the model, where the kernel before it has just written it; its output checked against numpy.
"""

from __future__ import annotations

import argparse
import functools
import os
import timeit
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # TVM is imported once its pool's size is set
    import tvm

SHAPES = ((112, 112, 32), (56, 56, 96), (56, 56, 144), (28, 28, 144), (28, 28, 240))
CALLS, REPEATS = 200, 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM's pool starts

    from autosched.bench.models import cpu_name
    from autosched.target import host_target

    target = host_target()
    print(f"{cpu_name(target)}, TVM's pool on {args.threads} threads")
    print(f"{'mean of (1, H, W, C)':<22}{'MB':>6}{'untuned us':>12}{'by hand us':>12}"
          f"{'numpy us':>10}{'by hand GB/s':>14}")  # fmt: skip
    for shape in SHAPES:
        data = np.random.default_rng(0).uniform(-1, 1, (1, *shape)).astype("float32")
        expected = data.mean(axis=(1, 2), keepdims=True)
        untuned, by_hand = (
            _timed(build, data, expected, target)
            for build in (_mean_module, functools.partial(_by_hand, parts=args.threads))
        )
        numpy_secs = _numpy_secs(data)
        megabytes = data.nbytes / 1e6
        print(f"{shape!s:<22}{megabytes:>6.2f}{untuned * 1e6:>12.1f}{by_hand * 1e6:>12.1f}"
              f"{numpy_secs * 1e6:>10.1f}{megabytes / 1e3 / by_hand:>14.1f}")  # fmt: skip


def _mean_module(shape: tuple[int, ...]) -> tvm.IRModule:
    import tvm
    from tvm import te, topi

    data = te.placeholder((1, *shape), "float32", name="data")
    total = topi.sum(data, [1, 2], keepdims=True)
    pixels = shape[0] * shape[1]
    mean = te.compute(total.shape, lambda *index: total(*index) / pixels, name="mean")
    return tvm.IRModule({"main": te.create_prim_func([data, mean])})


def _by_hand(shape: tuple[int, ...], parts: int) -> tvm.IRModule:
    """The pixel rows split in ``parts`` (one a thread), the channels innermost and vectorized."""
    from tvm import s_tir

    schedule = s_tir.Schedule(_mean_module(shape))
    block = schedule.get_child_blocks(schedule.get_sblock("root"))[0]  # the sum; then the divide
    rows = schedule.get_loops(block)[-2]  # (batch, 1, 1, channel, rows, columns)
    split, rows = schedule.split(rows, [parts, None])
    partial = schedule.rfactor(split, 0)
    *spatial, channel, split, rows, columns = schedule.get_loops(partial)
    schedule.reorder(split, *spatial, rows, columns, channel)
    schedule.parallel(split)
    schedule.vectorize(channel)
    schedule.decompose_reduction(partial, rows)
    return schedule.mod


def _timed(
    build: Callable[[tuple[int, ...]], tvm.IRModule],
    data: np.ndarray,
    expected: np.ndarray,
    target: dict,
) -> float:
    import tvm

    from autosched.target import to_tvm_target

    library = tvm.compile(build(data.shape[1:]), target=to_tvm_target(target))
    device = tvm.cpu()
    inputs = tvm.runtime.tensor(data, device)
    output = tvm.runtime.tensor(np.zeros(expected.shape, "float32"), device)
    library["main"](inputs, output)
    np.testing.assert_allclose(output.numpy(), expected, rtol=1e-4, atol=1e-6)
    evaluator = library.mod.time_evaluator("main", device, number=CALLS, repeat=REPEATS)
    return min(evaluator(inputs, output).results)


def _numpy_secs(data: np.ndarray) -> float:
    return min(timeit.repeat(lambda: data.mean(axis=(1, 2)), number=CALLS, repeat=REPEATS)) / CALLS


if __name__ == "__main__":
    main()
