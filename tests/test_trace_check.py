"""Traces from outside (a log import, a lease, a record) are admitted before TVM replays them:
MetaSchedule's own instructions and annotations only, small and shallow; the annotation that links
LLVM IR into a kernel, the unsafe primitives and nesting built to exhaust the parser are refused."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from autosched.errors import UserError
from autosched.schedule import apply_trace, trace_to_json
from autosched.search.space import design_space
from autosched.target import host_target
from autosched.trace_check import check_trace
from autosched.workloads import get_workload

DATA = Path(__file__).parent / "data"


def _recorded_traces() -> list[str]:
    traces = []
    for path in DATA.glob("*.json.gz"):
        with gzip.open(path) as file:
            stack = [json.load(file)]
        while stack:
            value = stack.pop()
            if isinstance(value, str) and value.startswith("[["):
                traces.append(value)
            elif isinstance(value, dict):
                stack.extend(value.values())
            elif isinstance(value, list):
                stack.extend(value)
    return traces


def test_every_recorded_trace_and_design_space_is_admitted() -> None:
    traces = _recorded_traces()
    assert len(traces) > 50
    workload = get_workload("matmul", {"M": 64, "N": 64, "K": 64})
    space = design_space(workload, host_target(), seed=0)
    traces += [trace_to_json(schedule.trace) for schedule in space.schedules]
    weights_packed = [["Annotate", ["b0", True], ["meta_schedule.layout_rewrite_preproc"], []]]
    traces.append(json.dumps([weights_packed, []]))  # a model's kernel packing its weights
    for trace in traces:
        check_trace(trace)


def _matmul_trace_with(instruction: list) -> tuple[object, str]:
    workload = get_workload("matmul", {"M": 64, "N": 64, "K": 64})
    schedule = design_space(workload, host_target(), seed=0).schedules[0]
    instructions, decisions = json.loads(trace_to_json(schedule.trace))
    loops = next(i for i in instructions if i[0] == "GetLoops")[3][0]
    planted = [arg.replace("LOOP", loops) if isinstance(arg, str) else arg for arg in instruction]
    planted[1] = [loops if arg == "LOOP" else arg for arg in planted[1]]
    return workload, json.dumps([[*instructions, planted], decisions])


@pytest.mark.parametrize(
    ("instruction", "message"),
    [
        (["Annotate", ["LOOP", '"module asm \\".pushsection .init_array\\""'],
          ["pragma_import_llvm"], []], "may not attach the annotation 'pragma_import_llvm'"),
        (["Annotate", ["LOOP", '"int system(const char*);"'], ["pragma_import_c"], []],
         "may not attach the annotation 'pragma_import_c'"),
        (["UnsafeSetDType", [], ["C", "float64"], []],
         "may not use the instruction 'UnsafeSetDType'"),
        (["Annotate", ["LOOP", ["x"] * 3], ["pragma_auto_unroll_max_step"], []],
         "must have a plain value"),
    ],
)  # fmt: skip
def test_a_replayed_trace_cannot_plant_what_admission_refuses(
    instruction: list, message: str
) -> None:
    workload, trace = _matmul_trace_with(instruction)
    with pytest.raises(UserError, match=message):
        apply_trace(workload.mod, trace)


def _nested_attributes(depth: int) -> str:
    attributes: list = []
    for _ in range(depth):
        attributes = [attributes]
    return json.dumps([[["GetSBlock", [], attributes, []]], []])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "must be JSON text"),
        (_nested_attributes(100), "nested over 64 levels"),
        (json.dumps([[["GetSBlock", [], {"__class__": "os.system"}, []]], []]),
         "lists, numbers and strings only"),
        (json.dumps([[0] * 1_100_000, []], separators=(",", ":")), "over 1048576 values"),
    ],
)  # fmt: skip
def test_a_trace_built_to_exhaust_the_parser_is_refused_before_tvm_reads_it(
    text: str, message: str
) -> None:
    with pytest.raises(UserError, match=message):
        check_trace(text)
