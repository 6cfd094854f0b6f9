"""Attention as one kernel: ``softmax(Q K^T * scale + mask) V``, written by the model as a matmul,
its scaling, the mask added, a softmax and a second matmul (with the reshapes, transposes and
slices that split the heads out of the projections around it), becomes one call of one TIR
kernel that MetaSchedule tunes like any other.

`attention_kernels` finds each such chain in a model's Relax functions. The layout operators
that lead from a tensor to the query, the keys and the values (``strided_slice``, ``split``,
``take`` of one constant index, ``reshape``, ``permute_dims``, ``expand_dims``, ``squeeze``,
``broadcast_to``) become index
arithmetic of the kernel's reads, so it reads the projections where they lie (the combined
query, key and value projection of ``autosched.model.parallel``, a grouped query attention's
keys broadcast over the heads) and the copies that each of those operators made are gone; a
multiplication by a constant number on the way (the query and the keys each scaled by
``D ** -0.25``) joins the scores' scale. A transpose after the second matmul (the heads merged
back) becomes the layout the kernel writes; the reshape after it is then a view.

The kernel's stages are blocks MetaSchedule's rules understand: the keys copied transposed (in a
projection's output a key's depth lies together and the next key a row further, 2,304 floats in
ViT-B/16's; copied once, as every query reads every key, they lie next to each other), the copy
padded to a multiple of `VECTOR_LANES` keys with the last key again (a transpose: MetaSchedule's
inlining leaves it where it is); the scores (a batch matmul its multi-level tiling tiles, vectors
along the keys; the padding's scores are computed and never read); each row's maximum (a reduction);
each score's exponential less the row's maximum, computed once; their sum over the row; the weighted
sum of the values by those exponentials (tiled); and the result, that sum divided by the row's (an
epilogue): the softmax's normalisation is applied to the ``width`` results of a row, not to its
``keys`` weights. The scores and their exponentials stay scratch buffers of the kernel (TVM compacts
each to what one iteration of the loops it is computed under touches): MetaSchedule never moves a
tiled block under another's loops. Exponentials take TVM's fast float32 form (``topi.fast_exp``, as
``FastMathTransform`` gives the rest of the model); one below float32's range is zero, as the exact
softmax's is, a select that also keeps MetaSchedule's inlining from moving the exponentials into
their two readers, where each would be computed again. PyTorch's guard after the softmax,
``where(isnan(p), 0, p)`` (a row all masked out weighs nothing), is computed on each row's sum: a
NaN weight makes its whole row's weights NaN.

Nothing else is matched: every intermediate result of the chain must be used by the next step
alone, the operands float32 tensors of static shape, the softmax over the last axis.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import tvm
from tvm import relax, te, tirx
from tvm.sym import Analyzer

from autosched.model.relax_ir import constant_number, static_shape

Index = Callable[[Sequence[tirx.Expr]], list[tirx.Expr]]
"""Maps an index of a tensor to the index of the tensor it was computed from."""

Guard = Literal["nan", "rows"] | None
"""Which softmax weights PyTorch's export sets to zero after the softmax: those that are NaN
(``where(isnan(p), 0, p)``, ONNX exports), those of rows all masked out (torch.export's
``_safe_softmax``), or none."""

_OPAQUE = 8  # relax's op pattern kOpaque: FuseOps leaves the kernel as it is

VECTOR_LANES = 16
"""The scores of a row are computed for a multiple of this many keys (float32 lanes of a 512-bit
vector, a multiple of narrower vectors'), so that their loop splits into whole vectors whatever
the keys' count (ViT-B/16's 197 is a prime)."""

_EXP_HIGH, _EXP_LOW = 88.3762626647950, -88.3762626647949
"""The inputs ``topi.fast_exp`` clamps to: beyond them float32's exponential overflows, or
underflows to zero."""

_FAST_EXP_POLYNOMIAL = (
    1.9875691500e-4,
    1.3981999507e-3,
    8.3334519073e-3,
    4.1665795894e-2,
    1.6666665459e-1,
    5.0000001201e-1,
)
"""``topi.fast_exp``'s polynomial of ``exp(f)`` on the remainder ``|f| <= ln(2) / 2``, highest
power first (its terms ``f^2``, ``f`` and 1 follow)."""

_LAYOUT_OPS = frozenset(
    {
        "relax.permute_dims",
        "relax.reshape",
        "relax.expand_dims",
        "relax.squeeze",
        "relax.broadcast_to",
        "relax.strided_slice",
    }
)


@dataclass(frozen=True)
class Access:
    """How an operand of the attention is read: ``source[index(i)] * scale`` for its index
    ``i``, ``source`` a tensor the model computed (or a constant) through layout operators."""

    source: relax.Expr
    index: Index
    scale: float


@dataclass(frozen=True)
class Attention:
    """One attention chain of a model, as the kernel computes it.

    ``query`` reads ``(*batch, queries, depth)``, ``keys`` ``(*batch, depth, keys)`` (the
    keys transposed, the score matmul's right operand), ``values`` ``(*batch, keys, width)``;
    ``mask`` (or None) is added to the scaled scores ``(*batch, queries, keys)``; ``guard``
    zeroes the weights of ``"nan"``: a weight that is NaN, ``"rows"``: the rows whose every
    logit is minus infinity (None: nothing). The result is ``(*batch, queries, width)`` with its
    axes permuted by ``axes`` (None: as they are).
    """

    batch: tuple[int, ...]
    queries: int
    keys_count: int
    depth: int
    width: int
    query: Access
    keys: Access
    values: Access
    mask: Access | None
    scale: float
    guard: Guard
    axes: tuple[int, ...] | None

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the kernel's result."""
        shape = (*self.batch, self.queries, self.width)
        return shape if self.axes is None else tuple(shape[axis] for axis in self.axes)


@tvm.transform.module_pass(opt_level=0, name="AttentionKernels")
def attention_kernels(mod: tvm.IRModule, _context: tvm.transform.PassContext) -> tvm.IRModule:
    """Every attention chain of ``mod``'s Relax functions (``matmul(q, k^T)``, its scaling by
    constant numbers, a mask added, ``softmax`` over the keys, PyTorch's NaN guard, ``matmul``
    with the values, a transpose of the result), as one call of the kernel `attention_te`
    computes. Run it before ``FastMathTransform``, which makes softmaxes calls of TIR. The
    layout operators it reads through are left for ``DeadCodeElimination`` to drop."""
    rewriter = _Rewriter(mod)
    for var, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.sites = _find_attention(func)
            if rewriter.sites:
                rewriter.builder_.update_func(var, rewriter.visit_expr(func))
    return rewriter.builder_.finalize()


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    """Emits the kernel where each attention's result (the second matmul, or the transpose
    after it) was bound; the kernels join the module through its builder."""

    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.sites: dict[relax.Var, Attention] = {}

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        attention = self.sites.get(binding.var)
        if attention is None:
            super().visit_var_binding_(binding)
            return
        operands = [attention.query, attention.keys, attention.values]
        if attention.mask is not None:
            operands.append(attention.mask)
        call = self.builder_.call_te(
            functools.partial(attention_te, attention=attention),
            [self.visit_expr(access.source) for access in operands],
            primfunc_name_hint="attention",
            primfunc_attrs={"op_pattern": _OPAQUE},
        )
        self.set_var_remap(binding.var, self.builder_.emit(call, binding.var.name))


def attention_te(sources: Sequence[te.Tensor], attention: Attention) -> te.Tensor:
    """The kernel of ``attention``, from its operands' sources (query, keys, values, then the
    mask if it has one)."""
    query, keys, values = sources[:3]
    mask = sources[3] if attention.mask is not None else None
    dtype = "float32"
    batch, depth, count = attention.batch, attention.depth, attention.keys_count

    def read(tensor: te.Tensor, access: Access, index: Sequence[tirx.Expr]) -> tirx.Expr:
        return tensor[tuple(access.index(index))]

    scale = attention.scale * attention.query.scale * attention.keys.scale
    padded = -(-count // VECTOR_LANES) * VECTOR_LANES

    def key(*ix: tirx.Expr) -> tirx.Expr:
        """The keys' copy, its padding the last key again."""
        index = ix if padded == count else (*ix[:-1], tirx.min(ix[-1], count - 1))
        return read(keys, attention.keys, index)

    keys_t = te.compute(
        (*batch, depth, padded),
        key,
        name="keys_t",
    )
    d = te.reduce_axis((0, depth), name="d")
    score = te.compute(
        (*batch, attention.queries, padded),
        lambda *ix: te.sum(
            read(query, attention.query, (*ix[:-1], d)) * keys_t[(*ix[:-2], d, ix[-1])],
            axis=d,
        ),
        name="score",
    )

    def logit(ix: Sequence[tirx.Expr]) -> tirx.Expr:
        value = score[tuple(ix)]
        if scale != 1.0:
            value = value * tirx.const(scale, dtype)
        if mask is not None:
            masked = read(mask, attention.mask, ix)
            if attention.mask.scale != 1.0:
                masked = masked * tirx.const(attention.mask.scale, dtype)
            value = value + masked
        return value

    j = te.reduce_axis((0, count), name="j")
    row_max = te.compute(
        (*batch, attention.queries),
        lambda *ix: te.max(logit((*ix, j)), axis=j),
        name="score_max",
    )
    exps = te.compute(
        (*batch, attention.queries, count),
        lambda *ix: exp(logit(ix) - row_max[ix[:-1]]),
        name="score_exp",
    )
    k = te.reduce_axis((0, count), name="k")
    row_sum = te.compute(
        (*batch, attention.queries),
        lambda *ix: te.sum(exps[(*ix, k)], axis=k),
        name="score_sum",
    )

    def unpermuted(ix: Sequence[tirx.Expr]) -> list[tirx.Expr]:
        """The index ``(*batch, query, column)`` of the result's element ``ix``."""
        index = list(ix)
        if attention.axes is not None:
            for position, axis in enumerate(attention.axes):
                index[axis] = ix[position]
        return index

    n = te.reduce_axis((0, count), name="n")

    def weigh(*ix: tirx.Expr) -> tirx.Expr:
        *row, column = unpermuted(ix)
        return te.sum(
            exps[(*row, n)] * read(values, attention.values, (*row[:-1], n, column)), axis=n
        )

    weighted = te.compute(attention.shape, weigh, name="weighted_sum")

    def context(*ix: tirx.Expr) -> tirx.Expr:
        row = unpermuted(ix)[:-1]
        total = row_sum[tuple(row)]
        value = weighted[ix] * (tirx.const(attention.values.scale, dtype) / total)
        zero = tirx.const(0.0, dtype)
        if attention.guard == "nan":
            # NaN weights come from a NaN logit or a row of minus infinities; each makes every
            # weight of its row NaN (the sum is NaN, or 0 and its share infinite), so every
            # weight of the row is zeroed
            value = tirx.Select(tirx.isnan(total) | (total == zero), zero, value)
        elif attention.guard == "rows":
            # a row's exponentials sum to 0 where all its logits are minus infinity (the max
            # of a row of at least one other logit weighs 1)
            value = tirx.Select(total == zero, zero, value)
        return value

    return te.compute(attention.shape, context, name="context")


def exp(x: tirx.Expr) -> tirx.Expr:
    """``topi.fast_exp`` of the float32 ``x`` (``2^n`` times a polynomial of the remainder,
    which vectorizes), zero below float32's range (where ``fast_exp`` clamps)."""
    f32 = "float32"

    def const(value: float) -> tirx.Expr:
        return tirx.const(value, f32)

    clamped = tirx.max(tirx.min(x, const(_EXP_HIGH)), const(_EXP_LOW))
    power = tirx.floor(clamped * const(math.log2(math.e)) + const(0.5))
    remainder = clamped - power * const(math.log(2))
    polynomial = const(_FAST_EXP_POLYNOMIAL[0])
    for coefficient in _FAST_EXP_POLYNOMIAL[1:]:
        polynomial = polynomial * remainder + const(coefficient)
    polynomial = polynomial * remainder * remainder + remainder + const(1.0)
    two_to_the = tirx.reinterpret(f32, (power + const(127.0)).astype("int32") << 23)
    value = tirx.max(two_to_the * polynomial, x)
    return tirx.Select(x < const(_EXP_LOW), const(0.0), value)


class _Graph:
    """A Relax function's bindings: the value bound to each variable, and the variables bound
    to what uses each variable of its dataflow blocks."""

    def __init__(self, func: relax.Function) -> None:
        self.values: dict[relax.Var, relax.Expr] = {}
        self.users: dict[relax.Var, list[relax.Var]] = {}
        self.blocks = func.body.blocks if isinstance(func.body, relax.SeqExpr) else []
        for block in self.blocks:
            for binding in block.bindings:
                if isinstance(binding, relax.VarBinding):
                    self.values[binding.var] = binding.value
            if isinstance(block, relax.DataflowBlock):
                for var, users in relax.analysis.udchain(block).items():
                    self.users[var] = list(users)

    def users_of(self, expr: relax.Expr) -> list[relax.Var] | None:
        """The variables bound to what uses ``expr``, when it is a dataflow variable (which
        nothing outside its block uses); None otherwise."""
        return self.users.get(expr) if isinstance(expr, relax.DataflowVar) else None

    def bound(
        self, expr: relax.Expr | None, *, also: Sequence[relax.Var] = ()
    ) -> relax.Expr | None:
        """The value bound to ``expr`` when nothing but the next step of a chain uses it (and
        ``also``, uses that the chain's rewrite drops too)."""
        users = self.users_of(expr) if expr is not None else None
        if users is None:
            return None
        others = [user for user in users if not any(user.same_as(var) for var in also)]
        return self.values.get(expr) if len(others) == 1 else None


def _find_attention(func: relax.Function) -> dict[relax.Var, Attention]:
    """The attention chains of ``func``'s dataflow blocks, by the variable their result is
    bound to."""
    graph = _Graph(func)
    sites: dict[relax.Var, Attention] = {}
    for block in graph.blocks:
        if not isinstance(block, relax.DataflowBlock):
            continue
        for binding in block.bindings:
            attention = _match(graph.values.get(binding.var), graph)
            if attention is None:
                continue
            var, axes = _transposed(binding.var, graph, len(attention.batch) + 2)
            sites[var] = replace(attention, axes=axes)
    return sites


def _transposed(
    var: relax.Var, graph: _Graph, ndim: int
) -> tuple[relax.Var, tuple[int, ...] | None]:
    """The last of the transposes that alone use ``var`` one after the other, and the axes of
    ``var`` it holds; ``var`` itself and None without one."""
    axes: list[int] | None = None
    while True:
        users = graph.users_of(var)
        transpose = graph.values.get(users[0]) if users is not None and len(users) == 1 else None
        if not _is_op(transpose, "relax.permute_dims"):
            return var, None if axes is None else tuple(axes)
        order = transpose.attrs.axes
        order = range(ndim - 1, -1, -1) if order is None else [int(a) % ndim for a in order]
        current = axes or list(range(ndim))
        var, axes = users[0], [current[axis] for axis in order]


def _match(context: relax.Expr | None, graph: _Graph) -> Attention | None:
    """The attention whose second matmul is ``context``, if the chain before it is one."""
    if not _is_float_matmul(context):
        return None
    weights, values = context.args
    guard: Guard = None
    also: list[relax.Var] = []
    probabilities = _unchanged(graph.bound(weights), graph)
    if _is_op(probabilities, "relax.where"):
        where = probabilities
        probabilities = _unguarded(where, graph)
        guard = "nan"
        if probabilities is None:
            guard, found = "rows", _rows_guarded(where, graph)
            probabilities, also = found if found is not None else (None, [])
    if not _is_op(probabilities, "relax.nn.softmax"):
        return None
    logits = probabilities.args[0]
    shape = static_shape(logits)
    if shape is None or int(probabilities.attrs.axis) not in (-1, len(shape) - 1):
        return None
    scores = _scores(logits, graph, also)
    if scores is None:
        return None
    product, mask, scale = scores
    left, right = product.args
    return _attention(left, right, values, mask, scale, guard, graph)


def _unchanged(value: relax.Expr | None, graph: _Graph) -> relax.Expr | None:
    """``value``, or what it was computed from by reshapes or broadcasts to the shape it had
    (PyTorch's export of a batch matmul broadcasts its operands to their own shapes)."""
    while (_is_op(value, "relax.reshape") or _is_op(value, "relax.broadcast_to")) and static_shape(
        value.args[0]
    ) == static_shape(value):
        value = graph.bound(value.args[0])
    return value


def _unguarded(where: relax.Call, graph: _Graph) -> relax.Expr | None:
    """The softmax ``p`` of PyTorch's guard ``where(isnan(p), 0, p)``, when nothing else uses
    ``p`` or the test."""
    condition, zero, kept = where.args
    test = graph.bound(condition)
    users = graph.users_of(kept)
    if (
        constant_number(zero) != 0.0
        or not _is_op(test, "relax.isnan")
        or not test.args[0].same_as(kept)
        or users is None
        or len(users) != 2
    ):
        return None
    return graph.values.get(kept)


def _rows_guarded(where: relax.Call, graph: _Graph) -> tuple[relax.Call, list[relax.Var]] | None:
    """The softmax ``p`` of torch.export's ``_safe_softmax``, ``where(all(x == -inf, axis=-1,
    keepdims), 0, p)`` with ``p = softmax(x)`` (the test written ``not(max(int(not(x ==
    -inf))))``), and the variable that compares ``x``, when nothing else uses ``p`` or the
    test."""
    condition, zero, kept = where.args
    if not isinstance(zero, tvm.ir.expr.Constant) or zero.value.numpy().any():
        return None
    softmax = graph.bound(kept)
    if not _is_op(softmax, "relax.nn.softmax"):
        return None
    chain = ("relax.logical_not", "relax.astype", "relax.max", "relax.astype", "relax.logical_not")
    expr: relax.Expr | None = condition
    for name in chain:
        value = graph.bound(expr)
        if not _is_op(value, name):
            return None
        if name == "relax.max":
            ndim = len(static_shape(value.args[0]) or ())
            axes = value.attrs.axis
            if (
                not value.attrs.keepdims
                or axes is None
                or [int(a) % ndim for a in axes] != [ndim - 1]
            ):
                return None
        expr = value.args[0]
    compared = graph.bound(expr)
    logits = softmax.args[0]
    if not (
        _is_op(compared, "relax.equal")
        and compared.args[0].same_as(logits)
        and constant_number(compared.args[1]) == -math.inf
    ):
        return None
    return softmax, [expr]


def _scores(
    logits: relax.Expr, graph: _Graph, also: Sequence[relax.Var] = ()
) -> tuple[relax.Call, relax.Expr | None, float] | None:
    """The score matmul under ``logits`` (used by the softmax, and ``also`` by the variables of
    its guard), the mask added to the scaled scores (or None) and the product of the constant
    numbers the scores were multiplied by (or divided by)."""
    shape = static_shape(logits)
    mask: relax.Expr | None = None
    expr = graph.bound(logits, also=also)
    if _is_op(expr, "relax.add"):
        left, right = expr.args
        if _scaled_product(graph.bound(left), graph) is not None:
            expr, mask = graph.bound(left), right
        else:
            expr, mask = graph.bound(right), left
    found = _scaled_product(expr, graph)
    if found is None or static_shape(found[0]) != shape:
        return None
    return found[0], mask, found[1]


def _scaled_product(expr: relax.Expr | None, graph: _Graph) -> tuple[relax.Call, float] | None:
    """The matmul that ``expr`` multiplies (or divides) by constant numbers, and their product;
    ``expr`` itself when it is a matmul."""
    scale = 1.0
    while _is_op(expr, "relax.multiply") or _is_op(expr, "relax.divide"):
        left, right = expr.args
        factor, operand = constant_number(right), left
        if factor is None and expr.op.name == "relax.multiply":
            factor, operand = constant_number(left), right
        if not factor or static_shape(operand) != static_shape(expr):
            return None
        scale *= factor if expr.op.name == "relax.multiply" else 1.0 / factor
        expr = graph.bound(operand)
    return (expr, scale) if _is_float_matmul(expr) else None


def _attention(
    left: relax.Expr,
    right: relax.Expr,
    values: relax.Expr,
    mask: relax.Expr | None,
    scale: float,
    guard: Guard,
    graph: _Graph,
) -> Attention | None:
    """The attention of these operands, if their shapes are those of one."""
    shapes = [static_shape(expr) for expr in (left, right, values)]
    if any(shape is None or len(shape) < 2 for shape in shapes):
        return None
    left_shape, right_shape, values_shape = shapes
    queries, depth = left_shape[-2:]
    keys_count = right_shape[-1]
    width = values_shape[-1]
    batch = _broadcast(left_shape[:-2], right_shape[:-2])
    if (
        batch is None
        or right_shape[-2] != depth
        or values_shape[-2] != keys_count
        or _broadcast(batch, values_shape[:-2]) != batch
    ):
        return None
    rows = (*batch, queries)
    query = _access(left, graph, (*rows, depth))
    keys = _access(right, graph, (*batch, depth, keys_count))
    values_access = _access(values, graph, (*batch, keys_count, width))
    mask_access = None
    if isinstance(mask, tvm.ir.expr.Constant) and not mask.value.numpy().any():
        mask = None  # a mask of zeros masks nothing
    if mask is not None:
        score_shape = (*rows, keys_count)
        mask_shape = static_shape(mask)
        if mask_shape is None or _broadcast(score_shape, mask_shape) != score_shape:
            return None
        if not _is_float32(mask):
            return None
        mask_access = _access(mask, graph, score_shape)
    return Attention(
        batch, queries, keys_count, depth, width, query, keys, values_access, mask_access,
        scale, guard, None,
    )  # fmt: skip


def _access(expr: relax.Expr, graph: _Graph, extents: tuple[int, ...]) -> Access:
    """How the kernel reads the operand ``expr`` with an index of ``extents`` (the operand's
    axes right-aligned with them, broadcast where its extent is 1): the tensor it was computed
    from through layout operators and multiplications by constant numbers, and the index
    arithmetic from the kernel's index to that tensor's."""
    shape = static_shape(expr)
    leading = len(extents) - len(shape)

    def broadcast(ix: Sequence[tirx.Expr]) -> list[tirx.Expr]:
        return [
            0 if extent == 1 else axis for axis, extent in zip(ix[leading:], shape, strict=True)
        ]

    index: Index = broadcast
    scale = 1.0
    while isinstance(expr, relax.Var) and expr in graph.values:
        step = _layout_step(graph.values[expr], graph)
        if step is None:
            break
        expr, inner, factor = step
        index = _then(index, inner)
        scale *= factor
    return Access(expr, _simplified(index, extents), scale)


def _then(outer: Index, inner: Index) -> Index:
    return lambda ix: inner(outer(ix))


def _simplified(index: Index, extents: Sequence[int]) -> Index:
    """``index``, its arithmetic simplified knowing each axis ranges over its extent."""

    def simplified(ix: Sequence[tirx.Expr | tirx.IterVar]) -> list[tirx.Expr]:
        ix = [axis.var if isinstance(axis, tirx.IterVar) else axis for axis in ix]
        analyzer = Analyzer()
        for axis, extent in zip(ix, extents, strict=True):
            if isinstance(axis, tirx.Var):
                analyzer.bind(axis, tvm.ir.Range.from_min_extent(_int(0, axis), _int(extent, axis)))
        return [analyzer.simplify(expr) for expr in index(ix)]

    return simplified


def _layout_step(value: relax.Expr, graph: _Graph) -> tuple[relax.Expr, Index, float] | None:
    """The operand of a layout operator or of a multiplication by a number, the index map from
    the result's index to the operand's, and the factor; None for anything else."""
    if isinstance(value, relax.TupleGetItem):
        return _split_step(value, graph)
    if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
        return None
    name = value.op.name
    if name in ("relax.multiply", "relax.divide"):
        data, factor = value.args
        number = constant_number(factor)
        if number is None and name == "relax.multiply":
            factor, data = data, factor
            number = constant_number(factor)
        if not number or not _is_float32(data) or static_shape(data) != static_shape(value):
            return None
        return data, lambda ix: list(ix), number if name == "relax.multiply" else 1.0 / number
    if name == "relax.take":
        return _take_step(value)
    if name not in _LAYOUT_OPS:
        return None
    data = value.args[0]
    shape, result = static_shape(data), static_shape(value)
    if shape is None or result is None or not _is_float32(data):
        return None
    inner = _layout_index(value, shape, result)
    return None if inner is None else (data, inner, 1.0)


def _layout_index(
    call: relax.Call, shape: tuple[int, ...], result: tuple[int, ...]
) -> Index | None:
    """The index map of a layout operator from its result's index to its operand's."""
    name, attrs = call.op.name, call.attrs
    if name == "relax.permute_dims":
        axes = list(range(len(shape) - 1, -1, -1)) if attrs.axes is None else attrs.axes
        order = [int(axis) % len(shape) for axis in axes]

        def permuted(ix: Sequence[tirx.Expr]) -> list[tirx.Expr]:
            inner = [0] * len(shape)
            for position, axis in enumerate(order):
                inner[axis] = ix[position]
            return inner

        return permuted
    if name == "relax.reshape":
        return lambda ix: _unflattened(_flattened(ix, result), shape)
    if name == "relax.expand_dims":
        added = {int(axis) % len(result) for axis in attrs.axis}
        return lambda ix: [axis for position, axis in enumerate(ix) if position not in added]
    if name == "relax.squeeze":
        return lambda ix: _unflattened(_flattened(ix, result), shape)
    if name == "relax.broadcast_to":
        leading = len(result) - len(shape)
        return lambda ix: [
            0 if extent == 1 else axis for axis, extent in zip(ix[leading:], shape, strict=True)
        ]
    return _slice_index(call, shape)


def _slice_index(call: relax.Call, shape: tuple[int, ...]) -> Index | None:
    """The index map of a ``strided_slice`` of constant axes, starts and positive strides."""
    axes, begins, *rest = (_ints(arg) for arg in call.args[1:])
    strides = rest[1] if len(rest) > 1 else None
    if axes is None or begins is None or (len(rest) > 1 and strides is None):
        return None
    strides = strides or [1] * len(axes)
    if any(stride <= 0 for stride in strides):
        return None
    starts = {}
    for axis, begin, stride in zip(axes, begins, strides, strict=True):
        extent = shape[axis % len(shape)]
        start = begin + extent if begin < 0 else begin
        starts[axis % len(shape)] = (min(max(start, 0), extent), stride)

    def sliced(ix: Sequence[tirx.Expr]) -> list[tirx.Expr]:
        inner = list(ix)
        for axis, (start, stride) in starts.items():
            inner[axis] = start + ix[axis] * stride
        return inner

    return sliced


def _take_step(take: relax.Call) -> tuple[relax.Expr, Index, float] | None:
    """The operand of a ``take`` of one constant index (the slice at that index along its
    axis, which PyTorch exports to pick the query, keys or values out of a packed projection),
    and the index map into it."""
    data, indices = take.args
    shape = static_shape(data)
    if (
        shape is None
        or take.attrs.axis is None
        or not isinstance(indices, tvm.ir.expr.Constant)
        or indices.value.numpy().shape != ()
        or not _is_float32(data)
    ):
        return None
    axis = int(take.attrs.axis) % len(shape)
    position = int(indices.value.numpy())
    if not -shape[axis] <= position < shape[axis]:
        return None
    position %= shape[axis]
    return data, lambda ix: [*ix[:axis], position, *ix[axis:]], 1.0


def _split_step(item: relax.TupleGetItem, graph: _Graph) -> tuple[relax.Expr, Index, float] | None:
    """The operand of a ``split`` whose part ``item`` takes, and the index map into it."""
    split = graph.values.get(item.tuple_value) if isinstance(item.tuple_value, relax.Var) else None
    if not _is_op(split, "relax.split"):
        return None
    data = split.args[0]
    shape = static_shape(data)
    if shape is None or not _is_float32(data):
        return None
    axis = int(split.attrs.axis) % len(shape)
    sections = split.attrs.indices_or_sections
    if isinstance(sections, tirx.IntImm):
        starts = [part * (shape[axis] // int(sections)) for part in range(int(sections))]
    else:
        starts = [0, *(int(index) for index in sections)]
    start = starts[item.index]

    def part(ix: Sequence[tirx.Expr]) -> list[tirx.Expr]:
        inner = list(ix)
        inner[axis] = ix[axis] + start
        return inner

    return data, part, 1.0


def _flattened(ix: Sequence[tirx.Expr], shape: Sequence[int]) -> tirx.Expr:
    flat: tirx.Expr | int = 0
    for axis, extent in zip(ix, shape, strict=True):
        flat = flat * extent + axis
    return flat


def _unflattened(flat: tirx.Expr, shape: Sequence[int]) -> list[tirx.Expr]:
    index = []
    for extent in reversed(shape):
        index.append(tirx.floormod(flat, extent))
        flat = tirx.floordiv(flat, extent)
    return index[::-1]


def _broadcast(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """Numpy's broadcast of ``shapes``, or None where they do not broadcast."""
    ndim = max(len(shape) for shape in shapes)
    result = []
    for position in range(ndim):
        extents = {
            shape[position - ndim + len(shape)]
            for shape in shapes
            if position - ndim + len(shape) >= 0
        } - {1}
        if len(extents) > 1:
            return None
        result.append(extents.pop() if extents else 1)
    return tuple(result)


def _is_op(expr: relax.Expr | None, name: str) -> bool:
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == name


def _is_float32(expr: relax.Expr) -> bool:
    ty = expr.ty
    return isinstance(ty, relax.TensorType) and str(ty.dtype) == "float32"


def _is_float_matmul(expr: relax.Expr | None) -> bool:
    """Whether ``expr`` is a matmul of float32 operands giving float32."""
    if not _is_op(expr, "relax.matmul"):
        return False
    out_dtype = expr.attrs.out_dtype
    return all(_is_float32(arg) for arg in expr.args) and (
        out_dtype is None or str(out_dtype) in ("", "void", "float32")
    )


def _ints(expr: relax.Expr) -> list[int] | None:
    """The integers of a tuple of integer constants."""
    if not isinstance(expr, relax.Tuple):
        return None
    numbers = []
    for field in expr.fields:
        if not isinstance(field, tirx.IntImm):
            return None
        numbers.append(int(field.value))
    return numbers


def _int(value: int, like: tirx.Expr) -> tirx.Expr:
    """``value`` as an integer of ``like``'s dtype."""
    return tirx.const(value, like.ty.dtype)
