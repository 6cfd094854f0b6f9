"""The FMA loop: a fixed amount of vector FMAs on every core, the arithmetic the CPU can do at
most. `autosched calibrate` takes its rate as a peak, and a measurer times it as its control
between candidates (`autosched.measure.spells`).

Per core, independent chains of vector FMAs, one vector register each: enough to cover the FMA
latency on two ports, and few enough for AVX2's 16 registers. Time it in a process whose TVM
thread pool spans the target's cores (`autosched.target.thread_env`), or it measures one core.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import tvm
from tvm.script import tirx as T

from autosched.machine.cpu import cpu_peak
from autosched.target import canonical_target, to_tvm_target

_FMA_CHAINS = 10
_POOL_SETTLE_SECS = 0.1  # the thread pool's workers spin a while after the last call: ours too


def fma_loop_shape(target: dict) -> tuple[int, int]:
    """The cores (the target's) and float32 vector lanes (this CPU's widest) of ``target``'s FMA
    loop; 8 lanes where the CPU is not one we know."""
    cores = int(canonical_target(target).get("num-cores") or os.cpu_count() or 1)
    theory = cpu_peak(cores)
    return cores, theory.lanes if theory is not None else 8


def fma_loop(cores: int, lanes: int, steps: int) -> tvm.IRModule:
    """The FMA loop: on each of ``cores`` cores in parallel, independent chains of vector FMAs of
    ``lanes`` float32 lanes, ``steps`` FMAs per chain; its ``main`` writes each chain's last value
    to its one argument, of shape (cores, chains, lanes). It does ``fma_loop_flops`` of work."""
    shape = (cores, _FMA_CHAINS, lanes)

    @T.prim_func
    def main(out: T.Buffer(shape, "float32")):
        for core in T.parallel(cores):
            acc = T.decl_buffer((_FMA_CHAINS, lanes), "float32", scope="local")
            for chain in T.unroll(_FMA_CHAINS):
                for lane in T.vectorized(lanes):
                    acc[chain, lane] = T.Cast("float32", chain + lane) * T.float32(0.001)
            for _step in range(steps):
                for chain in T.unroll(_FMA_CHAINS):
                    for lane in T.vectorized(lanes):
                        acc[chain, lane] = T.fma(
                            acc[chain, lane], T.float32(0.999), T.float32(0.001)
                        )
            for chain in T.unroll(_FMA_CHAINS):
                for lane in T.vectorized(lanes):
                    out[core, chain, lane] = acc[chain, lane]

    return tvm.IRModule({"main": main})


def fma_loop_flops(cores: int, lanes: int, steps: int) -> int:
    """The floating-point operations of one call of ``fma_loop(cores, lanes, steps)``."""
    return 2 * cores * _FMA_CHAINS * lanes * steps


def fma_loop_output(cores: int, lanes: int) -> tvm.runtime.Tensor:
    """An argument for ``fma_loop``'s ``main``."""
    return tvm.runtime.empty((cores, _FMA_CHAINS, lanes), "float32", tvm.cpu())


# per process: the FMA loops built here, by target (its JSON) and steps, with their argument
_built: dict[tuple[str, int], tuple[tvm.runtime.Module, tvm.runtime.Tensor]] = {}


def built_fma_loop(target: dict, steps: int) -> tuple[tvm.runtime.Module, tvm.runtime.Tensor]:
    """``target``'s FMA loop of ``steps`` FMAs a chain, built for this process on first use,
    and an argument for it."""
    key = (json.dumps(target, sort_keys=True), steps)
    if key not in _built:
        cores, lanes = fma_loop_shape(target)
        module = tvm.compile(fma_loop(cores, lanes, steps), target=to_tvm_target(target)).jit()
        _built[key] = module, fma_loop_output(cores, lanes)
    return _built[key]


def call_secs(
    module: tvm.runtime.Module, args: list[tvm.runtime.Tensor], min_repeat_ms: int
) -> float:
    """Seconds of one call of ``module``'s ``main`` on ``args``, from one repeat of at least
    ``min_repeat_ms`` after a warm-up call: how the measurer's control times its programs."""
    module["main"](*args)
    timer = module.time_evaluator(
        "main", tvm.cpu(), number=1, repeat=1, min_repeat_ms=min_repeat_ms
    )
    return float(timer(*args).mean)


@dataclass(frozen=True)
class FmaRate:
    """The FMA loop's rate, and the CPU time the process that measured it took to do so."""

    gflops: float
    cpu_secs: float


@dataclass(frozen=True)
class FmaRateRequest:
    """The FMA loop's rate on ``target``, from the fastest of ``repeats`` calls of ``steps`` FMAs
    a chain; a request for a measuring process (`autosched.measure.child`)."""

    target: dict
    steps: int
    repeats: int

    def execute(self) -> FmaRate:
        started = time.process_time()
        module, out = built_fma_loop(self.target, self.steps)
        timer = module.time_evaluator("main", tvm.cpu(), number=1, repeat=self.repeats)
        secs = min(timer(out).results)
        cores, lanes = fma_loop_shape(self.target)
        gflops = fma_loop_flops(cores, lanes, self.steps) / secs / 1e9
        time.sleep(_POOL_SETTLE_SECS)
        return FmaRate(float(gflops), time.process_time() - started)
