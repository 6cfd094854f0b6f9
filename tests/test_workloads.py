"""Built-in workloads, user TVMScript workloads, random inputs and tolerances.

Every built-in workload is compiled unscheduled for the CPU and checked against its numpy reference.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tvm

from autosched.admission import program_json
from autosched.errors import UserError
from autosched.records import WorkloadRef
from autosched.workload import (
    Workload,
    load_workload_file,
    mismatch,
    random_inputs,
    resolve_workload,
    tolerance,
    workload_from_ir_json,
    workload_from_tvmscript,
)
from autosched.workloads import (
    get_workload,
    parse_param_overrides,
    register_workload,
    workload_specs,
)

# Small parameters for each registered workload; a new workload needs an entry here.
SMALL: dict[str, dict[str, object]] = {
    "matmul": {"M": 16, "N": 24, "K": 8},
    "batch_matmul": {"B": 3, "M": 8, "N": 12, "K": 5},
    "dense_bias_relu": {"M": 5, "N": 7, "K": 9},
    "conv2d_nhwc": {"N": 2, "H": 7, "W": 6, "CI": 3, "CO": 4, "stride": 2, "padding": 1},
    "conv2d_nchw": {"N": 2, "H": 7, "W": 6, "CI": 3, "CO": 4, "stride": 2, "padding": 1},
    "conv2d_nchw_winograd": {"N": 2, "H": 7, "W": 6, "CI": 3, "CO": 4, "padding": 1},
    "conv2d_nhwc_winograd": {"N": 2, "H": 6, "W": 7, "CI": 3, "CO": 4, "padding": 0},
    "depthwise_conv2d": {"N": 2, "H": 7, "W": 6, "C": 3, "stride": 2},
    "conv1d_glu": {"N": 2, "L": 7, "C": 5},
    "softmax": {"rows": 5, "cols": 33},
    "layernorm": {"rows": 5, "cols": 33},
    "global_avg_pool": {"N": 2, "H": 5, "W": 7, "C": 3},
    "attention_luong": {"B": 2, "T": 3, "S": 5, "D": 7},
    "attention_bahdanau": {"B": 2, "T": 3, "S": 5, "D": 7, "A": 4},
    "attention_naive": {"B": 2, "L": 8, "D": 5},
    "attention_chunked": {"B": 2, "L": 8, "D": 5, "chunk": 4},
    "matmul_int4_weight": {"M": 3, "N": 5, "K": 16, "group": 8},
    "matmul_int8": {"M": 3, "N": 32, "K": 8, "layout": "vnni"},
    "gemv_lut_lowbit": {"N": 5, "K": 16},
    "mxfp8_quantize": {"rows": 3, "cols": 64},
    "dropout_philox": {"rows": 5, "cols": 7, "drop_percent": 30},
    "blur3x3": {"H": 9, "W": 7},
    "unsharp_mask": {"H": 12, "W": 9},
    "harris_corner": {"H": 9, "W": 10},
    "ragged_batch_matmul": {"lengths": "3,1,5", "K": 4, "N": 6},
}

SPECS = {spec.name: spec for spec in workload_specs()}


def run_unscheduled(workload: Workload, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The workload's outputs on ``inputs``, compiled with TVM's default lowering for the CPU."""
    module = tvm.compile(workload.mod, target={"kind": "llvm"}).jit()
    assert workload.num_outputs is not None
    outputs = [np.zeros(shape, dtype) for shape, dtype in workload.args[-workload.num_outputs :]]
    tensors = [tvm.runtime.tensor(array, tvm.cpu()) for array in [*inputs, *outputs]]
    module["main"](*tensors)
    return [tensor.numpy() for tensor in tensors[len(inputs) :]]


def assert_matches_reference(workload: Workload, inputs: list[np.ndarray]) -> None:
    expected = workload.reference(inputs)
    actual = run_unscheduled(workload, inputs)
    assert len(actual) == len(expected) == workload.num_outputs
    for got, want in zip(actual, expected, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.isfinite(want).all()
        rtol, atol = tolerance(str(got.dtype))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def test_registry_lists_every_workload_sorted_and_each_has_small_params() -> None:
    names = [spec.name for spec in workload_specs()]
    assert names == sorted(names)
    assert {"matmul", "batch_matmul", "conv2d_nhwc", "softmax", "attention_chunked"} <= set(names)
    assert set(names) == set(SMALL), "add small parameters for new workloads to SMALL"


@pytest.mark.parametrize("name", sorted(SMALL))
def test_workload_builds_with_all_params_resolved(name: str) -> None:
    spec = SPECS[name]
    workload = get_workload(name, SMALL[name])
    assert workload.name == name
    assert workload.params == {p.name: SMALL[name].get(p.name, p.default) for p in spec.params}
    assert workload.func.attrs["global_symbol"] == "main"
    assert bool(workload.func.attrs["tirx.noalias"])
    assert [gv.name_hint for gv, _ in workload.mod.functions_items()] == ["main"]
    assert workload.flops is not None and workload.flops > 0
    assert workload.num_outputs in (1, 2)
    assert workload.source is None
    assert workload.min_bytes == sum(
        np.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in workload.args
    )
    assert re.fullmatch(r"[0-9a-f]{32}", workload.key)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_key_is_stable_and_changes_with_every_parameter(name: str) -> None:
    base = get_workload(name, SMALL[name])
    assert get_workload(name, SMALL[name]).key == base.key
    assert get_workload(name, {k: str(v) for k, v in SMALL[name].items()}).key == base.key
    for param in SPECS[name].params:
        value = base.params[param.name]
        if param.choices:
            others: list[object] = [next(c for c in param.choices if c != value)]
        elif isinstance(value, str):  # ragged lengths
            others = [value + ",2"]
        else:
            assert isinstance(value, int)
            others = [value + 1, value + 2, 2 * value]  # some must stay odd or divide others
        for other in others:
            try:
                changed = get_workload(name, {**SMALL[name], param.name: other})
            except UserError:
                continue
            assert changed.key != base.key, f"{param.name}={other} gives the same key"
            break
        else:
            raise AssertionError(f"no other valid value of {param.name} among {others}")


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("matmul", {"M": 16, "N": 24, "K": 8}),
        ("matmul", {"M": 9, "N": 7, "K": 300, "dtype": "float16"}),
        ("matmul", {"M": 4, "N": 5, "K": 6, "dtype": "float64"}),
        ("batch_matmul", {"B": 3, "M": 8, "N": 12, "K": 5}),
        ("conv2d_nhwc", SMALL["conv2d_nhwc"]),
        ("conv2d_nhwc", {"H": 5, "W": 5, "CI": 4, "CO": 2, "KH": 1, "KW": 3, "padding": 0}),
        ("conv2d_nhwc", {"H": 6, "W": 6, "CI": 8, "CO": 3, "stride": 2, "dtype": "float16"}),
        ("softmax", {"rows": 5, "cols": 33, "dtype": "float16"}),
        ("global_avg_pool", {"H": 6, "W": 5, "C": 19}),
        ("global_avg_pool", {"H": 7, "W": 7, "C": 8, "dtype": "float16"}),
    ],
)
def test_compiled_definition_matches_numpy_reference(name: str, params: dict[str, object]) -> None:
    workload = get_workload(name, params)
    inputs = random_inputs(workload, seed=1)[: -workload.num_outputs]
    assert_matches_reference(workload, inputs)


def test_softmax_is_stable_for_large_values() -> None:
    workload = get_workload("softmax", {"rows": 4, "cols": 50})
    (x,) = random_inputs(workload, seed=2)[:1]
    x = (x * 1000 + 2000).astype("float32")  # exp(2000) overflows: only max-subtraction survives
    assert_matches_reference(workload, [x])
    (probabilities,) = workload.reference([x])
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


def test_conv2d_reference_counts_only_real_pixels_under_the_kernel() -> None:
    workload = get_workload(
        "conv2d_nhwc", {"H": 4, "W": 4, "CI": 2, "CO": 1, "stride": 1, "padding": 1}
    )
    ones = [np.ones((1, 4, 4, 2), "float32"), np.ones((3, 3, 2, 1), "float32")]
    (out,) = workload.reference(ones)
    assert out.shape == (1, 4, 4, 1)
    corner, edge, inside = out[0, 0, 0, 0], out[0, 0, 1, 0], out[0, 1, 1, 0]
    assert (corner, edge, inside) == (8, 12, 18)
    assert_matches_reference(workload, ones)


def test_flop_counts() -> None:
    assert get_workload("matmul", {"M": 3, "N": 5, "K": 7}).flops == 2 * 3 * 5 * 7
    assert get_workload("batch_matmul", {"B": 2, "M": 3, "N": 5, "K": 7}).flops == 2 * 2 * 3 * 5 * 7
    conv = get_workload("conv2d_nhwc", SMALL["conv2d_nhwc"])  # 7x6 input, stride 2: 4x3 output
    assert conv.args[-1][0] == (2, 4, 3, 4)
    assert conv.flops == 2 * 2 * 4 * 3 * 4 * 3 * 3 * 3
    assert get_workload("softmax", {"rows": 5, "cols": 33}).flops == 5 * 5 * 33
    pool = get_workload("global_avg_pool", {"N": 2, "H": 5, "W": 7, "C": 3})
    assert pool.args[-1][0] == (2, 3)
    assert pool.flops == 2 * 5 * 7 * 3 + 2 * 3


def test_defaults_fill_unspecified_params() -> None:
    workload = get_workload("matmul")
    assert workload.params == {"M": 512, "N": 512, "K": 512, "dtype": "float32"}
    assert workload.args == [((512, 512), "float32")] * 3


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("matmull", {}, r"unknown workload 'matmull'; known workloads: .*matmul"),
        ("matmul", {"Q": "3"}, r"unknown parameter Q for matmul; allowed: M, N, K, dtype"),
        ("matmul", {"M": "abc"}, r"parameter M of matmul must be an integer, got 'abc'"),
        ("matmul", {"M": 2.5}, r"parameter M of matmul must be an integer"),
        ("matmul", {"M": True}, r"parameter M of matmul must be an integer"),
        ("matmul", {"M": "0"}, r"parameter M of matmul must be at least 1, got 0"),
        ("matmul", {"K": 1 << 17}, r"parameter K of matmul must be at most 65536"),
        ("matmul", {"dtype": "int8"}, r"dtype of matmul must be one of float32, float64, float16"),
        ("matmul", {"dtype": 32}, r"dtype of matmul must be a string"),
        ("conv2d_nhwc", {"padding": "-1"}, r"padding of conv2d_nhwc must be at least 0"),
        ("conv2d_nhwc", {"H": 2, "KH": 5, "padding": 1}, r"5x3 kernel does not fit the 2x56 input"),
        ("conv2d_nchw_winograd", {"H": 1, "padding": 0}, r"winograd: a 3x3 kernel does not fit"),
        ("matmul", {"M": 65536, "K": 65536}, r"buffer of shape \(65536, 65536\), over 2147483647"),
        ("matmul", {"weights": "C"}, r"weights of matmul names inputs among A, B; got 'C'"),
        ("matmul", {"weights": " , "}, r"weights of matmul names inputs among A, B"),
    ],
)
def test_bad_workload_requests_are_user_errors(
    name: str, params: dict[str, object], message: str
) -> None:
    with pytest.raises(UserError, match=message):
        get_workload(name, params)


def test_a_name_is_registered_once() -> None:
    with pytest.raises(ValueError, match="'matmul' is registered twice"):
        register_workload("matmul", "again")(SPECS["matmul"].build)
    assert workload_specs() == list(SPECS.values())


def test_parse_param_overrides() -> None:
    assert parse_param_overrides(["M=64", "dtype = float16", "K="]) == {
        "M": "64",
        "dtype": "float16",
        "K": "",
    }
    assert parse_param_overrides([]) == {}
    with pytest.raises(UserError, match="'M64' is not of the form KEY=VALUE"):
        parse_param_overrides(["M64"])
    with pytest.raises(UserError, match="'=5' is not of the form KEY=VALUE"):
        parse_param_overrides(["=5"])
    with pytest.raises(UserError, match="parameter M is given twice"):
        parse_param_overrides(["M=1", "M=2"])


@pytest.mark.parametrize("name", sorted(SMALL))
def test_tvmscript_round_trip_keeps_the_key(name: str) -> None:
    workload = get_workload(name, SMALL[name])
    parsed = workload_from_tvmscript(workload.tvmscript, name="again")
    assert parsed.key == workload.key
    assert parsed.args == workload.args
    assert (parsed.name, parsed.params, parsed.source) == ("again", {}, program_json(parsed.func))
    assert workload_from_ir_json(parsed.source, name="again").key == workload.key  # data only
    assert (parsed.flops, parsed.num_outputs, parsed.reference) == (None, None, None)


def test_tvmscript_file_with_imports_and_any_function_name(tmp_path: Path) -> None:
    workload = get_workload("matmul", SMALL["matmul"])
    text = (
        "from tvm.script import tirx as T\n\n\n"
        + workload.func.script().replace("def main(", "def my_matmul(")
        + "\n"
    )
    path = tmp_path / "mine.py"
    path.write_text(text)
    loaded = load_workload_file(str(path))
    assert (loaded.name, loaded.key) == ("mine", workload.key)
    assert loaded.source == program_json(loaded.func)  # it travels as data, not as the file
    as_json = tmp_path / "mine.json"
    as_json.write_text(loaded.source)
    assert load_workload_file(str(as_json)).key == workload.key
    with pytest.raises(UserError, match=r"cannot read workload file .*missing\.py"):
        load_workload_file(str(tmp_path / "missing.py"))
    (tmp_path / "binary.py").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UserError, match=r"binary\.py is not UTF-8 text"):
        load_workload_file(str(tmp_path / "binary.py"))


_ONE_FUNC = """
@T.prim_func
def {name}(A: T.Buffer((4,), "float32")):
    A[0] = T.float32(1)
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("def f(:\n", r"^x: line 1: "),
        (
            "N = 3\n",
            r"^x: expected exactly one @T.prim_func or @I.ir_module definition, found none",
        ),
        (_ONE_FUNC.format(name="f") + _ONE_FUNC.format(name="g"), r"found f, g$"),
        (
            "@I.ir_module\nclass Mod:\n"
            + _ONE_FUNC.format(name="f").replace("\n", "\n    ")
            + _ONE_FUNC.format(name="g").replace("\n", "\n    "),
            r"module must hold exactly one function, a PrimFunc; it holds 2",
        ),
        (_ONE_FUNC.format(name="f").replace("T.float32(1)", "oops"), r"line 4: .*oops"),
        (
            "@T.prim_func\ndef f(a: T.handle, n: T.int32):\n"
            '    A = T.match_buffer(a, (n,), "float32")\n    A[0] = T.float32(1)\n',
            r"every argument must be a buffer of constant shape",
        ),
    ],
)
def test_bad_tvmscript_is_a_one_line_user_error(text: str, message: str) -> None:
    with pytest.raises(UserError, match=message) as caught:
        workload_from_tvmscript(text, name="x")
    assert "\n" not in str(caught.value)


def test_random_inputs_are_seeded_bounded_and_leave_outputs_zero() -> None:
    workload = get_workload("matmul", {"M": 40, "N": 30, "K": 20, "dtype": "float16"})
    first = random_inputs(workload, seed=7)
    assert [(a.shape, str(a.dtype)) for a in first] == workload.args
    assert all(np.array_equal(a, b) for a, b in zip(first, random_inputs(workload, 7), strict=True))
    assert not np.array_equal(first[0], random_inputs(workload, seed=8)[0])
    assert all(a.min() >= -1 and a.max() < 1 and a.std() > 0.3 for a in first[:2])
    assert not first[2].any()


def test_random_inputs_of_user_workload_fill_every_argument_by_dtype() -> None:
    text = (
        "@T.prim_func\n"
        'def f(a: T.Buffer((64,), "int32"), b: T.Buffer((64,), "uint8"), '
        'c: T.Buffer((64,), "bool"), d: T.Buffer((64,), "float64")):\n'
        "    d[0] = T.float64(0)\n"
    )
    a, b, c, d = random_inputs(workload_from_tvmscript(text), seed=0)
    assert (a.dtype, b.dtype, c.dtype, d.dtype) == (np.int32, np.uint8, np.bool_, np.float64)
    assert -4 <= a.min() < 0 < a.max() <= 4
    assert b.any() and b.max() <= 4
    assert c.any() and not c.all()
    assert d.any(), "with outputs unknown, every argument is random"


def test_tolerances_loosen_with_precision_and_integers_are_exact() -> None:
    for tighter, looser in [("float64", "float32"), ("float32", "float16")]:
        assert all(t < lo for t, lo in zip(tolerance(tighter), tolerance(looser), strict=True))
    assert tolerance("float32") == (1e-3, 1e-3)
    assert tolerance("int32") == tolerance("bool") == (0.0, 0.0)
    with pytest.raises(UserError, match="bfloat16"):
        tolerance("bfloat16")


def test_resolve_workload_rebuilds_and_checks_the_key() -> None:
    builtin = get_workload("softmax", SMALL["softmax"])
    ref = WorkloadRef(builtin.name, builtin.params, builtin.key)
    assert resolve_workload(ref).key == builtin.key
    user = workload_from_tvmscript(builtin.tvmscript, name="mine")
    assert resolve_workload(WorkloadRef("mine", {}, user.key, user.source)).key == user.key
    with pytest.raises(UserError, match=f"rebuilds with key .*, not {'0' * 32}"):
        resolve_workload(WorkloadRef(builtin.name, builtin.params, "0" * 32))


def test_weights_are_layout_free_buffers_of_a_workload_of_their_own() -> None:
    plain = get_workload("dense_bias_relu", {"M": 8, "N": 16, "K": 32})
    packed = get_workload("dense_bias_relu", {"M": 8, "N": 16, "K": 32, "weights": "bias, W"})
    assert [int(i) for i in packed.func.attrs["layout_free_buffers"]] == [1, 2]
    assert packed.params == {**plain.params, "weights": "W,bias"}
    assert packed.key != plain.key and packed.args == plain.args
    assert resolve_workload(packed.ref).key == packed.key  # a measuring process rebuilds it
    assert "layout_free_buffers" not in plain.func.attrs


def test_mismatch_allows_reduction_rounding_but_not_wrong_values() -> None:
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (8, 4096)).astype(np.float32)
    b = rng.uniform(-1, 1, (4096, 8)).astype(np.float32)
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    sequential = np.zeros((8, 8), dtype=np.float32)
    for k in range(4096):  # a float32 loop, as an unscheduled kernel sums
        sequential += np.outer(a[:, k], b[k, :])
    assert mismatch(sequential, exact) is None
    assert "differs" in (mismatch(np.zeros_like(exact), exact) or "")
    assert "differs" in (mismatch(exact + 0.01 * np.abs(exact).max(), exact) or "")
    assert "shape" in (mismatch(exact[:4], exact) or "")
    assert mismatch(np.array([1, 2], np.int32), np.array([1, 3], np.int32)) is not None
