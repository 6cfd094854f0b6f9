"""Schedules as portable text: trace JSON in and out, replay onto a workload, program hashes.

A candidate travels between the search, the measuring processes and the tuning log as the JSON text
of its MetaSchedule trace; replaying that text onto the workload's module gives back the program.
"""

from __future__ import annotations

import hashlib
import json
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
