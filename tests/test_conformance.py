"""Models written elsewhere go through: PyTorch's nn.MultiheadAttention as ``.pt2``, booleans
that TVM's code generator cannot compute on, a weight-packing schedule beside a kernel without
blocks, a schedule TVM cannot build, ONNX shapes computed from constants, small models of the
conformance corpus (``benchmarks/conformance.py``) imported, compiled and checked against their
frameworks, and one of them through a real server and worker as the service's users send it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from model_files import write_mlp_onnx

from autosched.model.compile import (
    CANNOT_BUILD,
    TaskSchedule,
    check_outputs,
    compile_schedules,
    compile_untuned,
    random_model_inputs,
)
from autosched.model.load import load_model
from autosched.model.tasks import extract_tasks
from autosched.records import RecordView
from autosched.schedule import trace_to_json
from autosched.search.space import design_space
from autosched.target import parse_target

pytestmark = pytest.mark.slow

CORPUS_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "conformance.py"


def _exported(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], path: Path) -> Path:
    torch.export.save(torch.export.export(module.eval(), inputs), str(path))
    return path


def test_multihead_attention_exported_by_pytorch_is_prepared_and_matches(tmp_path: Path) -> None:
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = torch.nn.MultiheadAttention(64, 4, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.attention(x, x, x, need_weights=False)[0]

    torch.manual_seed(0)
    path = _exported(Block(), (torch.randn(1, 16, 64),), tmp_path / "attention.pt2")
    target = parse_target(None)
    model = load_model(path)  # was: TVM cannot prepare the model: std::bad_alloc
    check = check_outputs(model, compile_untuned(model, target), target)
    assert check.reference == "PyTorch eager" and check.max_abs_error < 1e-4


def test_booleans_compared_summed_and_counted_compile_and_match_pytorch(tmp_path: Path) -> None:
    class PackedMask(torch.nn.Module):
        """Hugging Face's packed-sequence mask: sequences numbered by a running sum of
        booleans, tokens of one sequence attend to each other."""

        def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            starts = torch.diff(positions, prepend=positions[:, :1] - 1, dim=-1) != 1
            sequence = starts.cumsum(-1)
            same = sequence[:, :, None] == sequence[:, None, :]
            signs = x > 0
            agree = (signs[:, :, None, 0] == signs[:, None, :, 0]) + (signs[:, :, None, 1] > same)
            scores = torch.matmul(x, x.transpose(1, 2))
            return torch.where(same & agree, scores, 0.0) + sequence[:, :, None]

    inputs = (torch.randn(1, 8, 4), torch.randint(0, 5, (1, 8)))
    path = _exported(PackedMask(), inputs, tmp_path / "mask.pt2")
    target = parse_target(None)
    model = load_model(path)
    check = check_outputs(model, compile_untuned(model, target), target)
    assert check.reference == "PyTorch eager" and check.max_abs_error < 1e-5


def _packing_record(task: object, target: dict) -> RecordView:
    """A record of a schedule of ``task`` that stores its weight in a layout of its own."""
    space = design_space(task.workload, target, seed=0)
    for index in range(8):
        sch = space.sample(lambda _name, choices, index=index: choices[index % len(choices)])
        if sch is not None and "layout_rewrite_preproc" in sch.mod.script():
            return RecordView(
                1, trace_to_json(sch.trace), "", 1e-5, (1e-5,), None, None, True, None, None
            )
    raise AssertionError("no sampled schedule stores the weight in a layout of its own")


def test_a_packed_weight_beside_a_kernel_without_blocks_builds(tmp_path: Path) -> None:
    class CountedLinear(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(64, 64)

        def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
            # TVM writes a cumsum with its IR builder: a kernel with no block under its root
            return torch.relu(self.linear(x)) + torch.cumsum(counts, 0)[:, None].to(x.dtype)

    torch.manual_seed(0)
    inputs = (torch.randn(16, 64), torch.randint(0, 5, (16,)))
    path = _exported(CountedLinear(), inputs, tmp_path / "counted.pt2")
    target = parse_target(None)
    model = load_model(path)
    tasks = extract_tasks(model, target)
    (linear,) = [task for task in tasks if "matmul" in task.name]
    schedules = [TaskSchedule(linear, _packing_record(linear, target))]
    executable, built = compile_schedules(model, schedules, target)
    assert built == schedules  # the packing schedule is kept, not dropped
    check = check_outputs(model, executable, target)
    assert check.reference == "PyTorch eager" and check.max_abs_error < 1e-4


def test_a_schedule_tvm_cannot_build_keeps_the_default_with_tvms_reason(tmp_path: Path) -> None:
    target = parse_target(None)
    model = load_model(write_mlp_onnx(tmp_path / "mlp.onnx"))
    tasks = extract_tasks(model, target)
    first, second = sorted(tasks, key=lambda task: "relu" not in task.name)[:2]
    foreign = _packing_record(first, target)  # names blocks that the second task lacks
    schedules = [TaskSchedule(first, None, "no verified schedule in the log"),
                 TaskSchedule(second, foreign)]  # fmt: skip
    executable, built = compile_schedules(model, schedules, target)
    assert built[0] == schedules[0]
    assert built[1].task is second and built[1].record is None
    assert built[1].reason.startswith(f"{CANNOT_BUILD}: "), built[1].reason
    check = check_outputs(model, executable, target)
    assert check.reference == "ONNX Runtime" and check.max_abs_error < 1e-4


def _write_padding_from_constants_onnx(path: Path) -> Path:
    """``Pad`` of x[1, 5, 5, 4] by pads that constants compute as PyTorch's TorchScript exporter
    writes ``F.pad`` in torchvision's ``swin_t``: ``(7 - 5 % 7) % 7`` rows, its pairs filled up
    with ``ConstantOfShape`` to the rank, reshaped, transposed and flattened."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def constant(name: str, value: object) -> onnx.NodeProto:
        array = numpy_helper.from_array(np.array(value, dtype=np.int64))
        return helper.make_node("Constant", [], [name], value=array)

    zero = numpy_helper.from_array(np.array([0], dtype=np.int64))
    nodes = [
        constant("size", 5), constant("window", 7), constant("begins", [0, 0]),
        constant("rank2", 8), constant("first", 0), constant("axis0", [0]),
        constant("pairs_shape", [-1, 2]), constant("flat", [-1]),
        helper.make_node("Mod", ["size", "window"], ["rem"]),
        helper.make_node("Sub", ["window", "rem"], ["gap"]),
        helper.make_node("Mod", ["gap", "window"], ["pad"]),
        helper.make_node("Unsqueeze", ["pad", "axis0"], ["pad1"]),
        helper.make_node("Concat", ["begins", "pad1"], ["given"], axis=0),
        helper.make_node("Shape", ["given"], ["given_shape"]),
        helper.make_node("Gather", ["given_shape", "first"], ["count"], axis=0),
        helper.make_node("Sub", ["rank2", "count"], ["rest"]),
        helper.make_node("Unsqueeze", ["rest", "axis0"], ["rest1"]),
        helper.make_node("ConstantOfShape", ["rest1"], ["zeros"], value=zero),
        helper.make_node("Concat", ["given", "zeros"], ["pads_flat"], axis=0),
        helper.make_node("Reshape", ["pads_flat", "pairs_shape"], ["pairs"]),
        helper.make_node("Transpose", ["pairs"], ["by_side"], perm=[1, 0]),
        helper.make_node("Reshape", ["by_side", "flat"], ["pads"]),
        helper.make_node("Pad", ["x", "pads"], ["y"]),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "padding",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 5, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 7, 5, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_onnx_arithmetic_on_constants_is_folded_before_tvm_imports_it(tmp_path: Path) -> None:
    target = parse_target(None)
    # was: TVM cannot import this ONNX model: Dynamic pads are not supported yet.
    model = load_model(_write_padding_from_constants_onnx(tmp_path / "padding.onnx"))
    check = check_outputs(model, compile_untuned(model, target), target)
    assert check.reference == "ONNX Runtime" and check.max_abs_error == 0.0


def _corpus() -> object:
    spec = importlib.util.spec_from_file_location("conformance", CORPUS_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


SMALL_MODELS = [
    ("transformer_encoder", "pt2"),
    ("bert", "onnx"),
    ("t5_encoder", "pt2"),
    ("llama", "pt2"),
    ("squeezenet1_1", "onnx"),
]


@pytest.mark.parametrize(("name", "fmt"), SMALL_MODELS)
def test_a_model_of_the_corpus_compiles_and_matches_its_framework(
    name: str, fmt: str, tmp_path: Path
) -> None:
    corpus = _corpus()
    (entry,) = [entry for entry in corpus.CORPUS if entry.name == name]
    path = tmp_path / f"{name}.{fmt}"
    corpus.export(entry, fmt, path)
    target = parse_target(None)
    model = load_model(path)
    assert extract_tasks(model, target)  # its kernels are tasks a tuning can take
    check = check_outputs(model, compile_untuned(model, target), target)
    assert check.reference == ("PyTorch eager" if fmt == "pt2" else "ONNX Runtime")
    expected = model.reference(random_model_inputs(model.inputs))
    # the outputs spread: a check of near-constant outputs would prove little
    assert float(np.std(np.concatenate([np.ravel(out) for out in expected]))) > 0.1


def test_a_model_of_the_corpus_through_the_service_matches_onnx_runtime(tmp_path: Path) -> None:
    """PyTorch's Transformer encoder as one ONNX file, submitted with `autosched submit` to a
    real `autosched serve` and `autosched worker` over loopback HTTP, as `conformance.py
    --service` takes every ONNX model of the corpus: its model job finishes, the server's output
    check passes, and the library downloaded from the server matches ONNX Runtime."""
    corpus = _corpus()
    (entry,) = [entry for entry in corpus.CORPUS if entry.name == "transformer_encoder"]
    with corpus.TuningService(tmp_path / "service") as service:
        row = corpus.run_on_service(entry, 1, tmp_path, service.url, service.client_token)
        troubles = service.troubles()
    assert row.reason is None, row
    assert row.check == "outputs match ONNX Runtime" and row.check_max_abs_error < 1e-4
    assert row.library_bytes > 0 and row.library_max_abs_error < 1e-4
    assert row.tasks > 0 and row.job_secs > 0
    assert troubles == []
