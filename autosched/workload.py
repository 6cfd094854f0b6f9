"""A workload: one tensor program to tune (a normalised PrimFunc) with its key, FLOPs and reference.

Workloads come from TE definitions (the built-in registry in ``autosched.workloads``), from a
user's TVMScript file on their own machine, or from outside as data-only IR JSON, admitted by
``autosched.admission``. A user's workload travels and is stored as that JSON, never as TVMScript.
Random inputs and comparison tolerances for checking results live here too.
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import tvm
from tvm import te
from tvm.s_tir.meta_schedule.arg_info import ArgInfo

from autosched.admission import COLD_CACHE, admit_program, program_json
from autosched.errors import UserError
from autosched.records import WorkloadRef

Reference = Callable[[list[np.ndarray]], list[np.ndarray]]


@dataclass(frozen=True)
class Workload:
    """One tensor program to tune.

    ``func`` is normalised (global symbol ``main``, ``tirx.noalias``); its arguments are buffers of
    static shape, and when ``num_outputs`` is known the last ``num_outputs`` of them are outputs.
    ``reference`` maps the input arrays to the expected output arrays. ``source`` is the IR JSON
    of a workload that is not built in. ``nominal_flops``: ``flops`` counts another algorithm's
    operations, not the program's own (a Winograd convolution counts the direct one's), so that
    rates compare with that algorithm's; no peak of this machine bounds such a rate.
    """

    name: str
    params: dict[str, object]
    func: tvm.tirx.PrimFunc
    flops: float | None
    num_outputs: int | None
    reference: Reference | None
    source: str | None = None
    nominal_flops: bool = False

    @property
    def mod(self) -> tvm.IRModule:
        return tvm.IRModule({"main": self.func})

    @cached_property
    def tvmscript(self) -> str:
        """Canonical TVMScript text of :attr:`mod`."""
        return self.mod.script()

    @cached_property
    def key(self) -> str:
        """Identity of the program, the same on every machine: a hash of its TVMScript text."""
        return hashlib.sha256(self.tvmscript.encode()).hexdigest()[:32]

    @property
    def ref(self) -> WorkloadRef:
        """What a measuring process needs to rebuild this workload."""
        return WorkloadRef(self.name, dict(self.params), self.key, self.source)

    @property
    def timed_cold(self) -> bool:
        """Whether candidates are timed with the CPU caches flushed before each call (the
        program carries ``autosched.cold_cache``: a model's kernel)."""
        attrs = self.func.attrs
        return attrs is not None and bool(attrs.get(COLD_CACHE, False))

    @property
    def args(self) -> list[tuple[tuple[int, ...], str]]:
        """Shape and dtype of each buffer argument, in order."""
        return buffer_args(self.func, self.name)

    @property
    def float_arithmetic(self) -> bool:
        """Whether it computes in floating point, the arithmetic a calibrated peak measures:
        false when an output is an integer (int8 dot products accumulated in int32), whose
        operations per second no float peak bounds. Without known outputs, true."""
        if not self.num_outputs:
            return True
        outputs = self.args[-self.num_outputs :]
        return all(dtype.startswith(("float", "bfloat")) for _, dtype in outputs)

    @property
    def min_bytes(self) -> int:
        """The compulsory memory traffic: every argument read or written once, in bytes.

        No schedule moves less (each input is read at least once, each output written once);
        intermediate buffers, which a schedule may keep in cache, are not counted.
        """
        return sum(math.prod(shape) * _dtype_bytes(dtype) for shape, dtype in self.args)


def normalize_func(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """The form MetaSchedule tunes: global symbol ``main`` and no aliasing between buffers."""
    return func.with_attr("global_symbol", "main").with_attr("tirx.noalias", True)


def workload_from_te(
    name: str,
    params: dict[str, object],
    tensors: Sequence[te.Tensor],
    *,
    flops: float | None,
    reference: Reference | None,
    num_outputs: int = 1,
    nominal_flops: bool = False,
) -> Workload:
    """A workload from TE tensors: the placeholders first, then the ``num_outputs`` outputs."""
    func = normalize_func(te.create_prim_func(list(tensors)))
    return Workload(name, params, func, flops, num_outputs, reference, nominal_flops=nominal_flops)


def workload_from_tvmscript(text: str, *, name: str = "custom") -> Workload:
    """A workload from TVMScript text: one ``@T.prim_func``, or an ``@I.ir_module`` holding one.

    TVM's parser runs the text's expressions as Python: call this on the user's own files only,
    never on text from the network or a log. Import lines are allowed (``T``, ``I`` and ``tvm``
    are always in scope); every argument must be a buffer of static shape. Nothing is known of
    outputs, FLOPs or a reference.

    Raises:
        UserError: the text does not parse, or does not define exactly one such function.
    """
    definition = single_definition(text, name)
    try:
        parsed = tvm.script.from_source(definition)
    except Exception as err:  # the parser raises several error types, all of them the user's
        raise UserError(f"{name}: {_first_parser_line(err)}") from None
    return _custom_workload(_single_prim_func(parsed, name), name)


def workload_from_ir_json(text: str, *, name: str, max_bytes: int | None = None) -> Workload:
    """A workload from outside: TVM IR JSON, admitted by `autosched.admission.admit_program`.

    Raises:
        UserError: the program is not admitted, or an argument is not a static-shape buffer.
    """
    try:
        func = admit_program(text, max_bytes=max_bytes)
    except UserError as error:
        raise UserError(f"{name}: {error}") from None
    return _custom_workload(func, name)


def _custom_workload(func: tvm.tirx.PrimFunc, name: str) -> Workload:
    buffer_args(func, name)
    normalized = normalize_func(func)
    return Workload(name, {}, normalized, None, None, None, source=program_json(normalized))


def load_workload_file(path: str) -> Workload:
    """A workload from a file on this machine, named after the file: TVM IR JSON if it ends in
    ``.json`` (data only), else TVMScript, whose expressions run as Python (see
    `workload_from_tvmscript`).

    Raises:
        UserError: the file cannot be read or does not hold a valid workload.
    """
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as err:
        raise UserError(f"cannot read workload file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise UserError(f"workload file {path} is not UTF-8 text") from None
    try:
        if file.suffix == ".json":
            return workload_from_ir_json(text, name=file.stem)
        return workload_from_tvmscript(text, name=file.stem)
    except UserError as err:
        raise UserError(f"{path}: {err}") from None


def resolve_workload(ref: WorkloadRef, *, max_bytes: int | None = None) -> Workload:
    """Rebuild the workload ``ref`` names, from its IR JSON (admitted again, with ``max_bytes``)
    or from the registry, and check its key.

    Raises:
        UserError: the workload cannot be rebuilt or is not admitted, or rebuilds into a different
            program (its definition or TVM's printer changed since the reference was taken).
    """
    if ref.source is not None:
        workload = workload_from_ir_json(ref.source, name=ref.name, max_bytes=max_bytes)
    else:
        from autosched.workloads import get_workload  # the registry imports this module

        workload = get_workload(ref.name, ref.params)
    if workload.key != ref.key:
        raise UserError(
            f"workload {ref.name} rebuilds with key {workload.key}, not {ref.key}: "
            "its definition or the TVM version changed"
        )
    return workload


def random_inputs(workload: Workload, seed: int) -> list[np.ndarray]:
    """One array per argument: random inputs, and zero-filled outputs when outputs are known.

    Floats are uniform in [-1, 1); integers are small (within [-4, 4], or [0, 4] unsigned) so that
    sums and products over typical sizes cannot overflow; booleans are fair coin flips.

    Raises:
        UserError: an argument has a dtype numpy cannot hold.
    """
    return random_arrays(workload.args, workload.num_outputs or 0, seed)


def random_arrays(
    args: Sequence[tuple[tuple[int, ...], str]], num_outputs: int, seed: int
) -> list[np.ndarray]:
    """`random_inputs` for arguments of these shapes and dtypes, the last ``num_outputs`` of them
    outputs (a program whose weights are packed ahead of time takes them in their packed shape).

    Raises:
        UserError: an argument has a dtype numpy cannot hold.
    """
    rng = np.random.default_rng(seed)
    num_inputs = len(args) - num_outputs
    arrays = []
    for index, (shape, dtype) in enumerate(args):
        np_dtype = _numpy_dtype(dtype)
        if index >= num_inputs:
            arrays.append(np.zeros(shape, np_dtype))
        elif np_dtype.kind == "f":
            arrays.append(rng.uniform(-1.0, 1.0, shape).astype(np_dtype))
        elif np_dtype.kind == "i":
            arrays.append(rng.integers(-4, 5, shape).astype(np_dtype))
        elif np_dtype.kind == "u":
            arrays.append(rng.integers(0, 5, shape).astype(np_dtype))
        elif np_dtype.kind == "b":
            arrays.append(rng.integers(0, 2, shape).astype(np_dtype))
        else:
            raise UserError(f"cannot make random inputs of dtype {dtype}")
    return arrays


_FLOAT_TOLERANCE = {
    # float16 workloads accumulate in float32 (see autosched.workloads), so only the final rounding
    # to half precision (relative 2**-11) separates a correct program from the reference.
    "float16": (1e-2, 1e-2),
    # Reordered float32 sums over a few thousand terms drift by ~1e-5 of the output's magnitude,
    # and a softmax turns the rounding of its scores (tens, from long dot products) into ~1e-4.
    "float32": (1e-3, 1e-3),
    "float64": (1e-7, 1e-7),
}


def tolerance(dtype: str) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing results of ``dtype`` with ``np.allclose``; integers are exact.

    Raises:
        UserError: a dtype numpy cannot hold.
    """
    if dtype in _FLOAT_TOLERANCE:
        return _FLOAT_TOLERANCE[dtype]
    if _numpy_dtype(dtype).kind in "iub":
        return (0.0, 0.0)
    raise UserError(f"no comparison tolerance known for dtype {dtype}")


def mismatch(got: np.ndarray, expected: np.ndarray) -> str | None:
    """None when ``got`` matches ``expected`` within the dtype's tolerance, else how it differs.

    The absolute tolerance scales with the largest magnitude of ``expected``: the rounding error of
    a long floating-point reduction grows with the values it sums, while a wrong program is off by
    about the values themselves.
    """
    if got.shape != expected.shape:
        return f"has shape {got.shape}, not {expected.shape}"
    rtol, atol = tolerance(str(expected.dtype))
    out, ref = got.astype(np.float64), expected.astype(np.float64)
    finite = ref[np.isfinite(ref)]
    scale = max(1.0, float(np.abs(finite).max())) if finite.size else 1.0
    if np.allclose(out, ref, rtol=rtol, atol=atol * scale):
        return None
    with np.errstate(invalid="ignore"):
        worst = float(np.nanmax(np.abs(out - ref))) if out.size else 0.0
    return f"differs from the reference (max abs error {worst:.3g})"


def _dtype_bytes(dtype: str) -> int:
    return tvm.runtime.DataType(dtype).bits * tvm.runtime.DataType(dtype).lanes // 8


def _numpy_dtype(dtype: str) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError:
        raise UserError(f"dtype {dtype} has no numpy equivalent") from None


def buffer_args(func: tvm.tirx.PrimFunc, name: str) -> list[tuple[tuple[int, ...], str]]:
    """Shape and dtype of each buffer argument of ``func`` (called ``name`` in messages).

    Raises:
        UserError: an argument is a scalar or has a symbolic shape.
    """
    try:
        infos = ArgInfo.from_prim_func(func)
    except (TypeError, ValueError):  # a symbolic shape, or a scalar argument
        raise UserError(
            f"{name}: every argument must be a buffer of constant shape "
            "(dynamic shapes and scalar arguments are not supported)"
        ) from None
    return [(tuple(int(d) for d in info.shape), str(info.dtype)) for info in infos]


def single_definition(text: str, name: str) -> str:
    """The source of the one top-level definition in ``text``, at its original line numbers.

    The TVMScript parser refuses import statements, which files usually start with; cutting the
    definition out drops them while keeping line numbers in the parser's messages right.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        raise UserError(f"{name}: line {err.lineno}: {err.msg}") from None
    definitions = [node for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)]
    if len(definitions) != 1:
        found = ", ".join(node.name for node in definitions) or "none"
        raise UserError(
            f"{name}: expected exactly one @T.prim_func or @I.ir_module definition, found {found}"
        )
    node = definitions[0]
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    lines = text.splitlines()
    return "\n" * (start - 1) + "\n".join(lines[start - 1 : node.end_lineno]) + "\n"


def _single_prim_func(parsed: object, name: str) -> tvm.tirx.PrimFunc:
    if isinstance(parsed, tvm.tirx.PrimFunc):
        return parsed
    if not isinstance(parsed, tvm.IRModule):
        raise UserError(f"{name}: expected a @T.prim_func or an @I.ir_module")
    functions = dict(parsed.functions_items())
    prim_funcs = [f for f in functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    if len(functions) != 1 or len(prim_funcs) != 1:
        raise UserError(
            f"{name}: the module must hold exactly one function, a PrimFunc; "
            f"it holds {len(functions)} function(s), {len(prim_funcs)} PrimFunc(s)"
        )
    return prim_funcs[0]


_LOCATION = re.compile(r"-->\s*\S*?:(\d+):\d+")


def _first_parser_line(err: Exception) -> str:
    """The first meaningful line of a TVMScript parser error, with its line number when given.

    A well-formedness failure says what is wrong on a later ``Traceback:`` line; that replaces
    the advice the first line gives after its first sentence.
    """
    message = str(err)
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    first = lines[0].removeprefix("error:").strip() if lines else type(err).__name__
    cause = next((line for line in lines if line.startswith("Traceback:")), None)
    if cause:
        first = f"{first.split('. ')[0].rstrip('.')}: {cause.removeprefix('Traceback:').strip()}"
    location = _LOCATION.search(message)
    return f"line {location.group(1)}: {first}" if location else first
