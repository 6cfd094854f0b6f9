"""The fastest any machine of a target could run a workload: a ceiling on its arithmetic rate, so
that a latency a worker reports beyond it is refused (``autosched.log.leases``).

Calibrations (``autosched.machine.roofline``) stay on the machines that measured them; the
server keeps no peak of a target, so the ceiling is physical and generous, not measured.
"""

from __future__ import annotations

import math

CORE_GFLOPS = 64 * 2 * 6.0
"""One CPU core: 64 float32 FMA lanes (twice the widest core made, two 512-bit units), two FLOPs
each, at 6 GHz."""
MAX_CORES = 1024
"""The cores of a CPU target at most, and where its ``num-cores`` is missing: a target's JSON may
be a worker's word."""
ACCELERATOR_GFLOPS = 20e6
"""Any target that is not a CPU: 20 PFLOP/s, above the densest rate of any one accelerator."""


def ceiling_gflops(target: dict) -> float:
    """The most FLOP/s any machine of ``target`` (target JSON) could reach."""
    if target.get("kind") != "llvm":
        return ACCELERATOR_GFLOPS
    cores = target.get("num-cores")
    if not isinstance(cores, int) or isinstance(cores, bool) or not 1 <= cores <= MAX_CORES:
        cores = MAX_CORES
    return cores * CORE_GFLOPS


def impossible(secs: float, flops: float | None, target: dict) -> str | None:
    """Why ``secs`` cannot be a latency of a workload of ``flops`` FLOPs (None: unknown) on
    ``target``; None where it can."""
    if not math.isfinite(secs) or secs <= 0:
        return f"{secs} s is not a time"
    ceiling = ceiling_gflops(target)
    if flops and flops / secs > ceiling * 1e9:
        return (
            f"{secs:.3g} s for {flops:.3g} FLOPs is {flops / secs / 1e9:.3g} GFLOP/s, beyond the "
            f"{ceiling:.3g} GFLOP/s any machine of the target could reach"
        )
    return None
