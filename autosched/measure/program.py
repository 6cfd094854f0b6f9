"""What a measuring process does with one candidate: build it, time it, check its result.

These functions run inside the isolated child processes of `autosched.measure.serving`; each request
is a small picklable record whose ``execute`` returns plain data or raises.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tvm
import tvm_ffi
from tvm.ir import IRModule
from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

from autosched.intrinsics import use_tensor_intrinsics
from autosched.measure.config import MeasureConfig
from autosched.measure.gathers import check_gathers
from autosched.records import WorkloadRef
from autosched.schedule import apply_trace
from autosched.target import to_tvm_target
from autosched.weights import transform_weights_ahead
from autosched.workload import (
    Workload,
    buffer_args,
    mismatch,
    random_arrays,
    random_inputs,
    resolve_workload,
)

TIMING_SEED = 0

ArgSpecs = tuple[tuple[tuple[int, ...], str], ...]
"""Shape and dtype of each argument of a built program."""


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


def target_device(target: dict, index: int = 0) -> tvm.runtime.Device:
    """The device that runs programs of ``target``: the CPU, or the ``index``-th GPU of its kind."""
    kind = str(target["kind"])
    return tvm.device("cpu" if kind == "llvm" else kind, index)


def _to_device(arrays: list[np.ndarray], dev: tvm.runtime.Device) -> list[tvm.runtime.Tensor]:
    return [tvm.runtime.tensor(array, dev) for array in arrays]


@dataclass(frozen=True)
class Built:
    """A built candidate: how long the build took, the arguments its ``main`` takes, and whether
    it takes its weights packed ahead of time (then not in the workload's own layout)."""

    secs: float
    args: ArgSpecs
    prepacked: bool


@dataclass(frozen=True)
class BuildRequest:
    """Replay a trace onto the workload, compile it for the target, export a shared library.

    A schedule that stores a layout-free weight in a layout of its own starts with a block that
    packs it, and a workload may transform such a weight in stages of its own
    (`autosched.weights`). With ``prepacked`` (for timing) those blocks are left out and the
    program takes the weight packed or transformed, as a deployed model prepares its weights once,
    outside the calls; without it (to check the result) the program takes the weight as the
    workload does and prepares it itself.

    A CPU program that LLVM may take minutes to build is refused first (`check_gathers`).
    """

    workload: WorkloadRef
    trace_json: str
    target: dict
    artifact_path: str
    prepacked: bool = True

    def execute(self) -> Built:
        start = time.perf_counter()
        use_tensor_intrinsics(self.target)
        workload = _workload(self.workload)
        mod = apply_trace(workload.mod, self.trace_json).mod
        prepacked = False
        if self.prepacked:
            packed = timed_program(mod)
            # a packed layout can keep the shape (a transpose): the packing block tells
            prepacked = not tvm_ffi.structural_equal(packed, mod)
            mod = packed
        if self.target.get("kind") == "llvm":
            check_gathers(mod["main"])
        tvm.compile(mod, target=to_tvm_target(self.target)).export_library(self.artifact_path)
        args = tuple(buffer_args(mod["main"], workload.name))
        return Built(time.perf_counter() - start, args, prepacked)


def timed_program(mod: IRModule) -> IRModule:
    """A scheduled program as it is timed: its constant weights packed and transformed ahead, so
    that ``main`` takes them prepared (see `BuildRequest`)."""
    return transform_weights_ahead(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod))


def _timing_args(ref: WorkloadRef, args: ArgSpecs, dev: tvm.runtime.Device) -> list:
    """Random arguments of these shapes for timing: the same for every candidate of a workload
    that takes its arguments as the workload does."""
    arrays = random_arrays(args, _workload(ref).num_outputs or 0, TIMING_SEED)
    return _to_device(arrays, dev)


@dataclass(frozen=True)
class RunRequest:
    """Time a built candidate, whose ``main`` takes ``args``, on random inputs; returns every
    repeat's mean in seconds."""

    workload: WorkloadRef
    artifact_path: str
    args: ArgSpecs
    target: dict
    config: MeasureConfig

    def execute(self) -> list[float]:
        dev = target_device(self.target, self.config.device_index)
        args = _timing_args(self.workload, self.args, dev)
        cold = _timed_cold(self.workload, self.target)
        repeat = self.config.cold_repeat if cold else self.config.repeat
        timed = _timer(self.artifact_path, args, dev, self.config, repeat, cold=cold)
        return [float(sample) for sample in timed.results]


@dataclass(frozen=True)
class RoundRequest:
    """One round of timing built candidates side by side: each, in the order given, warmed up and
    timed once (one repeat of at least ``min_repeat_ms``). Returns a sample per candidate, in
    seconds."""

    workload: WorkloadRef
    candidates: tuple[tuple[str, ArgSpecs], ...]  # (library, the arguments its main takes)
    target: dict
    config: MeasureConfig

    def execute(self) -> list[float]:
        dev = target_device(self.target, self.config.device_index)
        cold = _timed_cold(self.workload, self.target)
        timing_args: dict[ArgSpecs, list] = {}
        samples = []
        for path, args in self.candidates:
            if args not in timing_args:
                timing_args[args] = _timing_args(self.workload, args, dev)
            timer = _timer(path, timing_args[args], dev, self.config, repeat=1, cold=cold)
            samples.append(float(timer.mean))
        return samples


def _timed_cold(ref: WorkloadRef, target: dict) -> bool:
    """Whether the workload's candidates are timed cache-cold: it asks for it, on a CPU."""
    return target.get("kind") == "llvm" and _workload(ref).timed_cold


def _timer(
    artifact_path: str,
    args: list[tvm.runtime.Tensor],
    dev: tvm.runtime.Device,
    config: MeasureConfig,
    repeat: int,
    *,
    cold: bool,
) -> tvm.runtime.module.BenchmarkResult:
    """A built candidate's ``main`` on ``args``: warmed up, then timed ``repeat`` times as the
    protocol of ``config`` says; ``cold``, each repeat is one call after the CPU caches are
    flushed of every argument but the first, and a slow candidate is timed in fewer calls (as
    many as fit in the time a warm timing takes, at least ``repeat`` of the warm protocol)."""
    module = tvm.runtime.load_module(artifact_path)

    def call() -> None:
        module["main"](*args)
        dev.sync()

    if cold and config.warmup:
        budget_ms = config.repeat * config.min_repeat_ms
        call_ms = fastest_call_ms(call, config.warmup, budget_ms)
        affordable = int(budget_ms / max(call_ms, 1e-3))
        repeat = max(min(repeat, config.repeat), min(repeat, affordable))
    else:
        for _ in range(config.warmup):
            call()
    evaluator = module.time_evaluator(
        "main",
        dev,
        number=1 if cold else config.number,
        repeat=repeat,
        min_repeat_ms=0 if cold else config.min_repeat_ms,
        f_preproc="cache_flush_cpu_non_first_arg" if cold else "",
    )
    return evaluator(*args)


ESTIMATE_CALLS = 3
"""Calls a cold timing's estimate of one call takes the fastest of, where they fit its budget."""


def fastest_call_ms(call: Callable[[], None], warmup: int, budget_ms: float) -> float:
    """Milliseconds of the fastest of ``warmup`` calls of ``call``, and of more up to
    ``ESTIMATE_CALLS`` while they fit in ``budget_ms``: on a busy machine one call that waited
    for its core would otherwise cut a fast kernel's cache-cold samples to the fewest."""
    fastest, spent, calls = math.inf, 0.0, 0
    while calls < warmup or (calls < ESTIMATE_CALLS and spent < budget_ms):
        start = time.perf_counter()
        call()
        took = 1e3 * (time.perf_counter() - start)
        fastest, spent, calls = min(fastest, took), spent + took, calls + 1
    return fastest


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
        dev = target_device(self.target, self.device_index)
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
