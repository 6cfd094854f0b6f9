"""Bounds on a program from outside. Before TVM reads its IR JSON (`check_graph`): how many nodes
it holds, how deep they nest and how many nodes it grows to written out as a tree, measured in
Python without recursion. Once TVM has loaded it (`check_accesses`): every buffer access, proven
within its buffer by TVM's arithmetic analyzer. ``autosched.admission`` runs both.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import tvm_ffi
from tvm import ir, s_tir, tirx
from tvm.sym import Analyzer

from autosched.errors import UserError

MAX_NODES = 1 << 16
"""The most nodes a program's IR JSON may hold. The built-in workloads and the kernels of the
model zoo's models hold at most 2,400."""

MAX_DEPTH = 256
"""The longest chain of references a program's IR JSON may hold, from its module down. TVM
reads, prints and lowers a program by recursion in C++, and an expression nested 2,000 deep
overflows its stack; the built-in workloads and the zoo's kernels nest at most 96 deep."""

MAX_EXPANDED_NODES = 1 << 18
"""The most nodes a program's IR JSON may grow to written out as a tree, a node that several
others share counted at each use, as TVM's printer (a workload's key hashes its text) and its
passes see it: 64 nodes, each adding the one before to itself, are 2^64 terms. Bounding the
whole bounds each of its expressions. The built-in workloads and the zoo's kernels grow to at
most 12,400."""

# Fields that TVM's JSON holds in the node itself (numbers, a dtype's name), by node type; every
# other field of an object node holds the index of another node.
_INLINE_FIELDS = {
    "ir.FloatImm": frozenset({"value"}),
    "ir.PrimType": frozenset({"dtype"}),
    "ir.Span": frozenset({"line", "column", "end_line", "end_column"}),
    "relax.FuncType": frozenset({"purity"}),
    "relax.ShapeType": frozenset({"ndim"}),
    "relax.TensorType": frozenset({"ndim"}),
    "tirx.BufferType": frozenset({"data_alignment", "offset_factor"}),
    "tirx.For": frozenset({"kind"}),
    "tirx.IterVar": frozenset({"iter_type"}),
}
# Node types that refer to no other node: plain values, and objects TVM finds by their name.
_LEAVES = frozenset(
    {"None", "bool", "int", "float", "ffi.String", "ffi.Shape", "ir.Op", "ir.SourceName"}
)
_SEQUENCES = frozenset({"ffi.Array", "ffi.Map"})


def node_references(nodes: Sequence[dict]) -> list[list[tuple[str, int]]]:
    """The nodes each of ``nodes`` (dicts of types the admission allows) refers to, as (field,
    index) pairs; the field of an element of an array or a map is ``""``.

    Raises:
        UserError: over `MAX_NODES` nodes, a node's data not of the form its type takes, or a
            reference to a node the graph does not hold.
    """
    if len(nodes) > MAX_NODES:
        raise UserError(
            f"the program's IR JSON holds {len(nodes)} nodes, over the limit of {MAX_NODES}"
        )
    graph = [_references(node) for node in nodes]
    for references in graph:
        for _, index in references:
            if type(index) is not int or not 0 <= index < len(nodes):
                raise UserError("a program's IR JSON refers to a node it does not hold")
    return graph


def _references(node: dict) -> list[tuple[str, Any]]:
    kind, data = node["type"], node.get("data")
    if kind in _LEAVES:
        return []
    if kind in _SEQUENCES:
        if not isinstance(data, list):
            raise UserError(f"a program's IR JSON holds a malformed {kind}")
        return [("", index) for index in data]
    if not isinstance(data, dict):
        raise UserError(f"a program's IR JSON holds a malformed {kind}")
    inline = _INLINE_FIELDS.get(kind, frozenset())
    return [(field, index) for field, index in data.items() if field not in inline]


def check_graph(graph: Sequence[Sequence[tuple[str, int]]], root: int) -> None:
    """Refuse the graph (each node's references, see `node_references`) from ``root`` when it
    refers to a node in a cycle, nests over `MAX_DEPTH` deep or grows over `MAX_EXPANDED_NODES`
    written out as a tree.

    Raises:
        UserError: the first bound it breaks, in one line.
    """
    depth = [0] * len(graph)  # 0 until measured
    size = [0] * len(graph)
    opened = bytearray(len(graph))
    stack = [root]
    while stack:
        index = stack[-1]
        if depth[index]:
            stack.pop()
            continue
        children = [child for _, child in graph[index]]
        if not opened[index]:
            opened[index] = 1
            for child in children:
                if opened[child] and not depth[child]:  # opened, not measured: on the path here
                    raise UserError("a program's IR JSON refers to itself in a cycle")
                if not depth[child]:
                    stack.append(child)
            continue
        stack.pop()
        depth[index] = 1 + max((depth[child] for child in children), default=0)
        size[index] = min(1 + sum(size[child] for child in children), MAX_EXPANDED_NODES + 1)
        if depth[index] > MAX_DEPTH:
            raise UserError(f"the program's IR JSON nests over the limit of {MAX_DEPTH} levels")
        if size[index] > MAX_EXPANDED_NODES:
            raise UserError(
                f"the program's IR JSON grows to over {MAX_EXPANDED_NODES} nodes written out "
                "as a tree"
            )


def check_accesses(func: tirx.PrimFunc) -> None:
    """Refuse ``func`` unless each of its buffer accesses is proven within its buffer for every
    value its loops and block iterators take, under the conditions that guard it (an ``if``, a
    block's predicate, ``if_then_else``; not ``Select``, which evaluates both of its values):
    loads, stores, and blocks' read and write regions. A region that is not proven within its
    buffer passes when it is the region TVM derives from the block's body itself (TVM's own
    padded blocks read a region that only their guarded loads keep within the buffer). Also
    each block iterator's value must be proven within the iterator's domain.

    Raises:
        UserError: an access not proven within its buffer (naming the buffer), in one line.
    """
    _Accesses(func).check()


_Guards = tuple[ir.Expr, ...]  # the conditions under which a statement or expression runs
_Item = tuple[Any, _Guards]


class _Accesses:
    """One walk over a function's statements and expressions, without recursion; each node is
    dispatched on its exact type (a program's nodes are of the types the admission allows)."""

    def __init__(self, func: tirx.PrimFunc) -> None:
        self._func = func
        self._analyzer = Analyzer()
        self._buffers = {param: param for param in func.params}  # for TVM's region detector
        self._visits = {
            ir.TensorLoad: self._load,
            ir.Call: self._call,
            tirx.Let: self._let,
            tirx.SeqStmt: lambda seq, guards: [(stmt, guards) for stmt in seq.seq],
            tirx.For: self._loop,
            tirx.IfThenElse: lambda branch, guards: _branches(
                branch.condition, branch.then_case, branch.else_case, guards
            ),
            tirx.BufferStore: self._store,
            tirx.AllocBuffer: self._allocation,
            s_tir.SBlockRealize: self._realize,
            s_tir.SBlock: self._block,
        }

    def check(self) -> None:
        stack: list[_Item] = [(self._func.body, ())]
        while stack:
            node, guards = stack.pop()
            operands = _OPERANDS.get(type(node))
            if operands is not None:
                stack.extend((getattr(node, name), guards) for name in operands)
                continue
            visit = self._visits.get(type(node))
            if visit is not None:  # else a variable or a constant
                stack.extend(visit(node, guards))

    def _load(self, load: ir.TensorLoad, guards: _Guards) -> list[_Item]:
        self._check_access(load.source, load.indices, guards)
        return [(index, guards) for index in load.indices]

    def _call(self, call: ir.Call, guards: _Guards) -> list[_Item]:
        if call.op.name == "prim.if_then_else":
            return _branches(*call.args, guards)
        return [(arg, guards) for arg in call.args]

    def _let(self, let: tirx.Let, guards: _Guards) -> list[_Item]:
        # its bounds, not its value: binding a value simplifies it, slow on long chains
        self._analyzer.update(let.var, self._analyzer.const_int_bound(let.value))
        return [(let.value, guards), (let.body, guards)]

    def _loop(self, loop: tirx.For, guards: _Guards) -> list[_Item]:
        if loop.step is not None:
            raise UserError("a program's loops may not take a step")
        self._analyzer.bind(loop.loop_var, ir.Range.from_min_extent(loop.min, loop.extent))
        return [(loop.min, guards), (loop.extent, guards), (loop.body, guards)]

    def _store(self, store: tirx.BufferStore, guards: _Guards) -> list[_Item]:
        self._check_access(store.buffer, store.indices, guards)
        return [(store.value, guards), *((index, guards) for index in store.indices)]

    def _allocation(self, allocation: tirx.AllocBuffer, guards: _Guards) -> list[_Item]:
        self._buffers[allocation.buffer] = allocation.buffer
        return []

    def _realize(self, realize: s_tir.SBlockRealize, guards: _Guards) -> list[_Item]:
        """Each iterator's value within its domain (where the predicate holds), the iterator
        bound to its domain; the block is guarded by the predicate."""
        block = realize.block
        if len(block.iter_vars) != len(realize.iter_values):
            raise UserError(
                f"block {block.name_hint} of a program has {len(block.iter_vars)} iterators and "
                f"{len(realize.iter_values)} values"
            )
        inner = (*guards, realize.predicate)
        with self._under(inner):
            for iterator, value in zip(block.iter_vars, realize.iter_values, strict=True):
                low, extent = iterator.dom.min, iterator.dom.extent
                if not self._within(value, low, low + extent):
                    raise UserError(
                        f"the value {value} of iterator {iterator.var.name} of block "
                        f"{block.name_hint} is not proven within its domain"
                    )
        for iterator in block.iter_vars:
            self._analyzer.bind(iterator.var, iterator.dom)
        values = [(value, guards) for value in realize.iter_values]
        return [(realize.predicate, guards), *values, (block, inner)]

    def _block(self, block: s_tir.SBlock, guards: _Guards) -> list[_Item]:
        for buffer in block.alloc_buffers:
            self._buffers[buffer] = buffer
        for region in (*block.reads, *block.writes):
            self._check_region(block, region, guards)
        body = [(block.body, guards)]
        return body if block.init is None else [*body, (block.init, guards)]

    def _check_access(self, buffer: ir.Var, indices: Sequence[ir.Expr], guards: _Guards) -> None:
        shape = _shape(buffer)
        if len(indices) != len(shape):
            raise UserError(
                f"a program indexes buffer {buffer.name} of {len(shape)} dimensions with "
                f"{len(indices)} indices"
            )
        with self._under(guards):
            for index, extent in zip(indices, shape, strict=True):
                if index.ty.dtype.lanes != 1:
                    raise UserError(f"a program indexes buffer {buffer.name} with a vector")
                if not self._within(index, 0, extent):
                    raise UserError(
                        f"a program's access {buffer.name}[{', '.join(map(str, indices))}] is "
                        f"not proven within buffer {buffer.name} of shape {tuple(shape)}"
                    )

    def _check_region(self, block: s_tir.SBlock, region: ir.TensorRegion, guards: _Guards) -> None:
        buffer = region.source
        shape = _shape(buffer)
        if len(region.region) != len(shape):
            raise UserError(
                f"block {block.name_hint} of a program has a region of buffer {buffer.name} of "
                f"{len(region.region)} dimensions; the buffer has {len(shape)}"
            )
        with self._under(guards):
            proven = all(
                self._within(span.extent, 0, extent + 1)
                and self._within(span.min, 0, extent - span.extent + 1)
                for span, extent in zip(region.region, shape, strict=True)
            )
        if proven:
            return
        derived = s_tir.analysis.get_sblock_read_write_region(block, self._buffers)
        if not any(tvm_ffi.structural_equal(region, own) for regions in derived for own in regions):
            raise UserError(
                f"block {block.name_hint} of a program has a region of buffer {buffer.name} "
                "that is not proven within it"
            )

    def _within(self, expr: ir.Expr, low: ir.Expr | int, high: ir.Expr | int) -> bool:
        """Whether ``low <= expr < high`` is proven: by the bounds of ``expr`` where both ends
        are constants, else by TVM's proof."""
        low, high = _constant(low), _constant(high)
        if isinstance(low, int) and isinstance(high, int):
            bound = self._analyzer.const_int_bound(expr)
            if low <= bound.min_value and bound.max_value < high:
                return True
        return bool(self._analyzer.can_prove(expr >= low) and self._analyzer.can_prove(expr < high))

    @contextmanager
    def _under(self, guards: _Guards) -> Iterator[None]:
        with ExitStack() as scopes:
            for guard in guards:
                scopes.enter_context(self._analyzer.constraint_scope(guard))
            yield


def _branches(condition: ir.Expr, then: Any, otherwise: Any, guards: _Guards) -> list[_Item]:
    """The condition, and each branch guarded by the condition or its negation."""
    items = [(condition, guards), (then, (*guards, condition))]
    if otherwise is not None:
        items.append((otherwise, (*guards, tirx.Not(condition))))
    return items


_BINARY = (
    tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod, tirx.Min,
    tirx.Max, tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.And, tirx.Or,
    tirx.BitwiseAnd, tirx.BitwiseOr, tirx.BitwiseXor, tirx.LShift, tirx.RShift,
)  # fmt: skip
_OPERANDS: dict[type, tuple[str, ...]] = {
    **dict.fromkeys(_BINARY, ("a", "b")),
    tirx.Not: ("a",),
    tirx.BitwiseNot: ("a",),
    tirx.Cast: ("value",),
    tirx.Broadcast: ("value",),
    tirx.Ramp: ("base", "stride"),
    tirx.Select: ("condition", "true_value", "false_value"),
}
"""The operands of the expressions that guard none of them, by type."""


def _constant(expr: ir.Expr | int) -> ir.Expr | int:
    """An integer constant as a Python int; any other expression as it is."""
    return int(expr.value) if isinstance(expr, tirx.IntImm) else expr


def _shape(buffer: ir.Var) -> list[int]:
    """The static shape of a buffer (the admission refuses any other)."""
    if type(buffer.ty) is not tirx.BufferType:
        raise UserError(f"a program accesses {buffer.name}, which is not a buffer")
    return [int(extent) for extent in buffer.shape]
