"""Programs from outside run nothing but the tuned kernel: TVMScript is refused wherever it comes
from, and IR JSON is admitted only when it holds a TIR function of pure math within the limits,
whose buffer accesses are proven within their buffers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import tvm
from helpers import Cli, free_port, served
from tvm.script import tirx as T

from autosched.admission import NODE_TYPES, PURE_MATH_OPS, admit_program, program_json
from autosched.bounds import _INLINE_FIELDS, _LEAVES, MAX_DEPTH, MAX_EXPANDED_NODES, MAX_NODES
from autosched.errors import UserError
from autosched.log import TuningLog
from autosched.log.subjects import ensure_subject
from autosched.measure import LocalMeasurer, MeasureConfig
from autosched.records import BASELINE_TRACE, ErrorKind, WorkloadRef
from autosched.script_check import check_script
from autosched.target import host_target
from autosched.workload import resolve_workload, workload_from_ir_json
from autosched.workloads import get_workload, workload_specs

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
        f"@T.prim_func\ndef f(A: T.Buffer((4,), 'float32')):\n"
        f"  for i in T.grid(T.entry.inspect.os.system('touch {marker}')):\n    T.evaluate(0)\n",
        "@T.prim_func\ndef f(A: T.Buffer((4,), 'float32')):\n"
        f"  T.evaluate(T.call_extern('int32', 'system', 'touch {marker}'))\n",
        "@T.prim_func\ndef f(A: T.Buffer((4,), 'float32')):\n"
        f"  T.evaluate(T.call_intrin('int32', 'tirx.call_extern', 'system', 'touch {marker}'))\n",
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


def _annotate(graph: Graph, kind: str, field: str, key: str, value: str) -> None:
    """Give the first node of ``kind`` the attribute ``key`` (a string) in its ``field``."""
    node = _nodes_of(graph, kind)[0]
    annotations = _add(graph, {"type": "ffi.Map", "data": []})
    graph["nodes"][annotations]["data"] = [
        _add(graph, {"type": "ffi.String", "data": key}),
        _add(graph, {"type": "ffi.String", "data": value}),
    ]
    graph["nodes"][node]["data"][field] = annotations


def _annotate_a_block(graph: Graph, key: str, value: str) -> None:
    _annotate(graph, "s_tir.SBlock", "annotations", key, value)


def _block_annotation(graph: Graph) -> None:
    _annotate_a_block(graph, "pragma_import_llvm", "pragma_import_llvm")


def _schedule_rule_that_names_a_function(graph: Graph) -> None:
    _annotate_a_block(graph, "schedule_rule", "runtime.RPCServerLoop")


def _weight_transform_marked_otherwise(graph: Graph) -> None:
    _annotate_a_block(graph, "autosched.weight_transform", "runtime.RPCServerLoop")


LLVM_IR_RUN_AT_LOAD = (
    'module asm ".pushsection .init_array,\\22aw\\22"\n'
    'module asm ".quad payload"\n'
    'module asm ".popsection"\n'
    "define void @payload() {\n  call i32 @system(ptr null)\n  ret void\n}\n"
    "declare i32 @system(ptr)\n"
)
"""LLVM IR whose function runs as the module holding it is loaded (``.init_array``)."""


def _loop_annotation(graph: Graph) -> None:
    _annotate(graph, "tirx.For", "annotations", "pragma_import_llvm", LLVM_IR_RUN_AT_LOAD)


def _call_attribute(graph: Graph) -> None:
    call = _nodes_of(graph, "ir.Call")[0]
    _annotate(graph, "ir.Call", "attrs", "pragma_import_c", "int main;")
    attrs = graph["nodes"][call]["data"]["attrs"]
    graph["nodes"][call]["data"]["attrs"] = _add(
        graph, {"type": "ir.DictAttrs", "data": {"__dict__": attrs}}
    )


def _module_attribute(graph: Graph) -> None:
    _annotate(graph, "ir.IRModule", "global_infos", "system_lib_prefix", "payload")


def _map_in_a_list(graph: Graph) -> None:
    params = graph["nodes"][_nodes_of(graph, "tirx.PrimFunc")[0]]["data"]["params"]
    graph["nodes"][params]["data"].append(_add(graph, {"type": "ffi.Map", "data": []}))


def _buffer_offset_before_its_memory(graph: Graph) -> None:
    buffer = graph["nodes"][_nodes_of(graph, "tirx.BufferType")[0]]["data"]
    offset = graph["nodes"][buffer["elem_offset"]]["data"]
    offset["value"] = _add(graph, {"type": "int", "data": -4096})


def _buffer_strided_past_its_memory(graph: Graph) -> None:
    buffer = graph["nodes"][_nodes_of(graph, "tirx.BufferType")[0]]["data"]
    buffer["strides"] = _add(graph, {"type": "ffi.Array", "data": [buffer["elem_offset"]]})


def _buffer_declared_over_another(graph: Graph) -> None:
    _add(graph, {"type": "tirx.DeclBuffer", "data": {}})


def _expression_chain(graph: Graph, levels: int, *, doubling: bool) -> None:
    """Replace the value softmax stores first with ``levels`` additions, each of the one before
    and the value (or, ``doubling``, of the one before to itself)."""
    store = graph["nodes"][_nodes_of(graph, "tirx.BufferStore")[0]]["data"]
    value = store["value"]
    chain = value
    for _ in range(levels):
        operand = chain if doubling else value
        data = {"span": 0, "ty": graph["nodes"][value]["data"]["ty"], "a": chain, "b": operand}
        chain = _add(graph, {"type": "prim.Add", "data": data})
    store["value"] = chain


def _nested_2000_deep(graph: Graph) -> None:
    _expression_chain(graph, 2000, doubling=False)


def _doubled_48_times(graph: Graph) -> None:
    _expression_chain(graph, 48, doubling=True)


def _in_a_cycle(graph: Graph) -> None:
    add = _nodes_of(graph, "prim.Add")[0]
    graph["nodes"][add]["data"]["a"] = add


def _too_many_nodes(graph: Graph) -> None:
    graph["nodes"] += [{"type": "None"}] * MAX_NODES


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
    (_loop_annotation, "loop annotation 'pragma_import_llvm'"),
    (_call_attribute, "call attribute 'pragma_import_c'"),
    (_module_attribute, "module global info 'system_lib_prefix'"),
    (_map_in_a_list, "ffi.Array may not hold a map"),
    (_buffer_offset_before_its_memory, "may not have strides, an offset"),
    (_buffer_strided_past_its_memory, "may not have strides, an offset"),
    (_buffer_declared_over_another, "may not hold a tirx.DeclBuffer node"),
    (_huge_buffer, "over this service's limit"),
    (_dangling_reference, "does not hold"),
    (_nested_2000_deep, f"nests over the limit of {MAX_DEPTH} levels"),
    (_doubled_48_times, f"grows to over {MAX_EXPANDED_NODES} nodes"),
    (_in_a_cycle, "refers to itself in a cycle"),
    (_too_many_nodes, f"over the limit of {MAX_NODES}"),
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
    at_defaults = [(spec.name, {}) for spec in workload_specs()]
    for name, params in [
        *at_defaults,
        ("matmul", {"weights": "B"}),
        ("conv2d_nchw_winograd", {"preset": "resnet50_res3_3x3"}),
        ("conv2d_nchw_winograd", {"preset": "resnet50_res3_3x3", "weights": "weight"}),
        ("conv2d_nhwc_winograd", {"preset": "resnet50_res2_3x3", "weights": "weight"}),
    ]:
        workload = get_workload(name, params)
        admitted = workload_from_ir_json(program_json(workload.func), name=name)
        assert admitted.key == workload.key


@pytest.mark.slow
def test_every_kernel_of_the_bert_layer_is_admitted(tmp_path: Path) -> None:
    from autosched.bench.model_zoo import MODELS, torch
    from autosched.model.load import load_model
    from autosched.model.tasks import extract_tasks

    module, example = MODELS["bert_layer"].instantiate()
    path = tmp_path / "bert_layer.pt2"
    torch.export.save(torch.export.export(module, example), str(path))
    tasks = extract_tasks(load_model(path), host_target())
    assert tasks and [(task.name, task.problem) for task in tasks if task.workload is None] == []


@T.prim_func(s_tir=True)
def _read_before_the_buffer(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.sblock("copy"):
            v = T.axis.spatial(16, i)
            B[v] = A[v - 4096]


@T.prim_func(s_tir=True)
def _write_past_the_buffer(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.sblock("copy"):
            v = T.axis.spatial(16, i)
            B[v + 1] = A[v]


@T.prim_func(s_tir=True)
def _pad_by_select(A: T.Buffer((16,), "float32"), B: T.Buffer((18,), "float32")):
    for i in range(18):
        with T.sblock("pad"):
            v = T.axis.spatial(18, i)
            B[v] = T.Select(v >= 1 and v < 17, A[v - 1], T.float32(0))


@T.prim_func(s_tir=True)
def _region_past_the_buffer(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.sblock("copy"):
            v = T.axis.spatial(16, i)
            T.reads(A[v + 100])
            T.writes(B[v])
            B[v] = A[v]


@T.prim_func(s_tir=True)
def _iterator_past_its_domain(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(64):
        with T.sblock("copy"):
            v = T.axis.spatial(16, i)
            B[v] = A[v]


@T.prim_func(s_tir=True)
def _pad_by_if_then_else(A: T.Buffer((16,), "float32"), B: T.Buffer((18,), "float32")):
    for i in range(18):
        with T.sblock("pad"):
            v = T.axis.spatial(18, i)
            B[v] = T.if_then_else(v >= 1 and v < 17, A[v - 1], T.float32(0))


@T.prim_func(s_tir=True)
def _pad_by_if(A: T.Buffer((16,), "float32"), B: T.Buffer((18,), "float32")):
    for i in range(18):
        if i >= 1 and i < 17:
            B[i] = A[i - 1]
        else:
            B[i] = T.float32(0)


@pytest.mark.parametrize(
    ("program", "message"),
    [
        (_read_before_the_buffer, r"access A\[v - 4096\] is not proven within buffer A"),
        (_write_past_the_buffer, r"access B\[v \+ 1\] is not proven within buffer B"),
        (_pad_by_select, r"access A\[v - 1\] is not proven"),  # Select reads both values
        (_region_past_the_buffer, "block copy of a program has a region of buffer A that is not"),
        (_iterator_past_its_domain, "iterator v of block copy is not proven within its domain"),
    ],
    ids=["read_before", "write_past", "pad_by_select", "region_past", "iterator_past"],
)
def test_a_program_that_reaches_outside_its_buffers_is_refused_naming_the_buffer(
    program: tvm.tirx.PrimFunc, message: str
) -> None:
    with pytest.raises(UserError, match=message) as refused:
        admit_program(program_json(program))
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("program", [_pad_by_if_then_else, _pad_by_if])
def test_an_access_its_guard_keeps_within_the_buffer_is_admitted(
    program: tvm.tirx.PrimFunc,
) -> None:
    assert admit_program(program_json(program)) is not None


def test_the_graph_reads_in_place_the_fields_tvm_writes_in_place() -> None:
    """Which fields of a node hold data, not references, as TVM's reflection says; the objects
    read as leaves TVM reads from their data alone."""
    from tvm_ffi import core

    in_place = {0, 1, 2, 3, 5}  # None, int, bool, float, dtype: written in the node itself
    plain = {"None", "bool", "int", "float", "ffi.String", "ffi.Shape", "ffi.Array", "ffi.Map"}
    for kind in NODE_TYPES - plain:
        info = core._lookup_or_register_type_info_from_type_key(kind)
        if kind in _LEAVES:
            assert core._lookup_type_attr(info.type_index, "__data_from_json__") is not None
            continue
        fields = set()
        while info is not None:
            fields |= {f.name for f in info.fields if f.field_static_type_index in in_place}
            info = info.parent_type_info
        assert fields == set(_INLINE_FIELDS.get(kind, ())), kind


def test_a_program_nested_to_the_depth_limit_is_admitted_and_printed() -> None:
    """The depth limit leaves TVM room: the deepest program admitted loads, is proven and is
    printed for its key."""
    for levels in range(MAX_DEPTH, 0, -1):
        graph = _graph()
        _expression_chain(graph, levels, doubling=False)
        try:
            workload = workload_from_ir_json(json.dumps(graph), name="deep")
            break
        except UserError as refused:
            assert "nests over the limit" in str(refused)
    assert levels > MAX_DEPTH - 64 and workload.key


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


def test_the_api_refuses_a_loop_annotation_and_a_read_outside_a_buffer(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from autosched.server.api.app import create_app
    from autosched.server.settings import Settings

    annotated = _graph()
    _loop_annotation(annotated)
    attacks = {
        json.dumps(annotated): "loop annotation 'pragma_import_llvm'",
        program_json(_read_before_the_buffer): "not proven within buffer A",
    }
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'api.db'}", no_auth=True)
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as http:
        for program, message in attacks.items():
            refused = http.post(
                "/api/v1/jobs", json={"workload": {"ir_json": program}, "target": host_target()}
            )
            assert refused.status_code == 422 and message in refused.json()["detail"]
            assert len(refused.json()["detail"].splitlines()) == 1
        assert http.get("/api/v1/jobs").json()["count"] == 0


@pytest.mark.slow
def test_a_served_api_outlives_programs_built_to_exhaust_it(tmp_path: Path) -> None:
    """An expression 2,000 deep once overflowed TVM's stack as it read the program, killing the
    server; 48 doublings grew it by gigabytes as it printed the program for its key."""
    deep, doubled = _graph(), _graph()
    _nested_2000_deep(deep)
    _doubled_48_times(doubled)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with served(tmp_path, port):
        for graph, message in [(deep, "nests over the limit"), (doubled, "grows to over")]:
            body = {"workload": {"ir_json": json.dumps(graph)}, "target": host_target()}
            refused = httpx.post(f"{url}/api/v1/jobs", json=body, timeout=60)
            assert refused.status_code == 422 and message in refused.json()["detail"]
        assert httpx.get(f"{url}/healthz", timeout=5).json() == {"status": "ok"}


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


def test_a_relax_model_file_may_not_call_outside_its_program(tmp_path: Path) -> None:
    model = (
        "@I.ir_module\nclass M:\n  @R.function\n  def main(x: R.Tensor((4,), 'float32')):\n"
        "    y = R.call_packed('system', x, sinfo_args=R.Tensor((4,), 'float32'))\n"
        "    return y\n"
    )
    with pytest.raises(UserError, match=r"R\.call_packed \(not a TVMScript name\)"):
        check_script(model, "m", roots=frozenset({"T", "I", "R"}), purpose="a Relax model file")


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
