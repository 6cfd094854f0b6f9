"""Parallel matmuls combined: linear layers that read the same input, as one matmul.

A transformer's query, key and value projections are three matmuls of the same tokens by three
constant weights, each with its bias. Computed as one matmul by the weights concatenated along
their outputs, with the biases concatenated too, the input is read once and the kernel has three
times the columns to spread over the cores; each projection is then a slice of the result, which
fuses into the reshape and transpose that split it into heads. ONNX Runtime's attention fusion
does the same. TVM's ``CombineParallelMatmul`` combines matmuls whose weights are function
parameters; here the weights are constants, bound when the model is imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax

from autosched.model.relax_ir import each_function, static_shape


@dataclass(frozen=True)
class _Branch:
    """One linear layer of a group: its matmul's binding, the binding of its bias add (None
    without a bias), its constant weight of ``shape`` (K, N) and its constant bias (N,)."""

    matmul: relax.Var
    added: relax.Var | None
    weight: relax.Expr
    shape: tuple[int, ...]
    bias: relax.Expr | None

    @property
    def result(self) -> relax.Var:
        return self.added if self.added is not None else self.matmul


@tvm.transform.module_pass(opt_level=0, name="ParallelMatmulsCombined")
def parallel_matmuls_combined(
    mod: tvm.IRModule, _context: tvm.transform.PassContext
) -> tvm.IRModule:
    """Every group of two or more ``matmul(x, W_i) [+ b_i]`` in one dataflow block with the same
    ``x``, constant 2-d weights of one dtype and as many rows, and either all or none with a
    constant bias of shape ``(N_i,)``, as one ``matmul(x, concat(W_i)) [+ concat(b_i)]`` whose
    column slices replace the layers' results. A matmul that something else reads besides its
    bias add joins the group without its bias (the add then reads its columns); one bound to a
    variable that outlives the block is left as it is.
    """
    return each_function(mod, _combined)


def _combined(func: relax.Function) -> relax.Function:
    """`parallel_matmuls_combined` on one function."""
    groups = [group for block in _dataflow_blocks(func) for group in _groups(block)]
    if not groups:
        return func
    return _Combiner(groups).visit_expr(func)


def _dataflow_blocks(func: relax.Function) -> list[relax.DataflowBlock]:
    if not isinstance(func.body, relax.SeqExpr):
        return []
    return [block for block in func.body.blocks if isinstance(block, relax.DataflowBlock)]


def _groups(block: relax.DataflowBlock) -> list[list[_Branch]]:
    """The branches of ``block`` that combine, grouped by their input, weight rows, dtype and
    whether they add a bias; only groups of two or more."""
    users = relax.analysis.udchain(block)
    values = {binding.var: binding.value for binding in block.bindings}
    groups: dict[tuple, list[_Branch]] = {}
    for binding in block.bindings:
        branch = _branch(binding, users, values)
        if branch is None:
            continue
        x = binding.value.args[0]
        key = (x, branch.shape[0], str(branch.weight.ty.dtype), branch.bias is None)
        groups.setdefault(key, []).append(branch)
    return [group for group in groups.values() if len(group) > 1]


def _branch(
    binding: relax.Binding,
    users: dict[relax.Var, Sequence[relax.Var]],
    values: dict[relax.Var, relax.Expr],
) -> _Branch | None:
    """The linear layer whose matmul ``binding`` binds, when it may join a group."""
    value = binding.value
    if not (
        isinstance(binding, relax.VarBinding)
        and isinstance(binding.var, relax.DataflowVar)
        and _is_call(value, "relax.matmul")
    ):
        return None
    x, weight = value.args
    if not isinstance(x, relax.Var) or not isinstance(weight, tvm.ir.expr.Constant):
        return None
    shape, x_shape = static_shape(weight), static_shape(x)
    if None in (shape, x_shape) or len(shape) != 2 or len(x_shape) < 2 or x_shape[-1] != shape[0]:
        return None
    dtype = str(weight.ty.dtype)
    out_dtype = value.attrs.out_dtype
    if out_dtype is not None and str(out_dtype) not in ("", "void", dtype):
        return None
    used_by = list(users.get(binding.var, []))
    if len(used_by) == 1 and isinstance(used_by[0], relax.DataflowVar):
        bias = _bias(values.get(used_by[0]), binding.var, (shape[1],), dtype)
        if bias is not None:
            return _Branch(binding.var, used_by[0], weight, shape, bias)
    return _Branch(binding.var, None, weight, shape, None)


def _bias(
    value: relax.Expr | None, product: relax.Var, shape: tuple[int, ...], dtype: str
) -> relax.Expr | None:
    """The constant bias of ``shape`` and ``dtype`` when ``value`` adds one to ``product``."""
    if not _is_call(value, "relax.add"):
        return None
    left, right = value.args
    addend = right if left.same_as(product) else left if right.same_as(product) else None
    if not isinstance(addend, tvm.ir.expr.Constant):
        return None
    if static_shape(addend) != shape or str(addend.ty.dtype) != dtype:
        return None
    return addend


def _is_call(value: relax.Expr | None, op: str) -> bool:
    return isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == op


@relax.expr_functor.mutator
class _Combiner(relax.PyExprMutator):
    """Emits each group's combined matmul where its first branch's matmul was bound, and each
    branch's result as its columns of it."""

    def __init__(self, groups: Sequence[Sequence[_Branch]]) -> None:
        super().__init__()
        self.leaders = {group[0].matmul: group for group in groups}
        self.columns: dict[relax.Var, tuple[relax.Var, int, int]] = {}  # result: leader, from, to
        self.dropped = {
            branch.matmul for group in groups for branch in group if branch.added is not None
        }
        for group in groups:
            offset = 0
            for branch in group:
                width = branch.shape[1]
                self.columns[branch.result] = (group[0].matmul, offset, offset + width)
                offset += width
        self.combined: dict[relax.Var, relax.Var] = {}  # leader: the combined matmul

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        var = binding.var
        group = self.leaders.get(var)
        if group is not None:
            x = self.visit_expr(binding.value.args[0])
            weights = np.concatenate([branch.weight.value.numpy() for branch in group], axis=1)
            product = relax.op.matmul(x, relax.const(weights), binding.value.attrs.out_dtype)
            if group[0].bias is not None:
                biases = np.concatenate([branch.bias.value.numpy() for branch in group])
                product = relax.op.add(product, relax.const(biases))
            self.combined[var] = self.builder_.emit(product, f"{var.name}_combined")
        if var in self.columns:
            leader, begin, end = self.columns[var]
            combined = self.combined[leader]
            axis = len(static_shape(combined)) - 1
            part = relax.op.strided_slice(combined, axes=[axis], begin=[begin], end=[end])
            self.set_var_remap(var, self.builder_.emit(part, var.name))
        elif var not in self.dropped:
            super().visit_var_binding_(binding)
