"""ONNX memory bombs (``onnx_bombs.py``) are refused before TVM imports them, in one line naming
the node or tensor and its bytes: by `check_tensor_bounds`, whether or not ONNX's shape inference
finds the shapes, and by `autosched tune`, which exits 2. Real models stay within the bounds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import Cli
from model_files import write_mlp_onnx
from onnx_bombs import BOMBS, HUGE, write_bomb, write_many_constants

from autosched.errors import UserError
from autosched.model.onnx_bounds import TensorBounds, check_tensor_bounds


def _input_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    return {
        value.name: [dim.dim_value for dim in value.type.tensor_type.shape.dim]
        for value in model.graph.input
    }


def _refusal(path: Path, bounds: TensorBounds | None = None) -> str:
    model = onnx.load(str(path))
    onnx.checker.check_model(model)  # a valid model, as the importer sees it
    with pytest.raises(UserError) as refused:
        check_tensor_bounds(model, _input_shapes(model), bounds or TensorBounds(), label=path.name)
    return str(refused.value)


@pytest.mark.parametrize("inference", ["inferred", "not inferred"])
@pytest.mark.parametrize("kind", list(BOMBS))
def test_each_bomb_is_refused_naming_its_node_and_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, inference: str
) -> None:
    if inference == "not inferred":  # the constant shape inputs alone tell the sizes

        def fail(*args: object, **kwargs: object) -> onnx.ModelProto:
            raise onnx.shape_inference.InferenceError("no inference")

        monkeypatch.setattr(onnx.shape_inference, "infer_shapes", fail)
    path = write_bomb(tmp_path / "bomb.onnx", kind)
    assert path.stat().st_size < 400
    message = _refusal(path)
    assert message.startswith("bomb.onnx: ") and "\n" not in message
    assert "over the limit of 268435456 bytes a tensor (AUTOSCHED_MAX_TENSOR_BYTES)" in message
    held = int(message.split(" holds ")[1].split()[0])
    assert held >= HUGE * 4
    named = {
        "sparse initializer": "sparse initializer dense",
        "If branch": "zeros (ConstantOfShape) of a subgraph",
    }
    assert named.get(kind, f"({kind.split()[0]})") in message


def test_constants_each_within_the_bound_are_bounded_in_all(tmp_path: Path) -> None:
    path = write_many_constants(tmp_path / "many.onnx", count=8, elements=1 << 20)
    message = _refusal(path, TensorBounds(tensor_bytes=8 << 20, constant_bytes=16 << 20))
    assert "constants hold over 16777216 bytes in all" in message
    assert "(AUTOSCHED_MAX_PROGRAM_BYTES)" in message


def test_an_activation_that_shape_inference_sizes_is_bounded(tmp_path: Path) -> None:
    """x[N, 1] times a weight of [1, N]: a file of 64 KiB whose product holds N^2 floats."""
    from onnx import TensorProto, helper, numpy_helper

    n = 1 << 14
    weight = numpy_helper.from_array(np.ones((1, n), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="outer")],
        "outer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", n])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UserError, match=r"output y of node outer \(MatMul\) holds 1073741824"):
        check_tensor_bounds(model, {"x": [n, 1]}, TensorBounds(), label="outer.onnx")
    check_tensor_bounds(model, {"x": [16, 1]}, TensorBounds(), label="outer.onnx")


def test_a_real_model_is_within_the_bounds_and_they_are_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mlp = write_mlp_onnx(tmp_path / "mlp.onnx")
    model = onnx.load(str(mlp))
    check_tensor_bounds(model, {"x": [16, 64]}, TensorBounds(), label="mlp.onnx")
    monkeypatch.setenv("AUTOSCHED_MAX_TENSOR_BYTES", "4096")
    with pytest.raises(UserError, match="initializer w1 holds 16384 bytes, over the limit of 4096"):
        check_tensor_bounds(model, {"x": [16, 64]}, TensorBounds.from_env(), label="mlp.onnx")
    monkeypatch.setenv("AUTOSCHED_MAX_TENSOR_BYTES", "a lot")
    with pytest.raises(UserError, match="AUTOSCHED_MAX_TENSOR_BYTES must be a number"):
        TensorBounds.from_env()


def test_tune_refuses_a_bomb_with_one_line(cli: Cli, tmp_path: Path) -> None:
    bomb = write_bomb(tmp_path / "bomb.onnx", "ConstantOfShape")
    db = tmp_path / "log.db"
    result = cli("tune", str(bomb), "--trials", "2", "--db", f"sqlite:///{db}")
    assert result.code == 2, result.err
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert "output y of node zeros (ConstantOfShape) holds 1073741824 bytes" in result.err
    assert not db.exists()
