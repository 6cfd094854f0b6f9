"""Schedules as portable text: trace JSON in and out, replay onto a workload, program hashes.

A candidate travels between the search, the measuring processes and the tuning log as the JSON text
of its MetaSchedule trace; replaying that text onto the workload's module gives back the program.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import sys
from typing import Any

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import Trace
from tvm.tirx import FloatImm, IntImm


def _plain(value: Any) -> Any:
    """Turn the TVM containers and immediates of a trace's JSON form into plain Python values."""
    if isinstance(value, IntImm):
        return int(value.value)
    if isinstance(value, FloatImm):
        return float(value.value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return [_plain(item) for item in value]


# The trace of the unscheduled program: it replays to the workload as written (the baseline).
BASELINE_TRACE = "[[],[]]"

# Tensor intrinsics each target kind's schedule rules may tensorize with. Importing TVM's
# `tvm.s_tir.tensor_intrin` package registers those of every kind, which takes seconds (CUDA's alone
# over ten), and MetaSchedule imports it whenever a TuneContext is made.
_INTRINSIC_MODULES = {
    "llvm": ("x86", "arm_cpu", "riscv_cpu"),
    "cuda": ("cuda",),
    "rocm": ("rocm",),
    "metal": ("metal",),
    "hexagon": ("hexagon",),
}
_INTRINSIC_PACKAGE = "tvm.s_tir.tensor_intrin"


def use_tensor_intrinsics(target_kind: str) -> None:
    """Register the tensor intrinsics of ``target_kind``, and no others.

    Call before making a TuneContext or replaying a trace for that kind. The intrinsic package is
    entered without running its ``__init__``, so MetaSchedule's own import of it is then a no-op.
    """
    if _INTRINSIC_PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(_INTRINSIC_PACKAGE)
        assert spec is not None and spec.submodule_search_locations is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules[_INTRINSIC_PACKAGE] = package
    for name in _INTRINSIC_MODULES.get(target_kind, ()):
        importlib.import_module(f"{_INTRINSIC_PACKAGE}.{name}")


def trace_to_json(trace: Trace) -> str:
    """The trace of a schedule, with its sampling decisions, as compact JSON text."""
    return json.dumps(_plain(trace.as_json()), separators=(",", ":"))


def apply_trace(mod: IRModule, trace_json: str) -> Schedule:
    """Replay a trace onto a fresh schedule of ``mod``; raises TVM's error if it does not apply."""
    sch = Schedule(mod)
    Trace.apply_json_to_schedule(json.loads(trace_json), sch)
    return sch


def program_hash(mod: IRModule) -> str:
    """A portable hash of a scheduled program: sha256 of its TVMScript text.

    TVM's structural hash is not the same on every platform, so the text is hashed instead.
    """
    return hashlib.sha256(mod.script().encode()).hexdigest()[:32]
