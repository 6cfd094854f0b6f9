"""How an imported model is made ready for inference before it is tuned and compiled: the Relax
passes of `for_inference`, TVM's own (as ``static_shape_tuning_pipeline`` starts) and the
rewrites defined here, each a pass over the module's Relax functions.

- `bools_as_integers`: comparisons and arithmetic of booleans, which TVM's LLVM code generator
  cannot compile, computed on integers.
- ``DecomposeOpsForInference`` and ``CanonicalizeBindings``: a batch norm becomes arithmetic that
  fuses into the convolution before it.
- `unit_transposes_as_reshapes` (``autosched.model.transposes``), then
  ``RemoveRedundantReshape``: a transpose that only moves axes of extent 1 (PyTorch's
  ``nn.MultiheadAttention`` on a batch of 1) is a reshape, which costs nothing and lets what
  follows fuse.
- `matmuls_in_their_batches`: a matmul that PyTorch exported between two reshapes (tokens
  flattened into a matrix, multiplied, unflattened) is computed on the tokens as they are, so
  its bias, activation, residual add or scaling fuse into it.
- ``FoldConstant``, then `parallel_matmuls_combined` (``autosched.model.parallel``): linear layers
  that read the same input (a transformer's query, key and value projections) become one matmul
  by their weights side by side, whose columns they take.
- `matmuls_padded` (``autosched.model.padding``): a matmul by a constant weight whose many
  columns no vector can tile (GPT-2's 50,257), or whose input's rows no register tile can
  split (ViT's 197 tokens), computes them with zero columns or rows in front up to a multiple
  of 64 or 8, and slices the output past them.
- `clips_as_bounds` and `axes_counted_from_the_front`, then ``ConvertLayout`` to `CONV_LAYOUTS`:
  convolutions run channels-last, each ReLU6 fused into the convolution before it.
- `attention_kernels` (``autosched.model.attention``), `rms_norms_as_one_operator` and
  `layer_norms_with_their_sums` (``autosched.model.norms``), then ``DeadCodeElimination``: each
  attention (scores, mask, softmax, weighted sum of the values, with the slices and transposes
  that split and merge the heads) as one call of one kernel, which reads the projections where
  they lie; each RMS norm written out as its arithmetic as ``R.nn.rms_norm``, and each layer
  norm of a sum that no matmul's epilogue takes with its sum, one kernel where ``FuseOps`` made
  two.
- `activations_written_out`, then ``FastMathTransform``: exponentials, error functions and
  tangents (GELUs, sigmoids, SiLUs and softmaxes included) take TVM's fast float32 forms,
  polynomials that vectorize, where LLVM would call libm's scalar ``expf`` or ``erff`` once per
  element.
- `whole_powers_multiplied`: a float raised to a constant whole power from 2 to 4 (GPT-2's
  GELU cubes its input) as that many products, where LLVM would call libm's scalar ``powf`` once
  per element and leave the loop unvectorized: the epilogue of GPT-2's first MLP matmul took
  longer than the matmul.

Every rewrite computes the same values as what it replaces (the fast forms to float32 accuracy);
a compiled model is checked against its framework's outputs all the same.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence

import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

from autosched.model.attention import attention_kernels
from autosched.model.norms import layer_norms_with_their_sums, rms_norms_as_one_operator
from autosched.model.padding import matmuls_padded
from autosched.model.parallel import parallel_matmuls_combined
from autosched.model.relax_ir import constant_number, each_function, rewrite_calls, static_shape
from autosched.model.transposes import unit_transposes_as_reshapes

CONV_LAYOUTS = {"relax.nn.conv2d": ["NHWC", "HWIO"]}
"""The layouts a model's 2-d convolutions are tuned and run in: channels-last data (vectors run
along the channels, which every layer has many of) and kernels height, width, in, out. The
operators between them follow the layout where they can; the model's inputs and outputs keep
theirs, with a transpose at each end."""


def for_inference() -> tvm.transform.Pass:
    """The passes that make an imported model ready for inference, in order."""
    return tvm.transform.Sequential(
        [
            bools_as_integers,
            relax.transform.DecomposeOpsForInference(),
            relax.transform.CanonicalizeBindings(),
            unit_transposes_as_reshapes,
            relax.transform.RemoveRedundantReshape(),
            matmuls_in_their_batches,
            relax.transform.RemoveRedundantReshape(),
            relax.transform.DeadCodeElimination(),
            relax.transform.FoldConstant(),
            parallel_matmuls_combined,
            matmuls_padded,
            clips_as_bounds,
            axes_counted_from_the_front,
            relax.transform.ConvertLayout(CONV_LAYOUTS),
            attention_kernels,
            rms_norms_as_one_operator,
            layer_norms_with_their_sums,
            relax.transform.DeadCodeElimination(),
            activations_written_out,
            whole_powers_multiplied,
            relax.transform.FastMathTransform(),
        ],
        name="ForInference",
    )


_COMPARISONS = frozenset(
    f"relax.{name}"
    for name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
)
_BOOLEAN_OPS = _COMPARISONS | {
    f"relax.{name}" for name in ("add", "multiply", "maximum", "minimum", "max", "min")
}
"""Operators whose code TVM's LLVM generator cannot emit on booleans: it takes a boolean for a
float (LLVM's verifier refuses ``fcmp`` on ``i1``; the check ``t.MatchesCode(kDLFloat)`` fails)."""


@tvm.transform.module_pass(opt_level=0, name="BoolsAsIntegers")
def bools_as_integers(mod: tvm.IRModule, _context: tvm.transform.PassContext) -> tvm.IRModule:
    """Every operator of `_BOOLEAN_OPS` whose operands are all booleans, computed on them as
    ``uint8`` (a boolean result cast back: a sum of booleans is their ``or``, a product their
    ``and``, as PyTorch and ONNX compute them); and every ``R.cumsum`` of booleans that names no
    dtype as PyTorch counts them, in ``int64``.

    TVM cannot compile the first on booleans, and its PyTorch importer gives ``torch.cumsum`` of
    booleans a boolean result (Hugging Face's attention masks number packed sequences so, then
    compare the numbers: the GPT-2 and LLaMA of ``transformers`` do).
    """
    reductions = {"relax.max", "relax.min", "relax.cumsum"}
    pattern = functools.reduce(
        operator.or_,
        [
            is_op(name)(wildcard()) if name in reductions else is_op(name)(wildcard(), wildcard())
            for name in sorted(_BOOLEAN_OPS | {"relax.cumsum"})
        ],
    )

    def as_integers(call: relax.Call, _matches: object) -> relax.Expr:
        if not isinstance(call, relax.Call) or not all(_is_bool(arg) for arg in call.args):
            return call  # a match may come as the variable bound to the call
        if call.op.name == "relax.cumsum":
            if call.attrs.dtype is not None and str(call.attrs.dtype) not in ("", "void"):
                return call
            (data,) = call.args
            return relax.op.cumsum(
                relax.op.astype(data, "int64"), call.attrs.axis, exclusive=call.attrs.exclusive
            )
        computed = relax.Call(call.op, [relax.op.astype(a, "uint8") for a in call.args], call.attrs)
        return computed if call.op.name in _COMPARISONS else relax.op.astype(computed, "bool")

    return rewrite_calls(mod, pattern, as_integers)


def _is_bool(expr: relax.Expr) -> bool:
    ty = expr.ty
    return isinstance(ty, relax.TensorType) and str(ty.dtype) == "bool"


@tvm.transform.module_pass(opt_level=0, name="MatmulsInTheirBatches")
def matmuls_in_their_batches(
    mod: tvm.IRModule, _context: tvm.transform.PassContext
) -> tvm.IRModule:
    """Every ``reshape(matmul(a, b) [+ bias], shape)`` that only regroups the matmul's batch
    dimensions, as ``matmul(reshape(a), reshape(b)) [+ bias]`` of that shape.

    PyTorch exports a linear layer on tokens ``(1, 128, 768)`` as a reshape to ``(128, 768)``, a
    2-d matmul (with its bias) and a reshape back; ``FuseOps`` fuses no reshape into a matmul's
    epilogue, so the activation, residual add or scaling after it ran as kernels of their own,
    each a round trip of the whole activation through memory. Multiplied in the shape the
    operators after it use, the matmul takes them as its epilogue; the reshape before it
    becomes one that changes nothing and is dropped (``RemoveRedundantReshape``). A matmul (or
    its sum with the bias) that anything else uses as well is left as it is: regrouped, it would
    be computed twice.
    """
    return each_function(mod, _matmuls_regrouped)


def _matmuls_regrouped(func: relax.Function) -> relax.Function:
    """`matmuls_in_their_batches` on one function."""
    product = is_op("relax.matmul")(wildcard(), wildcard())
    bias = wildcard()
    bias_first = is_op("relax.add")(bias, product)
    bias_last = is_op("relax.add")(product, bias)
    pattern = is_op("relax.reshape")(product | bias_first | bias_last, wildcard())
    single_use = _values_used_once(func)

    def regrouped(call: relax.Call, matches: dict) -> relax.Expr:
        matmul = matches[product]
        added = bias_first if bias_first in matches else bias_last if bias_last in matches else None
        used = [matmul] if added is None else [matmul, matches[added]]
        if not all(any(value.same_as(once) for once in single_use) for value in used):
            return call
        shape, result = static_shape(call), static_shape(matmul)
        a, b = matmul.args
        a_shape, b_shape = static_shape(a), static_shape(b)
        if None in (shape, result, a_shape, b_shape) or min(len(a_shape), len(b_shape)) < 2:
            return call
        batch = shape[:-2]
        if (
            len(shape) < 2
            or shape[-2:] != result[-2:]
            or math.prod(batch) != math.prod(result[:-2])
            or math.prod(a_shape[:-2]) != math.prod(result[:-2])
            or (len(b_shape) > 2 and b_shape[:-2] != a_shape[:-2])
        ):
            return call
        a = _reshaped(a, (*batch, *a_shape[-2:]))
        if len(b_shape) > 2:
            b = _reshaped(b, (*batch, *b_shape[-2:]))
        regrouped_product = relax.op.matmul(a, b, out_dtype=matmul.attrs.out_dtype)
        if added is None:
            return regrouped_product
        addend = matches[bias]
        addend_shape = static_shape(addend)
        if addend_shape is None or len(addend_shape) > 2 or static_shape(matches[added]) != result:
            return call  # a bias that would broadcast differently over the new batch dimensions
        if added is bias_first:
            return relax.op.add(addend, regrouped_product)
        return relax.op.add(regrouped_product, addend)

    return rewrite_call(pattern, regrouped, func)


def _values_used_once(func: relax.Function) -> list[relax.Expr]:
    """The values bound in ``func``'s dataflow blocks to variables that one binding uses and
    nothing outside the block does."""
    values = []
    for block in func.body.blocks if isinstance(func.body, relax.SeqExpr) else []:
        if not isinstance(block, relax.DataflowBlock):
            continue
        users = relax.analysis.udchain(block)
        for binding in block.bindings:
            var = binding.var
            if isinstance(var, relax.DataflowVar) and len(users.get(var, [])) == 1:
                values.append(binding.value)
    return values


@tvm.transform.module_pass(opt_level=0, name="ClipsAsBounds")
def clips_as_bounds(mod: tvm.IRModule, _context: tvm.transform.PassContext) -> tvm.IRModule:
    """Every ``R.clip(x, low, high)`` of constant bounds as ``R.minimum(R.maximum(x, low), high)``:
    the same values from two elementwise operators, which follow a convolution's layout and fuse
    into it (``ConvertLayout`` knows no layout of a clip, and would transpose around each ReLU6)."""
    pattern = is_op("relax.clip")(wildcard(), wildcard(), wildcard())

    def as_bounds(call: relax.Call, _matches: object) -> relax.Expr:
        value, *bounds = call.args
        numbers = [constant_number(bound) for bound in bounds]
        if None in numbers:  # a bound that is not a constant: left as it is
            return call
        low, high = (relax.const(number, str(value.ty.dtype)) for number in numbers)
        return relax.op.minimum(relax.op.maximum(value, low), high)

    return rewrite_calls(mod, pattern, as_bounds)


@tvm.transform.module_pass(opt_level=0, name="AxesCountedFromTheFront")
def axes_counted_from_the_front(
    mod: tvm.IRModule, _context: tvm.transform.PassContext
) -> tvm.IRModule:
    """Every ``R.squeeze`` whose axes count from the back, with the same axes counted from the
    front: ``squeeze(x, [-2])`` of a 5-d ``x`` as ``squeeze(x, [3])``.

    ``ConvertLayout``'s layout inference of a squeeze indexes a string of the tensor's
    dimensions by each axis as written, so a negative one writes before the string, corrupting
    memory (``std::bad_alloc`` as the model is prepared). PyTorch exports the split of
    ``nn.MultiheadAttention``'s packed projections as ``squeeze(-2)``.
    """
    pattern = is_op("relax.squeeze")(wildcard())

    def counted(call: relax.Call, _matches: object) -> relax.Expr:
        (data,) = call.args
        axes, ndim = call.attrs.axis, data.ty.ndim
        if axes is None or ndim < 0 or all(axis >= 0 for axis in axes):
            return call
        return relax.op.squeeze(data, [axis % ndim for axis in axes])

    return rewrite_calls(mod, pattern, counted)


@tvm.transform.module_pass(opt_level=0, name="ActivationsWrittenOut")
def activations_written_out(mod: tvm.IRModule, _context: tvm.transform.PassContext) -> tvm.IRModule:
    """Every ``R.nn.gelu`` as the formula it is legalized to, ``x * (1/2 + erf(x / sqrt(2)) / 2)``,
    every ``R.nn.gelu_tanh`` as its own, and every ``R.sigmoid`` (a SiLU's, a squeeze-and-excite
    gate's) as ``1 / (1 + exp(-x))``, the formula LLVM's code generator expands it to: the same
    values, from operators whose error function, tangent and exponential the fast-math pass then
    replaces."""

    mul, add = relax.op.multiply, relax.op.add

    def const(value: float, like: relax.Expr) -> relax.Expr:
        return relax.const(value, str(like.ty.dtype))

    def erf_gelu(x: relax.Expr) -> relax.Expr:
        half = const(0.5, x)
        return mul(x, add(half, mul(relax.op.erf(mul(x, const(0.5**0.5, x))), half)))

    def tanh_gelu(x: relax.Expr) -> relax.Expr:
        cube = mul(mul(x, x), x)
        inner = mul(const(math.sqrt(2.0 / math.pi), x), add(x, mul(const(0.044715, x), cube)))
        return mul(mul(const(0.5, x), x), add(const(1.0, x), relax.op.tanh(inner)))

    def sigmoid(x: relax.Expr) -> relax.Expr:
        one = const(1.0, x)
        return relax.op.divide(one, add(one, relax.op.exp(relax.op.negative(x))))

    formulas = {
        "relax.nn.gelu": erf_gelu,
        "relax.nn.gelu_tanh": tanh_gelu,
        "relax.sigmoid": sigmoid,
    }
    pattern = functools.reduce(operator.or_, (is_op(name)(wildcard()) for name in formulas))

    def written_out(call: relax.Call, _matches: object) -> relax.Expr:
        (x,) = call.args
        return formulas[call.op.name](x)

    return rewrite_calls(mod, pattern, written_out)


MAX_MULTIPLIED_POWER = 4
"""The highest whole power `whole_powers_multiplied` writes as products."""


@tvm.transform.module_pass(opt_level=0, name="WholePowersMultiplied")
def whole_powers_multiplied(mod: tvm.IRModule, _context: tvm.transform.PassContext) -> tvm.IRModule:
    """Every ``R.power(x, n)`` of a float ``x`` and a constant scalar ``n`` that is a whole number
    from 2 to `MAX_MULTIPLIED_POWER` as ``x * x * ...``: the same values to float accuracy, from
    multiplications that vectorize where ``powf`` is a scalar call per element."""
    pattern = is_op("relax.power")(wildcard(), is_const())

    def multiplied(call: relax.Call, _matches: object) -> relax.Expr:
        base, exponent = call.args
        power = _whole_power(exponent)
        dtype = str(base.ty.dtype) if isinstance(base.ty, relax.TensorType) else ""
        if power is None or not dtype.startswith(("float", "bfloat")):
            return call
        shape = static_shape(call)
        if static_shape(exponent) != () and (shape is None or shape != static_shape(base)):
            return call  # the exponent's axes would broadcast the base to another shape
        product = base
        for _ in range(power - 1):
            product = relax.op.multiply(product, base)
        return product

    return rewrite_calls(mod, pattern, multiplied)


def _whole_power(exponent: tvm.ir.expr.Constant) -> int | None:
    """The exponent's value where it is one whole number from 2 to `MAX_MULTIPLIED_POWER`."""
    value = constant_number(exponent)
    if value is not None and value.is_integer() and 2 <= value <= MAX_MULTIPLIED_POWER:
        return int(value)
    return None


def _reshaped(expr: relax.Expr, shape: Sequence[int]) -> relax.Expr:
    """``expr`` in ``shape``: itself when it has that shape already."""
    if static_shape(expr) == tuple(shape):
        return expr
    return relax.op.reshape(expr, list(shape))
