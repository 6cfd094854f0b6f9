"""A compiled model timed whole, as the loader (``autosched.runtime``) runs its exported library:
the Relax VM's ``main`` on the target's threads, ``ROUNDS`` samples taken as an exported model's
manifest says (warm: each the mean of calls for at least ``min_repeat_ms``), their median and
95% interval.

This, not the sum of the tasks' latencies, is what a deployment gets: it counts the kernels that
keep TVM's default schedule, the tasks whose untuned latency is unknown, and what the VM spends
between calls.
"""

from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass

import tvm
from tvm import relax

from autosched.exports.manifest import final_timing
from autosched.finals.ranking import ROUNDS, median_interval
from autosched.model.compile import random_model_inputs
from autosched.model.load import Model
from autosched.runtime import THREADS_VARIABLE, function_sampler, use_threads
from autosched.target import thread_env


@dataclass(frozen=True)
class ModelLatency:
    """The whole model's median latency and its 95% interval, in seconds, on ``threads`` of
    TVM's pool (None: the pool as TVM sized it)."""

    median_secs: float
    low_secs: float
    high_secs: float
    threads: int | None

    def as_json(self) -> dict[str, object]:
        return {
            "latency_us": self.median_secs * 1e6,
            "interval_us": [self.low_secs * 1e6, self.high_secs * 1e6],
            "threads": self.threads,
        }


def time_model(executable: tvm.runtime.Module, model: Model, target: dict) -> ModelLatency:
    """Time ``executable`` (``model`` compiled for the CPU ``target``) on random inputs.

    TVM's pool is per thread and cannot grow once started (this thread's may have run the
    output check on TVM's own guess of the cores), so the samples are taken in a thread of
    their own, whose pool starts as wide as the target's cores.
    """
    threads = thread_env(target).get(THREADS_VARIABLE)
    samples: list[float] = []
    failures: list[BaseException] = []

    def sample() -> None:
        try:
            if threads is not None:
                use_threads(int(threads))
            device = tvm.cpu()
            vm = relax.VirtualMachine(executable, device)
            inputs = random_model_inputs(model.inputs)
            args = [tvm.runtime.tensor(array, device) for array in inputs]
            taken = function_sampler(vm, "main", device, args, final_timing(cold=False))
            samples.extend(taken() for _ in range(ROUNDS))
        except BaseException as error:  # re-raised in the caller's thread
            failures.append(error)

    timer = threading.Thread(target=sample, name="model-latency")
    timer.start()
    timer.join()
    if failures:
        raise failures[0]
    interval = median_interval(samples)
    return ModelLatency(
        statistics.median(samples),
        interval.low,
        interval.high,
        None if threads is None else int(threads),
    )
