"""Model files in: ONNX, PyTorch .pt2 and Relax TVMScript imported with static shapes, split
into tasks that the admission accepts; and every bad input one line, exit code 2, nothing in the
log."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tvm
from helpers import Cli
from model_files import (
    RELAX_MODEL,
    write_conv_block_pt2,
    write_cubing_gelu_onnx,
    write_excited_conv_pt2,
    write_gelu_softmax_pt2,
    write_mlp_onnx,
    write_onnx_with,
    write_token_block_pt2,
)

from autosched.errors import UserError
from autosched.log import TuningLog
from autosched.model.compile import (
    TaskSchedule,
    check_outputs,
    compile_model,
    compile_untuned,
    fill_database,
    scheduled_module,
)
from autosched.model.load import Model, load_model, parse_input_specs
from autosched.model.prepare import matmuls_in_their_batches
from autosched.model.tasks import extract_tasks
from autosched.records import RecordView
from autosched.schedule import trace_to_json
from autosched.search.space import design_space
from autosched.target import parse_target

ANNOTATED_RELAX_MODEL = """\
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T


@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def double(
        a: T.Buffer((T.int64(8), T.int64(8)), "float32"),
        b: T.Buffer((T.int64(8), T.int64(8)), "float32"),
    ):
        for i, j in T.grid(T.int64(8), T.int64(8)):
            with T.sblock("double"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.sblock_attr({"hint": 1})
                b[vi, vj] = a[vi, vj] * T.float32(2)

    @R.function
    def main(x: R.Tensor((8, 8), "float32")) -> R.Tensor((8, 8), "float32"):
        cls = Module
        with R.dataflow():
            y = R.call_tir(cls.double, (x,), out_ty=R.Tensor((8, 8), "float32"))
            z = R.nn.relu(y)
            R.output(z)
        return z
"""


def test_an_mlp_splits_into_admitted_tasks_with_weights(tmp_path: Path) -> None:
    model = load_model(write_mlp_onnx(tmp_path / "mlp.onnx", batch="batch"), ["x=16x64:float32"])
    assert [(spec.name, spec.shape, spec.dtype) for spec in model.inputs] == [
        ("x", (16, 64), "float32")
    ]
    tasks = extract_tasks(model, parse_target(None))
    assert len(tasks) >= 2
    assert all(task.workload is not None and task.weight == 1 for task in tasks)
    assert len({task.key for task in tasks}) == len(tasks)
    assert any("relu" in task.name for task in tasks)
    # timed as they run in the model: weights and other inputs cold, not left in cache
    assert all(task.workload.timed_cold for task in tasks)


def test_a_models_weights_are_packed_once_as_it_is_built(tmp_path: Path) -> None:
    from tvm.s_tir.meta_schedule.database import MemoryDatabase

    target = parse_target(None)
    model = load_model(write_mlp_onnx(tmp_path / "mlp.onnx"))
    tasks = extract_tasks(model, target)
    (first,) = [task for task in tasks if "relu" in task.name]  # x @ W1 + b1, then relu
    assert first.workload is not None
    assert [int(i) for i in first.workload.func.attrs["layout_free_buffers"]] == [1, 2]
    # a schedule of the first layer that stores W1 in a layout of its own
    space = design_space(first.workload, target, seed=0)
    packing = None
    for index in range(8):
        sch = space.sample(lambda _name, choices, index=index: choices[index % len(choices)])
        if sch is not None and "layout_rewrite_preproc" in sch.mod.script():
            packing = trace_to_json(sch.trace)
            break
    assert packing is not None, "no sampled schedule stores the weight in a layout of its own"
    record = RecordView(1, packing, "", 1e-5, (1e-5,), None, None, True, None, None)
    schedules = [TaskSchedule(first, record)]
    database = MemoryDatabase()
    assert fill_database(database, schedules, target) == 1
    scheduled = scheduled_module(model, database, target)
    # the layer takes W1 packed, a constant: the packing ran as the model was built, and is gone
    assert "_prepacked" in scheduled["main"].script()
    assert not [gv for gv in scheduled.get_global_vars() if "weight_prepack" in gv.name_hint]
    check = check_outputs(model, compile_model(model, schedules, target), target)
    assert check.reference == "ONNX Runtime" and check.max_abs_error < 1e-4


def test_the_same_layer_in_two_models_is_the_same_task(tmp_path: Path) -> None:
    target = parse_target(None)
    first = extract_tasks(load_model(write_mlp_onnx(tmp_path / "a.onnx", seed=1)), target)
    second = extract_tasks(
        load_model(write_mlp_onnx(tmp_path / "b.onnx", outputs=32, seed=2)), target
    )
    shared = {task.key for task in first} & {task.key for task in second}
    assert len(shared) == 1  # the first layer; the second differs in its output width


def _assert_untuned_matches_pytorch(model: Model, target: dict) -> None:
    """The model compiled with TVM's default schedules computes what PyTorch does."""
    check = check_outputs(model, compile_untuned(model, target), target)
    assert check.reference == "PyTorch eager" and check.max_abs_error < 1e-5


def test_a_batch_norm_fuses_into_the_convolution_before_it(tmp_path: Path) -> None:
    model = load_model(write_conv_block_pt2(tmp_path / "conv.pt2"))
    names = sorted(task.name for task in extract_tasks(model, parse_target(None)))
    # conv, batch norm and relu; max pooling; the input made NHWC and the output NCHW again
    assert len(names) == 4 and sum("transpose" in name for name in names) == 2, names
    (conv,) = [name for name in names if "conv2d" in name]
    assert "relu" in conv and any(name.startswith("max_pool2d") for name in names)
    assert not any("batch_norm" in name for name in names)


def test_convolutions_run_channels_last_with_their_relu6_fused(tmp_path: Path) -> None:
    target = parse_target(None)
    model = load_model(write_conv_block_pt2(tmp_path / "conv.pt2", relu6=True))
    tasks = extract_tasks(model, target)
    (conv,) = [task for task in tasks if "conv2d" in task.name]
    assert "maximum" in conv.name and "minimum" in conv.name  # the ReLU6 as its epilogue
    assert not any("clip" in task.name for task in tasks)
    assert conv.workload is not None
    data, kernel = (tuple(int(d) for d in p.shape) for p in conv.workload.func.params[:2])
    assert (data, kernel) == ((1, 32, 32, 3), (3, 3, 3, 8))  # NHWC, HWIO
    _assert_untuned_matches_pytorch(model, target)


def test_gelus_and_softmaxes_take_the_fast_approximations_and_match_pytorch(
    tmp_path: Path,
) -> None:
    target = parse_target(None)
    model = load_model(write_gelu_softmax_pt2(tmp_path / "gelu.pt2"))
    tasks = extract_tasks(model, target)
    names = " ".join(task.name for task in tasks)
    # libm's scalar erff, tanhf and expf are gone: each GELU and the softmax take TVM's fast forms
    assert "fast_erf" in names and "fast_tanh" in names and "fast_softmax" in names, names
    assert all(task.workload is not None for task in tasks), [task.problem for task in tasks]
    _assert_untuned_matches_pytorch(model, target)


def test_sigmoids_and_silus_take_the_fast_exponential_and_match_pytorch(tmp_path: Path) -> None:
    target = parse_target(None)
    model = load_model(write_excited_conv_pt2(tmp_path / "excited.pt2"))
    tasks = extract_tasks(model, target)
    names = " ".join(task.name for task in tasks)
    # each sigmoid (the SiLUs' and the gate's) as 1 / (1 + exp(-x)) with TVM's fast exponential,
    # where LLVM would expand it with libm's scalar expf
    assert "sigmoid" not in names and "fast_exp" in names, names
    convs = [task.name for task in tasks if "conv2d" in task.name]
    assert len(convs) == 3 and all("fast_exp" in name for name in convs), convs  # epilogues
    _assert_untuned_matches_pytorch(model, target)


def test_a_cube_is_multiplied_out_and_a_fractional_power_kept(tmp_path: Path) -> None:
    target = parse_target(None)
    model = load_model(write_cubing_gelu_onnx(tmp_path / "gelu.onnx"))
    (task,) = extract_tasks(model, target)
    # x ** 3 as x * x * x, where LLVM would call libm's scalar powf per element; |x| ** 1.5 as it is
    assert task.name.count("power") == 1 and "fast_tanh" in task.name, task.name
    check = check_outputs(model, compile_untuned(model, target), target)
    assert check.reference == "ONNX Runtime" and check.max_abs_error < 1e-5


def test_a_matmul_on_tokens_takes_its_activation_scaling_and_residual_add_as_epilogue(
    tmp_path: Path,
) -> None:
    target = parse_target(None)
    model = load_model(write_token_block_pt2(tmp_path / "block.pt2"))
    names = [task.name for task in extract_tasks(model, target)]
    # The GELU and both residual adds are computed by the matmul before them, not as kernels of
    # their own between reshapes; the scores, their 1/4 and the softmax are one attention kernel.
    assert any("matmul" in name and "fast_erf" in name for name in names), names
    assert any(name.startswith("attention") for name in names), names
    assert not [name for name in names if "add" in name and "matmul" not in name], names
    assert sum(bool(re.search(r"matmul\d*_add\d*_add", name)) for name in names) == 2, names
    _assert_untuned_matches_pytorch(model, target)


def test_a_matmul_is_regrouped_only_where_it_stays_one_matmul_of_the_same_values() -> None:
    from tvm import relax
    from tvm.script import ir as I
    from tvm.script import relax as R

    @I.ir_module
    class Module:
        @R.function
        def main(
            x: R.Tensor((8, 32), "float32"),
            w: R.Tensor((32, 32), "float32"),
            bias: R.Tensor((1, 8, 32), "float32"),
        ) -> R.Tuple(
            R.Tensor((1, 8, 2, 16), "float32"),
            R.Tensor((1, 8, 32), "float32"),
            R.Tensor((1, 8, 32), "float32"),
            R.Tensor((8, 32), "float32"),
        ):
            with R.dataflow():
                # a reshape that splits the matrix, not its batch
                heads = R.reshape(R.matmul(x, w), R.shape([1, 8, 2, 16]))
                # a bias with dimensions of its own, which broadcasts the product to them
                batched = R.reshape(R.add(R.matmul(x, w), bias), R.shape([1, 8, 32]))
                # a product something else uses too: regrouped, it would be computed twice
                shared = R.matmul(x, w)
                tokens = R.reshape(shared, R.shape([1, 8, 32]))
                activated = R.nn.relu(shared)
                R.output(heads, batched, tokens, activated)
            return (heads, batched, tokens, activated)

    normalized = relax.transform.Normalize()(Module)
    rewritten = matmuls_in_their_batches(normalized)
    tvm.ir.assert_structural_equal(rewritten, normalized)


def test_a_model_for_a_target_kind_without_a_backend_is_one_line(tmp_path: Path) -> None:
    model = load_model(write_mlp_onnx(tmp_path / "mlp.onnx"))
    with pytest.raises(UserError, match="models are built for cuda and llvm targets, not rocm"):
        compile_untuned(model, {"kind": "rocm"})


def test_a_relax_module_and_a_task_the_admission_refuses(tmp_path: Path) -> None:
    path = tmp_path / "annotated.py"
    path.write_text(ANNOTATED_RELAX_MODEL)
    model = load_model(path)
    assert model.reference is None and model.reference_name == "TVM's untuned build"
    tasks = extract_tasks(model, parse_target(None))
    refused = [task for task in tasks if task.workload is None]
    assert len(refused) == 1 and "double" in refused[0].name
    assert "block annotation 'hint'" in (refused[0].problem or "")


def test_input_specs_parse() -> None:
    specs = parse_input_specs(["x=1x3x32x32:float16", "mask=4"])
    assert specs["x"].shape == (1, 3, 32, 32) and specs["x"].dtype == "float16"
    assert specs["mask"].shape == (4,) and specs["mask"].dtype == "float32"
    with pytest.raises(UserError, match="NAME=DIMxDIM"):
        parse_input_specs(["x=1x?"])
    with pytest.raises(UserError, match="gives x twice"):
        parse_input_specs(["x=1", "x=2"])


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00not a model\xff" * 8)
    junk_pt2 = tmp_path / "junk.pt2"
    junk_pt2.write_bytes(b"PK\x03\x04 not an archive")
    dynamic = write_mlp_onnx(tmp_path / "dynamic.onnx", batch="batch")
    unsupported = write_onnx_with(tmp_path / "unsupported.onnx", "Det")
    evil = tmp_path / "evil.py"
    evil.write_text("import os\n" + RELAX_MODEL)
    prim_only = tmp_path / "prim.py"
    prim_only.write_text(
        "from tvm.script import tirx as T\n\n\n@T.prim_func\ndef f(a: T.Buffer((4,), 'float32')):"
        "\n    T.evaluate(0)\n"
    )
    return {
        "not a model": ([str(junk)], "not a valid ONNX model"),
        "not an exported program": ([str(junk_pt2)], "not a torch.export program"),
        "missing file": ([str(tmp_path / "absent.onnx")], "does not exist"),
        "unsupported operator": ([str(unsupported)], "does not support: Det"),
        "no static shape": ([str(dynamic)], "input x has no static shape (batchx64)"),
        "contradicting shape": ([str(dynamic), "--input", "x=16x32"], "but the model's input"),
        "unknown input": ([str(dynamic), "--input", "x=16x64", "--input", "z=1"], "names z"),
        "malformed input": ([str(dynamic), "--input", "x:16"], "expected NAME=DIMxDIM"),
        "code in a relax file": ([str(evil)], "an import of os, which a Relax model file"),
        "not a relax module": ([str(prim_only)], "whose main is an @R.function"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "not a model",
        "not an exported program",
        "missing file",
        "unsupported operator",
        "no static shape",
        "contradicting shape",
        "unknown input",
        "malformed input",
        "code in a relax file",
        "not a relax module",
    ],
)
def test_bad_model_input_is_one_line_and_writes_nothing(
    cli: Cli, tmp_path: Path, case: str
) -> None:
    args, expected = _bad_inputs(tmp_path)[case]
    db = tmp_path / "log.db"
    result = cli("tune", *args, "--trials", "2", "--db", f"sqlite:///{db}")
    assert result.code == 2, result.err
    assert expected in result.err
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert not db.exists()


def test_export_refuses_an_untuned_model_and_other_formats(cli: Cli, tmp_path: Path) -> None:
    mlp = write_mlp_onnx(tmp_path / "mlp.onnx")
    url = f"sqlite:///{tmp_path / 'log.db'}"
    TuningLog(url).close()
    result = cli(
        "export", str(mlp), "--format", "library", "-o", str(tmp_path / "m.so"), "--db", url
    )
    assert result.code == 2 and "no tuned schedule of any task of mlp" in result.err
    result = cli("export", str(mlp), "--format", "tvmscript", "-o", str(tmp_path / "m.py"))
    assert result.code == 2 and "library or metaschedule-db" in result.err
    result = cli("tune", "matmul", "--input", "x=1", "--db", url)
    assert result.code == 2 and "--input sets a model file's input shapes" in result.err
