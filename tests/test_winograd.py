"""Winograd's F(4x4, 3x3): the matrices compute the convolution; the kernel workloads (NCHW and
NHWC) take and give what the direct convolutions do, tune into programs that still do, and with
their kernel constant are timed with the kernel transformed ahead; a model's rewrite gives the
direct convolution's outputs (odd sizes and asymmetric padding too) as three kernels whose last
takes the epilogue, leaves alone the convolutions it does not apply to, and a model's Winograd
tasks tune and build into a model that matches PyTorch."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tvm
from helpers import Cli
from model_files import write_residual_block_pt2
from test_workloads import run_unscheduled
from tvm import relax

from autosched.measure import LocalMeasurer, MeasureConfig
from autosched.measure.program import BuildRequest
from autosched.model.load import load_model
from autosched.model.tasks import extract_tasks, fuse
from autosched.model.winograd import transformed_kernel, winograd_convolutions
from autosched.records import BASELINE_TRACE
from autosched.target import host_target, parse_target
from autosched.weights import transform_weights_ahead
from autosched.workload import buffer_args, mismatch, random_inputs
from autosched.workloads import get_workload
from autosched.workloads.nn import RESNET50_LAYERS
from autosched.workloads.winograd import ALPHA, INPUT_TRANSFORM, OUTPUT_TRANSFORM, TILE


def _correlate(image: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """The valid 2-d correlation of ``image`` (H, W, C) with an HWIO ``kernel``, as a
    convolution layer computes it."""
    kh, kw = kernel.shape[:2]
    rows, cols = image.shape[0] - kh + 1, image.shape[1] - kw + 1
    out = np.zeros((rows, cols, kernel.shape[3]))
    for i in range(kh):
        for j in range(kw):
            out += image[i : i + rows, j : j + cols] @ kernel[i, j]
    return out


def test_the_transforms_compute_a_tile_of_the_convolution() -> None:
    rng = np.random.default_rng(0)
    tile = rng.standard_normal((ALPHA, ALPHA, 5))  # one input tile, 5 channels
    kernel = rng.standard_normal((3, 3, 5, 7))
    transformed = transformed_kernel(kernel).reshape(ALPHA, ALPHA, 5, 7)
    tile_in = np.einsum("ar,rsc,bs->abc", INPUT_TRANSFORM, tile, INPUT_TRANSFORM)
    products = np.einsum("abc,abco->abo", tile_in, transformed)
    tile_out = np.einsum("ua,abo,vb->uvo", OUTPUT_TRANSFORM, products, OUTPUT_TRANSFORM)
    assert tile_out.shape == (TILE, TILE, 7)
    np.testing.assert_allclose(tile_out, _correlate(tile, kernel), rtol=1e-9, atol=1e-9)


LAYOUTS = ["nchw", "nhwc"]
"""The data layouts of the Winograd kernels: ``conv2d_{layout}_winograd``."""


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    "params",
    [
        {"H": 9, "W": 7, "CI": 5, "CO": 6, "padding": 1},
        {"N": 2, "H": 6, "W": 13, "CI": 4, "CO": 3, "padding": 2},
        {"H": 10, "W": 10, "CI": 3, "CO": 4, "padding": 0},
    ],
    ids=["ragged-tiles", "batch-2-padding-2", "no-padding"],
)
def test_the_winograd_kernel_takes_and_gives_what_the_direct_convolution_does(
    params: dict[str, int], layout: str
) -> None:
    winograd = get_workload(f"conv2d_{layout}_winograd", params)
    direct = get_workload(f"conv2d_{layout}", params)  # a 3x3 kernel of stride 1 by default
    assert winograd.args == direct.args and winograd.flops == direct.flops
    inputs = random_inputs(direct, seed=2)[:2]
    (expected,) = direct.reference(inputs)
    (got,) = run_unscheduled(winograd, inputs)
    assert mismatch(got, expected) is None
    assert np.abs(got - expected).max() > 0  # computed another way, not the same sums


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_winograd_kernels_presets_are_resnet50s_3x3_layers_of_stride_1(layout: str) -> None:
    presets = set()
    for name, layer in RESNET50_LAYERS.items():
        if (layer["KH"], layer["stride"]) != (3, 1):
            continue
        winograd = get_workload(f"conv2d_{layout}_winograd", {"preset": name})
        assert winograd.args == get_workload(f"conv2d_{layout}", {"preset": name}).args
        presets.add(name)
    assert presets == {f"resnet50_res{stage}_3x3" for stage in (2, 3, 4, 5)}


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_winograd_kernel_tunes_into_programs_that_match_the_direct_convolution(
    cli: Cli, tmp_path: Path, layout: str
) -> None:
    shape = ["-p", "H=10", "-p", "W=9", "-p", "CI=8", "-p", "CO=8"]
    result = cli("tune", f"conv2d_{layout}_winograd", *shape, "--trials", "4", "--batch", "4",
                 "--seed", "0", "--finalists", "0", "--db", f"sqlite:///{tmp_path / 'w.db'}",
                 "--json")  # fmt: skip
    assert result.code == 0, result.err
    report = json.loads(result.out)
    # every candidate's result is checked against the direct convolution's reference
    assert report["trials"] == 4 and report["failed"] == 0
    assert report["best_latency_us"] > 0


def _kernel_ahead(weight: np.ndarray, layout: str) -> np.ndarray:
    """``U[a, b, ci, co]`` of a kernel of the ``layout`` convolution (HWIO for NHWC data, OIHW
    for NCHW), transformed as a model transforms it once."""
    transformed = transformed_kernel(weight if layout == "nhwc" else weight.transpose(2, 3, 1, 0))
    return transformed.reshape(ALPHA, ALPHA, *transformed.shape[1:])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_constant_kernel_is_transformed_ahead_of_the_program_that_is_timed(
    tmp_path: Path, layout: str
) -> None:
    params = {"H": 9, "W": 7, "CI": 5, "CO": 6}
    plain = get_workload(f"conv2d_{layout}_winograd", params)
    mod = plain.mod
    assert transform_weights_ahead(mod) is mod  # the kernel as given: transformed in the call
    constant = get_workload(f"conv2d_{layout}_winograd", {**params, "weights": "weight"})
    ahead = transform_weights_ahead(constant.mod)
    assert buffer_args(ahead["main"], "ahead")[1] == ((ALPHA, ALPHA, 5, 6), "float32")
    assert "kernel_cols" not in ahead.script() and "kernel_transform[" in ahead.script()
    data, weight = random_inputs(constant, seed=3)[:2]
    (expected,) = constant.reference([data, weight])
    program = tvm.compile(ahead, target={"kind": "llvm"}).jit()
    arrays = [data, _kernel_ahead(weight, layout), np.zeros_like(expected)]
    tensors = [tvm.runtime.tensor(array) for array in arrays]
    program["main"](*tensors)
    assert mismatch(tensors[2].numpy(), expected) is None
    # the tuning path: timed with the kernel transformed, checked with the kernel as given
    target = host_target()
    request = BuildRequest(constant.ref, BASELINE_TRACE, target, str(tmp_path / "ahead.so"))
    timed, checked = request.execute(), replace(request, prepacked=False).execute()
    assert timed.prepacked and timed.args[1] == ((ALPHA, ALPHA, 5, 6), "float32")
    assert not checked.prepacked and checked.args == tuple(constant.args)
    measurer = LocalMeasurer(target, MeasureConfig(repeat=2, min_repeat_ms=1))
    try:
        (result,) = measurer.measure(constant.ref, [BASELINE_TRACE])
        assert result.ok, result
        assert measurer.verify(constant.ref, BASELINE_TRACE, seed=4) is None
    finally:
        measurer.close()


def _conv_module(
    size: tuple[int, int],
    channels: int,
    out_channels: int,
    *,
    padding: tuple[int, int, int, int] = (1, 1, 1, 1),
    strides: tuple[int, int] = (1, 1),
    kernel_size: int = 3,
    kernel_as_input: bool = False,
) -> tuple[tvm.IRModule, np.ndarray]:
    """``relu(conv2d(x, kernel) + bias)``, channels-last, with a random constant kernel (or the
    kernel as the function's second parameter); and a random input."""
    rng = np.random.default_rng(1)
    kernel = rng.uniform(-1, 1, (kernel_size, kernel_size, channels, out_channels))
    bias = rng.uniform(-1, 1, (out_channels,)).astype("float32")
    x = relax.Var("x", relax.TensorType((1, *size, channels), "float32"))
    params = [x]
    if kernel_as_input:
        weight = relax.Var("w", relax.TensorType(kernel.shape, "float32"))
        params.append(weight)
    else:
        weight = relax.const(kernel.astype("float32"))
    builder = relax.BlockBuilder()
    with builder.function("main", params):
        with builder.dataflow():
            conv = builder.emit(
                relax.op.nn.conv2d(
                    x, weight, strides=strides, padding=padding, data_layout="NHWC",
                    kernel_layout="HWIO",
                )
            )  # fmt: skip
            out = builder.emit_output(relax.op.nn.relu(relax.op.add(conv, relax.const(bias))))
        builder.emit_func_output(out)
    return builder.get(), rng.uniform(-1, 1, (1, *size, channels)).astype("float32")


def _run(mod: tvm.IRModule, *arrays: np.ndarray) -> np.ndarray:
    executable = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    main = relax.VirtualMachine(executable, tvm.cpu())["main"]
    return main(*(tvm.runtime.tensor(array) for array in arrays)).numpy()


@pytest.mark.parametrize(
    ("size", "padding"),
    [
        ((16, 16), (1, 1, 1, 1)),
        ((15, 18), (1, 1, 1, 1)),
        ((18, 18), (0, 0, 0, 0)),
        ((16, 16), (2, 0, 1, 1)),
    ],
)
def test_a_3x3_convolution_becomes_three_kernels_with_the_direct_outputs(
    size: tuple[int, int], padding: tuple[int, int, int, int]
) -> None:
    mod, x = _conv_module(size, 16, 24, padding=padding)
    rewritten = winograd_convolutions(mod)
    script = rewritten["main"].script()
    assert "conv2d" not in script and "R.matmul" in script
    fused = fuse(mod, parse_target(None))  # on a CPU, fusing rewrites it too
    names = sorted(gv.name_hint.rstrip("0123456789") for gv in fused.get_global_vars())
    # the bias and the ReLU fuse into the output transform, as they did into the convolution
    assert names == [
        "fused_winograd_output_transform_add_relu", "main", "matmul", "winograd_input_transform",
    ]  # fmt: skip
    expected = _run(mod, x)
    got = _run(rewritten, x)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize(
    "case",
    [
        {"strides": (2, 2)},
        {"kernel_size": 1, "padding": (0, 0, 0, 0)},
        {"kernel_as_input": True},
        {"channels": 4},
        {"size": (7, 7)},
        {"size": (12, 12)},
    ],
    ids=["stride-2", "1x1", "kernel-not-constant", "few-channels", "4-tiles", "9-tiles"],
)
def test_convolutions_it_does_not_apply_to_are_left_as_they_are(case: dict) -> None:
    channels = case.pop("channels", 16)
    mod, _ = _conv_module(case.pop("size", (16, 16)), channels, 16, **case)
    tvm.ir.assert_structural_equal(winograd_convolutions(mod), mod)


def test_a_models_winograd_tasks_are_admitted_with_the_transformed_kernel_packable(
    tmp_path: Path,
) -> None:
    model = load_model(write_residual_block_pt2(tmp_path / "block.pt2"))
    tasks = extract_tasks(model, parse_target(None))
    assert all(task.workload is not None for task in tasks), [task.problem for task in tasks]
    names = [task.name for task in tasks]
    assert not any("conv2d" in name for name in names), names
    # the two convolutions are one input transform and one matmul task, called twice each
    (inputs,) = [task for task in tasks if "winograd_input_transform" in task.name]
    (products,) = [task for task in tasks if task.name.startswith("matmul")]
    assert inputs.weight == products.weight == 2
    assert [int(i) for i in products.workload.func.attrs["layout_free_buffers"]] == [1]
    # the second convolution's output transform takes the batch norm, residual add and ReLU
    assert any("output_transform" in name and "add" in name and "relu" in name for name in names)


@pytest.mark.slow
def test_a_model_with_winograd_convolutions_tunes_and_matches_pytorch(
    cli: Cli, tmp_path: Path
) -> None:
    block = write_residual_block_pt2(tmp_path / "block.pt2")
    result = cli("tune", str(block), "--trials", "6", "--batch", "2", "--seed", "0", "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["check"]["reference"] == "PyTorch eager"
    assert report["check"]["max_abs_error"] < 1e-3
    tuned = [task for task in report["tasks"] if task["trials"] > 0]
    assert any("winograd" in task["name"] for task in tuned), report["tasks"]
