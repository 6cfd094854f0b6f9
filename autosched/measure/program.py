"""What a measuring process does with one candidate: build it, time it, check its result.

These functions run inside the isolated child processes of `autosched.measure.serving`; each request
is a small picklable record whose ``execute`` returns plain data or raises.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import tvm

from autosched.intrinsics import use_tensor_intrinsics
from autosched.measure.config import MeasureConfig
from autosched.records import WorkloadRef
from autosched.schedule import apply_trace
from autosched.target import to_tvm_target
from autosched.workload import Workload, mismatch, random_inputs, resolve_workload

TIMING_SEED = 0


_CACHE_SIZE = 8
_workloads: dict[str, Workload] = {}
_reference_programs: dict[str, tvm.runtime.Module] = {}


def _remember(cache: dict, key: str, value: object) -> None:
    if len(cache) >= _CACHE_SIZE:
        cache.pop(next(iter(cache)))
    cache[key] = value


def _workload(ref: WorkloadRef) -> Workload:
    """The workload of ``ref``, rebuilt once per process."""
    if ref.key not in _workloads:
        _remember(_workloads, ref.key, resolve_workload(ref))
    return _workloads[ref.key]


def _reference_program(ref: WorkloadRef) -> tvm.runtime.Module:
    """The unscheduled workload compiled for this CPU: the reference where no numpy one exists."""
    if ref.key not in _reference_programs:
        program = tvm.compile(_workload(ref).mod, target={"kind": "llvm"}).jit()
        _remember(_reference_programs, ref.key, program)
    return _reference_programs[ref.key]


def _device(target: dict, index: int) -> tvm.runtime.Device:
    kind = str(target["kind"])
    return tvm.device("cpu" if kind == "llvm" else kind, index)


def _to_device(arrays: list[np.ndarray], dev: tvm.runtime.Device) -> list[tvm.runtime.Tensor]:
    return [tvm.runtime.tensor(array, dev) for array in arrays]


@dataclass(frozen=True)
class BuildRequest:
    """Replay a trace onto the workload, compile it for the target, export a shared library."""

    workload: WorkloadRef
    trace_json: str
    target: dict
    artifact_path: str

    def execute(self) -> float:
        start = time.perf_counter()
        use_tensor_intrinsics(self.target)
        sch = apply_trace(_workload(self.workload).mod, self.trace_json)
        tvm.compile(sch.mod, target=to_tvm_target(self.target)).export_library(self.artifact_path)
        return time.perf_counter() - start


@dataclass(frozen=True)
class RunRequest:
    """Time a built candidate on random inputs; returns every repeat's mean in seconds."""

    workload: WorkloadRef
    artifact_path: str
    target: dict
    config: MeasureConfig

    def execute(self) -> list[float]:
        dev = _device(self.target, self.config.device_index)
        args = _to_device(random_inputs(_workload(self.workload), TIMING_SEED), dev)
        timed = _warm_timer(self.artifact_path, args, dev, self.config, self.config.repeat)
        return [float(sample) for sample in timed.results]


@dataclass(frozen=True)
class RoundRequest:
    """One round of timing built candidates side by side: each, in the order given, warmed up and
    timed once (one repeat of at least ``min_repeat_ms``). Returns a sample per candidate, in
    seconds."""

    workload: WorkloadRef
    artifact_paths: tuple[str, ...]
    target: dict
    config: MeasureConfig

    def execute(self) -> list[float]:
        dev = _device(self.target, self.config.device_index)
        args = _to_device(random_inputs(_workload(self.workload), TIMING_SEED), dev)
        return [
            float(_warm_timer(path, args, dev, self.config, repeat=1).mean)
            for path in self.artifact_paths
        ]


def _warm_timer(
    artifact_path: str,
    args: list[tvm.runtime.Tensor],
    dev: tvm.runtime.Device,
    config: MeasureConfig,
    repeat: int,
) -> tvm.runtime.module.BenchmarkResult:
    """A built candidate's ``main`` on ``args``: warmed up, then timed ``repeat`` times as the
    protocol of ``config`` says."""
    module = tvm.runtime.load_module(artifact_path)
    for _ in range(config.warmup):
        module["main"](*args)
    dev.sync()
    evaluator = module.time_evaluator(
        "main",
        dev,
        number=config.number,
        repeat=repeat,
        min_repeat_ms=config.min_repeat_ms,
        f_preproc="cache_flush_cpu_non_first_arg" if config.cache_flush else "",
    )
    return evaluator(*args)


@dataclass(frozen=True)
class VerifyRequest:
    """Run a built candidate on fresh random inputs and compare with the reference.

    Returns None when every output matches, else a one-line description of the first mismatch.
    The reference is the workload's numpy one where it has one, else its unscheduled program.
    """

    workload: WorkloadRef
    artifact_path: str
    target: dict
    seed: int
    device_index: int = 0

    def execute(self) -> str | None:
        workload = _workload(self.workload)
        inputs = random_inputs(workload, self.seed)
        dev = _device(self.target, self.device_index)
        args = _to_device(inputs, dev)
        tvm.runtime.load_module(self.artifact_path)["main"](*args)
        dev.sync()
        got = [arg.numpy() for arg in args]
        expected = self._expected(workload, inputs)
        for index, (out, ref) in enumerate(zip(got, expected, strict=True)):
            difference = None if ref is None else mismatch(out, ref)
            if difference is not None:
                return f"argument {index} {difference}"
        return None

    def _expected(self, workload: Workload, inputs: list[np.ndarray]) -> list[np.ndarray | None]:
        """Expected final contents of every argument; None for arguments not compared."""
        if workload.reference is not None and workload.num_outputs:
            n_in = len(inputs) - workload.num_outputs
            outputs = workload.reference(inputs[:n_in])
            return [None] * n_in + [np.asarray(out) for out in outputs]
        args = _to_device(inputs, tvm.cpu())
        _reference_program(self.workload)["main"](*args)
        return [arg.numpy() for arg in args]
