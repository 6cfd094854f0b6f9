"""Programs from outside run nothing but the tuned kernel: TVMScript is refused wherever it comes
from, and IR JSON is admitted only when it holds a TIR function of pure math within the limits."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import Cli

from autosched.admission import PURE_MATH_OPS, admit_program, program_json
from autosched.errors import UserError
from autosched.log import TuningLog
from autosched.log.subjects import ensure_subject
from autosched.measure import LocalMeasurer, MeasureConfig
from autosched.records import BASELINE_TRACE, ErrorKind, WorkloadRef
from autosched.script_check import check_script
from autosched.target import host_target
from autosched.workload import resolve_workload, workload_from_ir_json
from autosched.workloads import get_workload

Graph = dict


def _payloads(marker: Path) -> list[str]:
    """TVMScript that would write ``marker`` if TVM's parser ever saw it: in a decorator argument,
    an annotation's dtype string, a loop bound, a function attribute, a class body, a buffer
    shape string reaching builtins through an attribute."""
    write = f"open({str(marker)!r}, 'w').write('pwned')"
    return [
        f"@T.prim_func(private={write})\ndef f(A: T.Buffer((4,), 'float32')):\n  T.evaluate(0)\n",
        f'@T.prim_func\ndef f(A: T.Buffer((4,), "{write}")):\n  T.evaluate(0)\n',
        f"@T.prim_func\ndef f(A: T.Buffer((4,), 'float32')):\n  for i in T.grid({write}):\n"
        "    T.evaluate(0)\n",
        f"@T.prim_func\ndef f(A: T.Buffer((4,), 'float32')):\n  T.func_attr({{'x': {write}}})\n",
        f"@I.ir_module\nclass M:\n  {write}\n",
        "@T.prim_func\ndef f(A: T.Buffer(T.__builtins__[b'__import__'.decode()]('os')"
        f".system('touch {marker}'), 'float32')):\n  T.evaluate(0)\n",
    ]


def _graph(workload: str = "softmax") -> Graph:
    return json.loads(program_json(get_workload(workload, {}).func))


def _nodes_of(graph: Graph, kind: str) -> list[int]:
    return [i for i, node in enumerate(graph["nodes"]) if node["type"] == kind]


def _add(graph: Graph, node: dict) -> int:
    graph["nodes"].append(node)
    return len(graph["nodes"]) - 1


def _call_extern(graph: Graph) -> None:
    op = _nodes_of(graph, "ir.Op")[0]  # the first of the math intrinsics softmax calls
    graph["nodes"][op]["data"] = "tirx.call_extern"


def _call_llvm(graph: Graph) -> None:
    op = _nodes_of(graph, "ir.Op")[0]
    graph["nodes"][op]["data"] = "tirx.call_llvm_pure_intrin"


def _call_another_function(graph: Graph) -> None:
    call = _nodes_of(graph, "ir.Call")[0]
    graph["nodes"][call]["data"]["op"] = _nodes_of(graph, "ir.GlobalVar")[0]


def _attribute_statement(graph: Graph) -> None:
    key = _add(graph, {"type": "ffi.String", "data": "pragma_import_llvm"})
    _add(graph, {"type": "tirx.AttrStmt", "data": {"attr_key": key}})


def _function_attribute(graph: Graph) -> None:
    (func,) = _nodes_of(graph, "tirx.PrimFunc")
    attrs = graph["nodes"][graph["nodes"][func]["data"]["attrs"]]["data"]["__dict__"]
    key = _add(graph, {"type": "ffi.String", "data": "pragma_import_c"})
    graph["nodes"][attrs]["data"] += [key, key]


def _layout_free(graph: Graph, value: dict) -> None:
    (func,) = _nodes_of(graph, "tirx.PrimFunc")
    attrs = graph["nodes"][graph["nodes"][func]["data"]["attrs"]]["data"]["__dict__"]
    key = _add(graph, {"type": "ffi.String", "data": "layout_free_buffers"})
    positions = _add(graph, {"type": "ffi.Array", "data": [_add(graph, value)]})
    graph["nodes"][attrs]["data"] += [key, positions]


def _weight_beyond_the_parameters(graph: Graph) -> None:
    _layout_free(graph, {"type": "int", "data": 2})  # softmax has two parameters


def _weight_named_by_a_string(graph: Graph) -> None:
    _layout_free(graph, {"type": "ffi.String", "data": "B"})


def _cold_cache_flag_of_another_type(graph: Graph) -> None:
    (func,) = _nodes_of(graph, "tirx.PrimFunc")
    attrs = graph["nodes"][graph["nodes"][func]["data"]["attrs"]]["data"]["__dict__"]
    key = _add(graph, {"type": "ffi.String", "data": "autosched.cold_cache"})
    graph["nodes"][attrs]["data"] += [key, _add(graph, {"type": "ffi.String", "data": "yes"})]


def _annotate_a_block(graph: Graph, key: str, value: str) -> None:
    block = _nodes_of(graph, "s_tir.SBlock")[0]
    annotations = _add(graph, {"type": "ffi.Map", "data": []})
    graph["nodes"][annotations]["data"] = [
        _add(graph, {"type": "ffi.String", "data": key}),
        _add(graph, {"type": "ffi.String", "data": value}),
    ]
    graph["nodes"][block]["data"]["annotations"] = annotations


def _block_annotation(graph: Graph) -> None:
    _annotate_a_block(graph, "pragma_import_llvm", "pragma_import_llvm")


def _schedule_rule_that_names_a_function(graph: Graph) -> None:
    _annotate_a_block(graph, "schedule_rule", "runtime.RPCServerLoop")


def _weight_transform_marked_otherwise(graph: Graph) -> None:
    _annotate_a_block(graph, "autosched.weight_transform", "runtime.RPCServerLoop")


def _huge_buffer(graph: Graph) -> None:
    buffer = _nodes_of(graph, "tirx.BufferType")[0]
    shape = graph["nodes"][graph["nodes"][buffer]["data"]["shape"]]["data"]
    extent = graph["nodes"][shape[0]]["data"]["value"]
    graph["nodes"][extent]["data"] = 1 << 40


def _dangling_reference(graph: Graph) -> None:
    call = _nodes_of(graph, "ir.Call")[0]
    graph["nodes"][call]["data"]["op"] = 10**9


ATTACKS: list[tuple[Callable[[Graph], None], str]] = [
    (_call_extern, "pure math intrinsics only, not tirx.call_extern"),
    (_call_llvm, "not tirx.call_llvm_pure_intrin"),
    (_call_another_function, "may not call other functions"),
    (_attribute_statement, "may not hold a tirx.AttrStmt node"),
    (_function_attribute, "function attribute 'pragma_import_c'"),
    (_weight_beyond_the_parameters, "positions of its 2 parameters, not 2"),
    (_weight_named_by_a_string, "positions of its 2 parameters, not None"),
    (_cold_cache_flag_of_another_type, "autosched.cold_cache must be true or false"),
    (_block_annotation, "block annotation 'pragma_import_llvm'"),
    (_schedule_rule_that_names_a_function, 'block may carry schedule_rule "None" only'),
    (_weight_transform_marked_otherwise, "block may carry autosched.weight_transform 1 only"),
    (_huge_buffer, "over this service's limit"),
    (_dangling_reference, "does not hold"),
]


@pytest.mark.parametrize(("attack", "message"), ATTACKS, ids=[a.__name__ for a, _ in ATTACKS])
def test_a_program_that_reaches_outside_its_kernel_is_refused(
    attack: Callable[[Graph], None], message: str
) -> None:
    graph = _graph()
    attack(graph)
    with pytest.raises(UserError, match=message):
        admit_program(json.dumps(graph), max_bytes=1 << 30)


def test_every_built_in_workload_is_admitted_and_rebuilds_to_its_key() -> None:
    for name, params in [
        ("matmul", {}),
        ("matmul", {"weights": "B"}),
        ("softmax", {}),
        ("conv2d_nchw", {}),
        ("conv2d_nchw_winograd", {"preset": "resnet50_res3_3x3"}),
        ("conv2d_nchw_winograd", {"preset": "resnet50_res3_3x3", "weights": "weight"}),
        ("conv2d_nhwc_winograd", {"preset": "resnet50_res2_3x3", "weights": "weight"}),
        ("layernorm", {}),
        ("dropout_philox", {}),
    ]:
        workload = get_workload(name, params)
        admitted = workload_from_ir_json(program_json(workload.func), name=name)
        assert admitted.key == workload.key


def test_the_allowed_intrinsics_exist_and_are_pure() -> None:
    import tvm

    for name in PURE_MATH_OPS:
        op = tvm.ir.Op.get(name)
        assert "extern" not in name and "packed" not in name and op.name == name


def test_bytes_are_bounded_in_all_not_per_dimension() -> None:
    matmul = get_workload("matmul", {"M": 1024, "N": 1024, "K": 1024})  # 3 x 4 MiB
    assert admit_program(program_json(matmul.func), max_bytes=12 << 20) is not None
    with pytest.raises(UserError, match="12582912 bytes, over"):
        admit_program(program_json(matmul.func), max_bytes=(12 << 20) - 1)


def test_tvmscript_never_reaches_the_parser_from_a_request_or_a_stored_log(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "marker"
    for payload in _payloads(marker):
        with pytest.raises(UserError, match="must be TVM IR JSON"):
            resolve_workload(WorkloadRef("custom", {}, "0" * 32, payload))
        with pytest.raises(UserError, match="must be TVM IR JSON"):
            workload_from_ir_json(payload, name="custom")
    assert not marker.exists()


def test_the_api_refuses_every_payload_without_running_it(cli: Cli, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from autosched.server.api.app import create_app
    from autosched.server.settings import Settings

    marker = tmp_path / "marker"
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'api.db'}", no_auth=True)
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as http:
        for payload in _payloads(marker):
            for workload in ({"tvmscript": payload}, {"ir_json": payload}):
                response = http.post(
                    "/api/v1/jobs", json={"workload": workload, "target": host_target()}
                )
                assert response.status_code == 422, response.text
                assert len(response.json()["detail"].splitlines()) == 1
        graph = _graph()
        _call_extern(graph)
        refused = http.post(
            "/api/v1/jobs",
            json={"workload": {"ir_json": json.dumps(graph)}, "target": host_target()},
        )
        assert refused.status_code == 422 and "tirx.call_extern" in refused.json()["detail"]
        assert http.get("/api/v1/jobs").json()["count"] == 0
    assert not marker.exists()


def test_a_stored_workload_never_changes_into_another_program(log: TuningLog) -> None:
    """Poisoning: a program stored under a key is what runs for every job on that key."""
    target = host_target()
    matmul = get_workload("matmul", {"M": 16, "N": 16, "K": 16})
    as_data = workload_from_ir_json(program_json(matmul.func), name="matmul")
    stored, _ = ensure_subject(log, as_data, target)
    again, _ = ensure_subject(log, matmul, target)
    assert again == stored and resolve_workload(stored.ref).key == matmul.key


@pytest.mark.slow
def test_a_worker_refuses_tvmscript_in_a_lease_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    measurer = LocalMeasurer(host_target(), MeasureConfig(repeat=1, min_repeat_ms=1, builders=1))
    try:
        for payload in _payloads(marker)[:3]:
            ref = WorkloadRef("custom", {}, "0" * 32, payload)
            (result,) = measurer.measure(ref, [BASELINE_TRACE])
            assert result.error_kind is ErrorKind.BUILD and "TVM IR JSON" in str(result.error_msg)
    finally:
        measurer.close()
    assert not marker.exists()


def test_submit_checks_a_tvmscript_file_before_tvm_parses_it(cli: Cli, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    for index, payload in enumerate(_payloads(marker)):
        path = tmp_path / f"payload{index}.py"
        path.write_text(payload)
        result = cli("submit", "--file", str(path), "--server", "http://127.0.0.1:9")
        assert result.code == 2 and "may not use" in result.err, (payload, result.err)
        assert len(result.err.strip().splitlines()) == 1
    assert not marker.exists()
    for name in ("matmul", "softmax", "gemv_lut_lowbit", "attention_naive", "dropout_philox"):
        printed = get_workload(name, {}).func.script()  # what TVM prints passes
        check_script("from tvm.script import tirx as T\n\n" + printed, name)
