"""Bounds on the tensors of an ONNX model, checked before TVM imports it. TVM's importer makes
every constant an array and folds the operators on constants, so a file of a few bytes (a
``ConstantOfShape`` of a shape of 2^28) can ask for gigabytes.

Each tensor the model holds or makes is bounded where its size is known before the model runs:
initializers and constants, every output whose shape ONNX's shape inference finds, and the outputs
of operators whose shape input is a constant (``ConstantOfShape``, ``Expand``, ``Tile``, ``Range``,
``Reshape``, ``Resize``, ``Pad``, ``OneHot``, ...), which inference may leave unknown; and so are
the constants in all, those the file holds and those folded from them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from autosched.admission import (
    DEFAULT_MAX_PROGRAM_BYTES,
    MAX_PROGRAM_BYTES_VARIABLE,
    max_program_bytes,
)
from autosched.errors import UserError

if TYPE_CHECKING:
    import onnx

MAX_TENSOR_BYTES_VARIABLE = "AUTOSCHED_MAX_TENSOR_BYTES"
DEFAULT_MAX_TENSOR_BYTES = 256 << 20

_READ_ELEMENTS = 4096
"""The most elements of a constant read for the shape it gives an operator."""

Dims = tuple[int | None, ...]
"""A tensor's shape, None for a dimension not known."""


@dataclass(frozen=True)
class TensorBounds:
    """The most bytes one tensor of a model may hold (``tensor_bytes``), and its constants in all
    (``constant_bytes``)."""

    tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES
    constant_bytes: int = DEFAULT_MAX_PROGRAM_BYTES

    @classmethod
    def from_env(cls) -> TensorBounds:
        """``$AUTOSCHED_MAX_TENSOR_BYTES`` (else 256 MiB) a tensor, and
        ``$AUTOSCHED_MAX_PROGRAM_BYTES`` (else 4 GiB) of constants in all.

        Raises:
            UserError: a variable is not a positive number.
        """
        value = os.environ.get(MAX_TENSOR_BYTES_VARIABLE, "").strip()
        try:
            tensor_bytes = int(value) if value else DEFAULT_MAX_TENSOR_BYTES
        except ValueError:
            raise UserError(
                f"{MAX_TENSOR_BYTES_VARIABLE} must be a number, not {value!r}"
            ) from None
        if tensor_bytes < 1:
            raise UserError(f"{MAX_TENSOR_BYTES_VARIABLE} must be positive, not {tensor_bytes}")
        return cls(tensor_bytes, max_program_bytes())


def check_tensor_bounds(
    model: onnx.ModelProto,
    inputs: Mapping[str, Sequence[int]],
    bounds: TensorBounds,
    *,
    label: str,
) -> None:
    """Refuse ``model`` (its inputs of the static shapes ``inputs``) where a tensor it holds or
    makes, or its constants in all, would hold more bytes than ``bounds`` allow.

    Raises:
        UserError: one line naming ``label``, the tensor (and the node that makes it) and its
            bytes.
    """
    graph = _inferred(model, inputs).graph
    _Walk(bounds, label, _shapes(graph)).graph(graph, main=True)


class _Walk:
    """One pass over a model's graph and its subgraphs: each tensor bounded as it is met, the
    constants summed."""

    def __init__(
        self, bounds: TensorBounds, label: str, shapes: Mapping[str, tuple[Dims | None, int]]
    ) -> None:
        self._bounds, self._label, self._shapes = bounds, label, shapes
        self._values: dict[str, np.ndarray] = {}
        self._constant_bytes = 0

    def graph(self, graph: onnx.GraphProto, *, main: bool) -> None:
        """Bound the tensors of ``graph``; its initializers are constants, and in the ``main``
        graph so are the outputs of nodes of constant inputs, which the importer folds (a
        subgraph's nodes run once per call)."""
        where = "" if main else " of a subgraph"
        constants: set[str] = set()
        for tensor in graph.initializer:
            self._constant(
                _tensor_bytes(tensor.dims, tensor.data_type), f"initializer {tensor.name}{where}"
            )
            constants.add(tensor.name)
            _read(self._values, tensor.name, tensor)
        for sparse in graph.sparse_initializer:
            nbytes = _tensor_bytes(sparse.dims, sparse.values.data_type)
            self._constant(nbytes, f"sparse initializer {sparse.values.name}{where}")
            constants.add(sparse.values.name)
        for index, node in enumerate(graph.node):
            what = f"node {node.name or index} ({node.op_type}){where}"
            held = list(_attribute_tensor_bytes(node))
            for nbytes in held:
                self._bound(nbytes, f"a tensor attribute of {what}")
            if node.op_type == "Constant":
                _read_constant(self._values, node)
            for subgraph in _subgraphs(node):
                self.graph(subgraph, main=False)
            folded = main and all(not name or name in constants for name in node.input)
            for position, output in enumerate(node.output):
                nbytes = _output_bytes(node, position, self._shapes, self._values)
                if node.op_type == "Constant":
                    nbytes = max(nbytes, sum(held))
                if folded:
                    self._constant(nbytes, f"output {output} of {what}")
                    constants.add(output)
                else:
                    self._bound(nbytes, f"output {output} of {what}")

    def _bound(self, nbytes: int, what: str) -> None:
        if nbytes > self._bounds.tensor_bytes:
            raise UserError(
                f"{self._label}: {_shown(what)} holds {nbytes} bytes, over the limit of "
                f"{self._bounds.tensor_bytes} bytes a tensor ({MAX_TENSOR_BYTES_VARIABLE})"
            )

    def _constant(self, nbytes: int, what: str) -> None:
        self._bound(nbytes, what)
        self._constant_bytes += nbytes
        if self._constant_bytes > self._bounds.constant_bytes:
            raise UserError(
                f"{self._label}: its constants hold over {self._bounds.constant_bytes} bytes in "
                f"all, the limit ({MAX_PROGRAM_BYTES_VARIABLE}), with {_shown(what)}"
            )


def _inferred(model: onnx.ModelProto, inputs: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    """A copy of ``model`` with its inputs of the given shapes and the shapes ONNX's inference
    finds (not strict: a node it cannot infer keeps unknown outputs)."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in copy.graph.input:
        if value.name in inputs and value.type.HasField("tensor_type"):
            dims = value.type.tensor_type.shape.dim
            del dims[:]
            for size in inputs[value.name]:
                dims.add().dim_value = size
    try:
        return onnx.shape_inference.infer_shapes(
            copy, check_type=False, strict_mode=False, data_prop=True
        )
    except Exception:  # inference of a malformed graph; the constants are still bounded
        return copy


def _shapes(graph: onnx.GraphProto) -> dict[str, tuple[Dims | None, int]]:
    """Each named tensor's shape (None: not known) and element type, as declared or inferred, in
    the graph and its subgraphs."""
    shapes: dict[str, tuple[Dims | None, int]] = {}
    for tensor in graph.initializer:
        shapes[tensor.name] = (tuple(tensor.dims), tensor.data_type)
    for value in [*graph.input, *graph.value_info, *graph.output]:
        if not value.type.HasField("tensor_type"):
            continue
        tensor_type = value.type.tensor_type
        dims = (
            tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim)
            if tensor_type.HasField("shape")
            else None
        )
        shapes[value.name] = (dims, tensor_type.elem_type)
    for node in graph.node:
        for subgraph in _subgraphs(node):
            shapes.update(_shapes(subgraph))
    return shapes


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attribute in node.attribute:
        if attribute.HasField("g"):
            yield attribute.g
        yield from attribute.graphs


def _attribute_tensor_bytes(node: onnx.NodeProto) -> Iterator[int]:
    """The bytes of the tensors a node's attributes hold (a Constant's value among them)."""
    for attribute in node.attribute:
        tensors = [*attribute.tensors, *([attribute.t] if attribute.HasField("t") else [])]
        for tensor in tensors:
            yield _tensor_bytes(tensor.dims, tensor.data_type)
        sparse = [
            *attribute.sparse_tensors,
            *([attribute.sparse_tensor] if attribute.HasField("sparse_tensor") else []),
        ]
        for tensor in sparse:
            yield _tensor_bytes(tensor.dims, tensor.values.data_type)


def _output_bytes(
    node: onnx.NodeProto,
    position: int,
    shapes: Mapping[str, tuple[Dims | None, int]],
    values: Mapping[str, np.ndarray],
) -> int:
    """The bytes an output of ``node`` holds at least: its inferred shape's, or (the first
    output) what the constant shape input of a shape-making operator asks for; 0 if neither is
    known."""
    name = node.output[position]
    dims, elem_type = shapes.get(name, (None, 0))
    inferred = _tensor_bytes(dims, elem_type) if dims is not None and None not in dims else 0
    if position or node.op_type not in _MADE_ELEMENTS:
        return inferred
    elements = _MADE_ELEMENTS[node.op_type](_Operands(node, shapes, values))
    if not elements:
        return inferred
    return max(inferred, elements * _itemsize(elem_type or _made_type(node, shapes)))


class _Operands:
    """What is known of a node's inputs before the model runs: the values of small constants,
    the shapes inference found, and the node's attributes."""

    def __init__(
        self,
        node: onnx.NodeProto,
        shapes: Mapping[str, tuple[Dims | None, int]],
        values: Mapping[str, np.ndarray],
    ) -> None:
        self._node, self._shapes, self._values = node, shapes, values

    @property
    def count(self) -> int:
        return len(self._node.input)

    def value(self, position: int) -> list[float] | None:
        """The flattened value of input ``position``, where it is a finite constant read."""
        inputs = self._node.input
        if position >= len(inputs) or inputs[position] not in self._values:
            return None
        value = [float(x) for x in self._values[inputs[position]].ravel()]
        return value if all(math.isfinite(x) for x in value) else None

    def dims(self, position: int) -> Dims | None:
        inputs = self._node.input
        if position >= len(inputs):
            return None
        return self._shapes.get(inputs[position], (None, 0))[0]

    def elements(self, position: int) -> int:
        """The elements of input ``position``: 1 at least where its shape is not known."""
        dims = self.dims(position)
        return math.prod(d if d is not None else 1 for d in dims) if dims is not None else 1

    def attribute(self, name: str) -> list[float] | None:
        for attribute in self._node.attribute:
            if attribute.name == name:
                return [float(x) for x in attribute.ints]
        return None


def _positive_product(values: Sequence[float]) -> int:
    return math.prod(max(0, int(v)) for v in values)


def _constant_of_shape(operands: _Operands) -> int | None:
    shape = operands.value(0)
    return None if shape is None else _positive_product(shape)


def _expand(operands: _Operands) -> int | None:
    shape = operands.value(1)
    if shape is None:
        return None
    dims = list(operands.dims(0) or ())
    width = max(len(shape), len(dims))
    shape = [1.0] * (width - len(shape)) + shape
    dims = [1] * (width - len(dims)) + dims
    return _positive_product(
        [max(s, d if d is not None else 1) for s, d in zip(shape, dims, strict=True)]
    )


def _tile(operands: _Operands) -> int | None:
    repeats = operands.value(1)
    return None if repeats is None else _positive_product(repeats) * operands.elements(0)


def _range(operands: _Operands) -> int | None:
    start, limit, delta = (operands.value(i) for i in range(3))
    if not (start and limit and delta) or delta[0] == 0:
        return None
    return max(0, math.ceil((limit[0] - start[0]) / delta[0]))


def _reshape(operands: _Operands) -> int | None:
    shape = operands.value(1)
    if shape is None or any(s <= 0 for s in shape):  # -1 and 0 take the input's own sizes
        return None
    return _positive_product(shape)


def _resize(operands: _Operands) -> int | None:
    sizes = operands.value(3)
    if sizes:
        return _positive_product(sizes)
    scales = operands.value(1 if operands.count == 2 else 2)  # Upsample and Resize-10: X, scales
    if not scales:
        return None
    dims = operands.dims(0) or ()
    known = [d if d is not None else 1 for d in dims] if len(dims) == len(scales) else []
    if known:
        return _positive_product([math.floor(d * s) for d, s in zip(known, scales, strict=True)])
    return _positive_product([max(1, math.floor(s)) for s in scales])


def _pad(operands: _Operands) -> int | None:
    pads = operands.value(1) or operands.attribute("pads")
    if not pads:
        return None
    rank = len(pads) // 2
    dims = operands.dims(0) or ()
    known = list(dims) if len(dims) == rank else [None] * rank
    sizes = [
        (d + pads[i] + pads[i + rank]) if d is not None else max(1, pads[i] + pads[i + rank])
        for i, d in enumerate(known)
    ]
    return _positive_product(sizes)


def _one_hot(operands: _Operands) -> int | None:
    depth = operands.value(1)
    return None if not depth else _positive_product(depth[:1]) * operands.elements(0)


def _random(operands: _Operands) -> int | None:
    shape = operands.attribute("shape")
    return None if shape is None else _positive_product(shape)


_MADE_ELEMENTS = {
    "ConstantOfShape": _constant_of_shape,
    "Expand": _expand,
    "Tile": _tile,
    "Range": _range,
    "Reshape": _reshape,
    "Resize": _resize,
    "Upsample": _resize,
    "Pad": _pad,
    "OneHot": _one_hot,
    "RandomNormal": _random,
    "RandomUniform": _random,
}
"""The elements the first output of a shape-making operator holds at least, from its constant
inputs and the shapes known of the others (None: not known)."""


def _made_type(node: onnx.NodeProto, shapes: Mapping[str, tuple[Dims | None, int]]) -> int:
    """The element type of a shape-making node's output where inference left it out: its value
    attribute's, its dtype attribute's, or its first input's."""
    for attribute in node.attribute:
        if attribute.name == "value" and attribute.HasField("t"):
            return attribute.t.data_type
        if attribute.name == "dtype":
            return attribute.i
    if node.op_type == "ConstantOfShape":
        return 1  # FLOAT, the type of its default value
    return shapes.get(node.input[0], (None, 0))[1] if node.input else 0


def _tensor_bytes(dims: Sequence[int | None], data_type: int) -> int:
    return math.prod(max(0, d or 0) for d in dims) * _itemsize(data_type)


def _itemsize(data_type: int) -> int:
    """Bytes of an element of an ONNX type (1 for a type numpy does not know)."""
    from onnx import helper

    try:
        return max(1, np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).itemsize)
    except (KeyError, TypeError, ValueError):
        return 1


def _read(values: dict[str, np.ndarray], name: str, tensor: onnx.TensorProto) -> None:
    """Keep the value of a small constant, for the shapes it gives operators."""
    from onnx import numpy_helper

    if tensor.data_location == tensor.EXTERNAL:
        return
    if math.prod(max(0, d) for d in tensor.dims) > _READ_ELEMENTS:
        return
    try:
        value = numpy_helper.to_array(tensor)
    except Exception:  # a malformed tensor: its shape is not known, the importer refuses it
        return
    if value.dtype.kind in "iuf":
        values[name] = value


def _read_constant(values: dict[str, np.ndarray], node: onnx.NodeProto) -> None:
    """Keep the value of a Constant node's small output."""
    if not node.output:
        return
    for attribute in node.attribute:
        if attribute.name == "value" and attribute.HasField("t"):
            _read(values, node.output[0], attribute.t)
        elif attribute.name == "value_int":
            values[node.output[0]] = np.array(attribute.i)
        elif attribute.name == "value_ints" and len(attribute.ints) <= _READ_ELEMENTS:
            values[node.output[0]] = np.array(list(attribute.ints))
        elif attribute.name == "value_float":
            values[node.output[0]] = np.array(attribute.f)
        elif attribute.name == "value_floats" and len(attribute.floats) <= _READ_ELEMENTS:
            values[node.output[0]] = np.array(list(attribute.floats))


def _shown(text: str) -> str:
    """Names from the file, printable and short enough for one line."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return clean if len(clean) <= 120 else clean[:117] + "..."
