"""Schedules as portable text: trace JSON in and out, replay onto a workload, program hashes; and
the loop nests of a scheduled program, taken apart and put back together.

A candidate travels between the search, the measuring processes and the tuning log as the JSON text
of its MetaSchedule trace; replaying that text onto the workload's module gives back the program.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tvm.ir import IRModule
from tvm.s_tir import SBlock, SBlockRealize, Schedule
from tvm.s_tir.schedule import Trace
from tvm.tirx import FloatImm, IntImm, PrimFunc, SeqStmt, Stmt, Var

from autosched.trace_check import check_trace


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
    """Replay a trace onto a fresh schedule of ``mod``, once admitted (`check_trace`: it raises
    UserError); raises TVM's error if it does not apply."""
    sch = Schedule(mod)
    Trace.apply_json_to_schedule(check_trace(trace_json), sch)
    return sch


def program_hash(mod: IRModule) -> str:
    """A portable hash of a scheduled program: sha256 of its TVMScript text.

    TVM's structural hash is not the same on every platform, so the text is hashed instead.
    """
    return hashlib.sha256(mod.script().encode()).hexdigest()[:32]


def loop_nests(mod: IRModule) -> list[tuple[Stmt, list[SBlock]]]:
    """The loop nests at the top of ``main`` (its stages, each with what a schedule fused into
    it), in program order, each with the blocks it holds."""
    root = mod["main"].body.block
    nests = list(root.body.seq) if isinstance(root.body, SeqStmt) else [root.body]
    sch = Schedule(mod)
    blocks: list[list[SBlock]] = [[] for _ in nests]
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        loops = sch.get_loops(rv)
        top = sch.get(loops[0]) if loops else sch.get(rv)
        for nest, held in zip(nests, blocks, strict=True):
            if nest.same_as(top) or (isinstance(nest, SBlockRealize) and nest.block.same_as(top)):
                held.append(sch.get(rv))
    return list(zip(nests, blocks, strict=True))


def with_nests(
    mod: IRModule, nests: list[Stmt], alloc_buffers: list[Var], params: list[Var]
) -> IRModule:
    """``mod`` whose ``main`` takes ``params`` and runs ``nests`` under its root block, which
    allocates ``alloc_buffers``; its attributes stay."""
    func = mod["main"]
    root = func.body.block
    block = SBlock(
        root.iter_vars,
        root.reads,
        root.writes,
        root.name_hint,
        nests[0] if len(nests) == 1 else SeqStmt(nests),
        root.init,
        alloc_buffers,
        root.match_buffers,
        root.annotations,
    )
    main = PrimFunc(params, SBlockRealize([], True, block), func.ret_type, func.attrs)
    return IRModule({"main": main})
