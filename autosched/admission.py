"""Admission of tensor programs from outside (a request, a stored log, a lease): data-only IR JSON,
checked node by node before TVM loads it. TVMScript is never accepted from outside: TVM's parser
evaluates its expressions as Python.

A program is admitted when its JSON graph holds only the node types of a TIR function, calls only
pure math intrinsics (nothing that leaves the kernel: no ``call_extern``, ``call_packed``, LLVM
intrinsics or calls of other functions), has no attribute statements, declares its buffers with
static shapes and no strides, offsets or views of other buffers, and its buffers hold at most
``max_bytes`` in all. Its nodes carry no attributes or annotations but these: of function
attributes its name, the no-alias and schedulable-TIR marks, ``layout_free_buffers`` (the
positions of parameters that are constant weights, which a schedule may store in a layout of its
own), each position one of its parameters, and the flag ``autosched.cold_cache`` (its candidates
are timed with the CPU caches flushed, as a model's kernel runs); of block annotations
``schedule_rule`` "None" (MetaSchedule's rules keep off such a block) and the mark of a weight
transform (`autosched.weights`); no loop annotations. Its graph is within the bounds of
`autosched.bounds` (nodes, depth, size written out), and once loaded each of its buffer accesses
is proven within its buffer.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import tvm

from autosched.bounds import check_accesses, check_graph, node_references
from autosched.errors import UserError
from autosched.weights import WEIGHT_TRANSFORM

MAX_PROGRAM_BYTES_VARIABLE = "AUTOSCHED_MAX_PROGRAM_BYTES"
DEFAULT_MAX_PROGRAM_BYTES = 4 << 30
MAX_JSON_CHARS = 8 << 20

NODE_TYPES = frozenset(
    {
        "None", "bool", "int", "float", "ffi.Array", "ffi.Map", "ffi.String", "ffi.Shape",
        "ir.IRModule", "ir.GlobalVar", "ir.DictAttrs", "ir.SourceMap", "ir.SourceName", "ir.Span",
        "ir.Type", "ir.PrimType", "ir.TupleType", "ir.PointerType", "ir.Range", "ir.Var",
        "ir.IntImm", "ir.FloatImm", "ir.Op", "ir.Call", "ir.TensorLoad", "ir.TensorRegion",
        "relax.FuncType", "relax.ShapeType", "relax.TensorType", "relax.expr.ShapeExpr",
        "tirx.PrimFunc", "tirx.BufferType", "tirx.BufferRegionType", "tirx.IterVar",
        "tirx.For", "tirx.SeqStmt", "tirx.BufferStore", "tirx.AllocBuffer", "tirx.IfThenElse",
        "s_tir.SBlock", "s_tir.SBlockRealize",
        "prim.Add", "prim.Sub", "prim.Mul", "prim.Div", "prim.Mod", "prim.FloorDiv",
        "prim.FloorMod", "prim.Min", "prim.Max", "prim.EQ", "prim.NE", "prim.LT", "prim.LE",
        "prim.GT", "prim.GE", "prim.And", "prim.Or", "prim.Not", "prim.Select", "prim.Cast",
        "prim.Let", "prim.BitwiseAnd", "prim.BitwiseOr", "prim.BitwiseXor", "prim.BitwiseNot",
        "prim.LShift", "prim.RShift", "prim.Broadcast", "prim.Ramp",
    }
)  # fmt: skip
"""The node types of a TIR function in TVM's JSON graph: its module, statements, expressions,
buffers, types and the plain data they hold. Anything else (an attribute statement, a while loop,
an allocation of raw memory, a buffer declared over another's memory, a runtime object) is
refused."""

PURE_MATH_OPS = frozenset(
    {
        "tirx.exp", "tirx.exp2", "tirx.exp10", "tirx.log", "prim.log2", "tirx.log10",
        "tirx.log1p", "tirx.sqrt", "tirx.rsqrt", "tirx.sin", "tirx.cos", "tirx.tan", "tirx.sinh",
        "tirx.cosh", "tirx.tanh", "tirx.asin", "tirx.acos", "tirx.atan", "tirx.atan2",
        "tirx.asinh", "tirx.acosh", "tirx.atanh", "tirx.erf", "tirx.sigmoid", "tirx.fabs",
        "tirx.floor", "prim.ceil", "tirx.round", "tirx.nearbyint", "tirx.trunc", "tirx.pow",
        "tirx.fmod", "tirx.isnan", "tirx.isinf", "tirx.isfinite", "tirx.reinterpret",
        "tirx.popcount", "prim.clz", "tirx.copysign", "tirx.hypot", "tirx.ldexp",
        "tirx.nextafter", "prim.if_then_else", "prim.likely", "tirx.q_multiply_shift",
    }
)  # fmt: skip
"""The intrinsics a program may call: pure functions of their arguments."""

# "s_tir" marks a function as schedulable TIR, as TE and TVMScript make them.
_LAYOUT_FREE = "layout_free_buffers"
COLD_CACHE = "autosched.cold_cache"
"""A function attribute: time the program's candidates with the CPU caches flushed before each
call (inputs other than the first), as it runs between the other kernels of a model, its weights
coming from memory; the flag is part of the program, so its key and records are its own."""
FUNCTION_ATTRS = frozenset(
    {"global_symbol", "tirx.noalias", "tir.noalias", "s_tir", _LAYOUT_FREE, COLD_CACHE}
)
"""The function attributes a program may carry."""
_SCHEDULE_RULE = "schedule_rule"
_BLOCK_ANNOTATIONS = frozenset({_SCHEDULE_RULE, WEIGHT_TRANSFORM})
"""The block annotations a program may carry (``schedule_rule`` with the value "None" only, the
mark of a weight transform with the value 1 only)."""
LOOP_ANNOTATIONS: frozenset[str] = frozenset()
"""The loop annotations a program may carry: none. MetaSchedule's schedules annotate loops
(``pragma_auto_unroll_max_step``, ``pragma_unroll_explicit``, ``meta_schedule.cooperative_fetch``,
``software_pipeline_stage``) as their traces are applied to the admitted program; a program as
submitted has no use for them, and TVM's lowering acts on others (``pragma_import_llvm`` links
the LLVM IR it holds into the kernel)."""
_ATTRIBUTES = {
    ("tirx.PrimFunc", "attrs"): (FUNCTION_ATTRS, "function attribute"),
    ("s_tir.SBlock", "annotations"): (_BLOCK_ANNOTATIONS, "block annotation"),
    ("tirx.For", "annotations"): (LOOP_ANNOTATIONS, "loop annotation"),
    ("tirx.AllocBuffer", "annotations"): (frozenset(), "allocation annotation"),
    ("ir.Call", "attrs"): (frozenset(), "call attribute"),
    ("ir.IRModule", "attrs"): (frozenset(), "module attribute"),
    ("ir.IRModule", "global_infos"): (frozenset(), "module global info"),
    ("ir.SourceMap", "source_map"): (frozenset(), "source file"),
}
"""Where a node holds attributes (a map, or TVM's DictAttrs around one), the names allowed there
and what they are called."""
# Maps that hold a module's content, not attributes: TVM's own types check their entries.
_CONTENT_MAPS = frozenset(
    {("ir.IRModule", "functions"), ("ir.IRModule", "global_var_map_"), ("ir.DictAttrs", "__dict__")}
)
_MAP_TYPES = frozenset({"ffi.Map", "ir.DictAttrs"})


def max_program_bytes() -> int:
    """The buffer bytes a program may hold here: ``$AUTOSCHED_MAX_PROGRAM_BYTES``, else 4 GiB."""
    value = os.environ.get(MAX_PROGRAM_BYTES_VARIABLE, "").strip()
    if not value:
        return DEFAULT_MAX_PROGRAM_BYTES
    try:
        limit = int(value)
    except ValueError:
        raise UserError(f"{MAX_PROGRAM_BYTES_VARIABLE} must be a number, not {value!r}") from None
    if limit < 1:
        raise UserError(f"{MAX_PROGRAM_BYTES_VARIABLE} must be positive, not {limit}")
    return limit


def program_json(func: tvm.tirx.PrimFunc) -> str:
    """The data-only form of ``func`` (TVM's IR JSON of a module holding it as ``main``)."""
    return tvm.ir.save_json(tvm.IRModule({"main": func}))


def admit_program(text: str, *, max_bytes: int | None = None) -> tvm.tirx.PrimFunc:
    """The one PrimFunc of the IR JSON ``text``, once the checks of this module pass.

    Args:
        text: TVM's IR JSON of an IRModule holding one PrimFunc (see `program_json`).
        max_bytes: the most its buffers may hold in all (default: `max_program_bytes`).

    Raises:
        UserError: the text is not such JSON, or the program breaks a check; the message says
            which, in one line.
    """
    limit = max_program_bytes() if max_bytes is None else max_bytes
    if len(text) > MAX_JSON_CHARS:
        raise UserError(f"the program's IR JSON is over {MAX_JSON_CHARS} characters")
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise UserError(
            "a program must be TVM IR JSON (tvm.ir.save_json); autosched converts TVMScript "
            "files on the machine that holds them, and never parses TVMScript from elsewhere"
        ) from None
    _Graph(document).check(limit)
    try:
        module = tvm.ir.load_json(text)
    except Exception as error:  # TVM raises its own error types
        raise UserError(f"TVM cannot load the program's IR JSON: {_reason(error)}") from None
    functions = list(module.functions_items()) if isinstance(module, tvm.IRModule) else []
    if len(functions) != 1 or not isinstance(functions[0][1], tvm.tirx.PrimFunc):
        raise UserError("a program's IR JSON must hold a module of exactly one PrimFunc")
    func = functions[0][1]
    try:
        check_accesses(func)
    except UserError:
        raise
    except Exception as error:  # the analyzer refuses a malformed program in TVM's error types
        raise UserError(f"TVM cannot analyze the program: {_reason(error)}") from None
    return func


def _reason(error: Exception) -> str:
    return " ".join(str(error).split())[:200]


class _Graph:
    """TVM's JSON graph of a module: nodes that refer to each other by index."""

    def __init__(self, document: Any) -> None:
        if not isinstance(document, dict) or not isinstance(document.get("nodes"), list):
            raise UserError("a program's IR JSON must be an object with a list of nodes")
        self._nodes: list[Any] = document["nodes"]
        self._root = document.get("root_index")

    def check(self, max_bytes: int) -> None:
        if self._type(self._root) != "ir.IRModule":
            raise UserError("a program's IR JSON must hold an IRModule")
        kinds = [self._type(index) for index in range(len(self._nodes))]
        for kind in kinds:
            if kind not in NODE_TYPES:
                raise UserError(f"a program may not hold a {kind} node")
        graph = node_references(self._nodes)
        total = 0
        for index, kind in enumerate(kinds):
            data = self._nodes[index].get("data")
            if kind == "ir.Op" and data not in PURE_MATH_OPS:
                raise UserError(f"a program may call pure math intrinsics only, not {data}")
            if kind == "ir.Call" and self._type(self._field(data, "op")) != "ir.Op":
                raise UserError("a program may not call other functions")
            for field, child in graph[index]:
                if kinds[child] in _MAP_TYPES:
                    self._check_attributes(kind, data, field, child)
            if kind == "tirx.BufferType":
                self._check_plain_buffer(data)
                total += self._buffer_bytes(data)
        if total > max_bytes:
            raise UserError(
                f"the program's buffers hold {total} bytes, over this service's limit of "
                f"{max_bytes} ({MAX_PROGRAM_BYTES_VARIABLE})"
            )
        check_graph(graph, self._root)

    def _type(self, index: Any) -> str:
        if type(index) is not int or not 0 <= index < len(self._nodes):
            raise UserError("a program's IR JSON refers to a node it does not hold")
        node = self._nodes[index]
        if not isinstance(node, dict) or not isinstance(node.get("type"), str):
            raise UserError("a program's IR JSON holds a node without a type")
        return node["type"]

    def _data(self, index: Any, kind: str) -> Any:
        if self._type(index) != kind:
            raise UserError(f"a program's IR JSON holds a malformed {kind}")
        return self._nodes[index].get("data")

    def _field(self, data: Any, name: str) -> Any:
        if not isinstance(data, dict) or name not in data:
            raise UserError(f"a program's IR JSON holds a node without its {name}")
        return data[name]

    def _check_attributes(self, kind: str, data: Any, field: str, index: int) -> None:
        """A map held where a node of ``kind`` holds attributes (of the names allowed there) or
        a module's content; nowhere else."""
        if (kind, field) in _CONTENT_MAPS:
            return
        if (kind, field) not in _ATTRIBUTES:
            raise UserError(f"a program's {kind} may not hold a map as its {field or 'element'}")
        allowed, what = _ATTRIBUTES[kind, field]
        entries = self._check_keys(index, allowed, what)
        if kind == "tirx.PrimFunc":
            self._check_function_attrs(data, entries)
        if kind == "s_tir.SBlock":
            self._check_block_annotations(entries)

    def _check_function_attrs(self, data: Any, entries: list[tuple[str, Any]]) -> None:
        params = self._data(self._field(data, "params"), "ffi.Array")
        if not isinstance(params, list):
            raise UserError("a program's IR JSON holds a malformed parameter list")
        for key, value in entries:
            if key == _LAYOUT_FREE:
                self._check_positions(value, len(params))
            if key == COLD_CACHE and self._type(value) != "bool":
                raise UserError(f"a program's {COLD_CACHE} must be true or false")

    def _check_block_annotations(self, entries: list[tuple[str, Any]]) -> None:
        """A block may carry ``schedule_rule`` "None", which keeps MetaSchedule's rules off it
        (any other rule name would have MetaSchedule call the function registered under it), and
        the mark of a weight transform, 1."""
        for key, value in entries:
            if key == _SCHEDULE_RULE and (
                self._type(value) != "ffi.String" or self._data(value, "ffi.String") != "None"
            ):
                raise UserError(f'a program\'s block may carry {_SCHEDULE_RULE} "None" only')
            if key == WEIGHT_TRANSFORM and (
                self._type(value) != "int" or self._nodes[value].get("data") != 1
            ):
                raise UserError(f"a program's block may carry {WEIGHT_TRANSFORM} 1 only")

    def _check_positions(self, index: Any, num_params: int) -> None:
        """``layout_free_buffers`` must list positions of the function's parameters."""
        positions = self._data(index, "ffi.Array")
        if not isinstance(positions, list):
            raise UserError(f"a program's {_LAYOUT_FREE} must be a list of parameter positions")
        for position in positions:
            value = self._nodes[position].get("data") if self._type(position) == "int" else None
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < num_params:
                raise UserError(
                    f"a program's {_LAYOUT_FREE} must name positions of its {num_params} "
                    f"parameters, not {value!r}"
                )

    def _check_keys(self, index: Any, allowed: frozenset[str], what: str) -> list[tuple[str, Any]]:
        """The entries of a map of attributes (name, value node), once every name is allowed."""
        if self._type(index) == "ir.DictAttrs":
            index = self._field(self._data(index, "ir.DictAttrs"), "__dict__")
        entries = self._data(index, "ffi.Map")
        if not isinstance(entries, list) or len(entries) % 2:
            raise UserError("a program's IR JSON holds a malformed map")
        named = []
        for key, value in zip(entries[0::2], entries[1::2], strict=True):
            name = self._nodes[key].get("data") if self._type(key) == "ffi.String" else None
            if name not in allowed:
                raise UserError(f"a program may not carry the {what} {name!r}")
            named.append((name, value))
        return named

    def _check_plain_buffer(self, data: Any) -> None:
        """A buffer is its shape alone: no strides, no offset into its memory, no memory of
        another's (its accesses are proven within the shape)."""
        offset = self._data(self._field(data, "elem_offset"), "ir.IntImm")
        plain = (
            self._data(self._field(data, "strides"), "ffi.Array") == []
            and self._nodes[self._field(offset, "value")].get("data") == 0
            and self._data(self._field(data, "allocated_addr"), "ffi.Array") == []
            and self._type(self._field(data, "layout")) == "None"
        )
        if not plain:
            raise UserError("a buffer of a program may not have strides, an offset or a layout")

    def _buffer_bytes(self, data: Any) -> int:
        dims = self._data(self._field(data, "shape"), "ffi.Array")
        if not isinstance(dims, list):
            raise UserError("a program's IR JSON holds a malformed buffer shape")
        extents = []
        for dim in dims:
            if self._type(dim) != "ir.IntImm":
                raise UserError("every buffer of a program needs a static shape")
            value = self._data(self._field(self._data(dim, "ir.IntImm"), "value"), "int")
            if not isinstance(value, int) or value < 0:
                raise UserError("a buffer of a program has a negative or malformed extent")
            extents.append(value)
        dtype = self._field(self._data(self._field(data, "dtype"), "ir.PrimType"), "dtype")
        try:
            element = tvm.DataType(str(dtype))
        except Exception:  # TVM refuses the name with its own error type
            raise UserError(f"a buffer of a program has an unknown dtype {dtype!r}") from None
        return math.prod(extents) * max(1, element.bits * element.lanes // 8)
