"""Schedules as portable text: trace JSON round trips, program hashes, tensor intrinsics."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tvm.s_tir import Schedule

from autosched.schedule import apply_trace, program_hash, trace_to_json
from autosched.workloads import get_workload


def _tiled(mod, factor: int) -> Schedule:
    sch = Schedule(mod)
    block = sch.get_sblock("C")
    i, _, _ = sch.get_loops(block)
    sch.split(i, factors=[None, factor])
    return sch


def test_a_trace_replays_from_its_json_into_the_same_program() -> None:
    mod = get_workload("matmul", {"M": 32, "N": 32, "K": 32}).mod
    sch = _tiled(mod, 8)
    text = trace_to_json(sch.trace)
    assert isinstance(json.loads(text), list)
    assert program_hash(apply_trace(mod, text).mod) == program_hash(sch.mod)


def test_program_hash_tells_programs_apart_and_is_stable() -> None:
    mod = get_workload("matmul", {"M": 32, "N": 32, "K": 32}).mod
    assert program_hash(_tiled(mod, 8).mod) == program_hash(_tiled(mod, 8).mod)
    assert program_hash(_tiled(mod, 8).mod) != program_hash(_tiled(mod, 4).mod)
    assert program_hash(_tiled(mod, 8).mod) != program_hash(mod)


@pytest.mark.slow
def test_only_the_target_kinds_tensor_intrinsics_are_registered() -> None:
    script = (
        "import sys\n"
        "from autosched.torch_guard import keep_torch_out\n"
        "keep_torch_out()\n"  # as in autosched's processes, where this is what happens
        "from tvm.s_tir import TensorIntrin\n"
        "from autosched.intrinsics import use_tensor_intrinsics\n"
        "use_tensor_intrinsics({'kind': 'llvm', 'mtriple': 'x86_64-linux-gnu'})\n"
        "from tvm.s_tir.meta_schedule import TuneContext\n"
        "TuneContext()\n"
        "TensorIntrin.get('dot_16x4_vnni')\n"
        "print(sorted(m for m in sys.modules if m.startswith('tvm.s_tir.tensor_intrin.')))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['tvm.s_tir.tensor_intrin.x86']"
