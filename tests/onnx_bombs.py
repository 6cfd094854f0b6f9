"""ONNX files of a few hundred bytes that ask an importer for gigabytes: a shape-making operator
(``ConstantOfShape``, ``Expand``, ``Tile``, ``Range``, ``Pad``, ``OneHot``, ``Resize``) fed a
constant shape, a sparse initializer of a vast dense shape, the same in an If's branch, and many
constants each under the bound. Each ``bomb`` names the node or tensor that asks."""

from __future__ import annotations

from pathlib import Path

import numpy as np

HUGE = 1 << 28
"""Elements of the tensor each bomb asks for (1 GiB of float32)."""


def write_bomb(path: Path, kind: str) -> Path:
    """The bomb ``kind`` (one of `BOMBS`) as an ONNX file at ``path``."""
    import onnx
    from onnx import helper

    graph = BOMBS[kind]()
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _graph(
    nodes: list, inputs: list, output: str, rank: int, initializers: list, **kwargs: object
) -> object:
    """A graph of one float output of ``rank`` dimensions whose sizes the file leaves open."""
    from onnx import TensorProto, helper

    dims = [f"n{i}" for i in range(rank)]
    out = helper.make_tensor_value_info(output, TensorProto.FLOAT, dims)
    return helper.make_graph(nodes, "bomb", inputs, [out], initializers, **kwargs)


def _ints(name: str, values: list[int]) -> object:
    from onnx import numpy_helper

    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _x(*shape: int) -> object:
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))


def _constant_of_shape() -> object:
    from onnx import helper

    node = helper.make_node("ConstantOfShape", ["shape"], ["y"], name="zeros")
    return _graph([node], [], "y", 1, [_ints("shape", [HUGE])])


def _constant_of_shape_input() -> object:
    """The shape is an initializer that is also a graph input: shape inference does not read it,
    TVM's importer makes it a constant."""
    from onnx import TensorProto, helper

    node = helper.make_node("ConstantOfShape", ["shape"], ["y"], name="zeros")
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [1])
    return _graph([node], [shape], "y", 1, [_ints("shape", [HUGE])])


def _expand() -> object:
    from onnx import helper

    node = helper.make_node("Expand", ["x", "shape"], ["y"], name="spread")
    return _graph([node], [_x(1)], "y", 2, [_ints("shape", [1 << 14, 1 << 14])])


def _tile() -> object:
    from onnx import helper

    node = helper.make_node("Tile", ["x", "repeats"], ["y"], name="tiles")
    return _graph([node], [_x(4, 4)], "y", 2, [_ints("repeats", [1 << 13, 1 << 13])])


def _range() -> object:
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node(
            "Constant", [], [name], value=helper.make_tensor(name, TensorProto.FLOAT, [], [v])
        )
        for name, v in (("start", 0.0), ("limit", float(HUGE)), ("delta", 1.0))
    ]
    nodes.append(helper.make_node("Range", ["start", "limit", "delta"], ["y"], name="count"))
    return _graph(nodes, [], "y", 1, [])


def _pad() -> object:
    from onnx import helper

    node = helper.make_node("Pad", ["x", "pads"], ["y"], name="margin")
    return _graph([node], [_x(1, 1)], "y", 2, [_ints("pads", [0, 0, 1 << 14, 1 << 14])])


def _one_hot() -> object:
    from onnx import TensorProto, helper

    node = helper.make_node("OneHot", ["indices", "depth", "values"], ["y"], name="hot", axis=-1)
    indices = helper.make_tensor_value_info("indices", TensorProto.INT64, [1 << 8])
    values = helper.make_tensor("values", TensorProto.FLOAT, [2], [0.0, 1.0])
    return _graph([node], [indices], "y", 2, [_ints("depth", [1 << 20]), values])


def _resize() -> object:
    from onnx import helper

    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="grow")
    return _graph([node], [_x(1, 1, 2, 2)], "y", 4, [_ints("sizes", [1, 1, 1 << 14, 1 << 14])])


def _sparse() -> object:
    from onnx import TensorProto, helper

    values = helper.make_tensor("dense", TensorProto.FLOAT, [1], [1.0])
    indices = helper.make_tensor("dense_indices", TensorProto.INT64, [1], [0])
    sparse = helper.make_sparse_tensor(values, indices, [HUGE])
    node = helper.make_node("Identity", ["dense"], ["y"])
    return _graph([node], [], "y", 1, [], sparse_initializer=[sparse])


def _in_a_branch() -> object:
    from onnx import TensorProto, helper

    branch = _graph(
        [helper.make_node("ConstantOfShape", ["shape"], ["z"], name="zeros")],
        [],
        "z",
        1,
        [_ints("shape", [HUGE])],
    )
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)
    return _graph([node], [cond], "y", 1, [])


BOMBS = {
    "ConstantOfShape": _constant_of_shape,
    "ConstantOfShape of an input": _constant_of_shape_input,
    "Expand": _expand,
    "Tile": _tile,
    "Range": _range,
    "Pad": _pad,
    "OneHot": _one_hot,
    "Resize": _resize,
    "sparse initializer": _sparse,
    "If branch": _in_a_branch,
}
"""Each bomb's builder, by kind."""


def write_many_constants(path: Path, count: int, elements: int) -> Path:
    """``count`` ConstantOfShape nodes of ``elements`` floats each, summed: constants that are
    each small and many."""
    import onnx
    from onnx import helper

    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], [f"c{i}"], name=f"zeros{i}")
        for i in range(count)
    ]
    nodes.append(helper.make_node("Sum", [f"c{i}" for i in range(count)], ["y"]))
    graph = _graph(nodes, [], "y", 1, [_ints("shape", [elements])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path
