"""Model files into Relax: an ONNX file, a PyTorch ``ExportedProgram`` (``.pt2``) or a Relax
IRModule in TVMScript (``.py``), imported with static input shapes and weights bound as constants
and made ready for inference (``autosched.model.prepare``), with the framework's own way of
running it, the reference its compiled form is checked against.

Nothing here compiles or tunes. A ``.pt2`` file is unpickled by ``torch.export.load``: load the
user's own files only. A ``.py`` file passes the TVMScript allow-list (``autosched.script_check``,
widened to ``R.``) before TVM's parser evaluates its expressions.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import tvm
from tvm import relax

from autosched.errors import UserError
from autosched.model import MODEL_SUFFIXES
from autosched.model.onnx_bounds import TensorBounds, check_tensor_bounds
from autosched.model.prepare import for_inference
from autosched.script_check import check_script
from autosched.torch_guard import import_torch
from autosched.workload import single_definition

if TYPE_CHECKING:
    import onnx

Reference = Callable[[Sequence[np.ndarray]], list[np.ndarray]]
"""Runs the model as its framework does: input arrays in, output arrays out."""


class ModelFormat(str, Enum):
    ONNX = "onnx"
    PYTORCH = "pytorch"
    RELAX = "relax"


@dataclass(frozen=True)
class InputSpec:
    """A model input of static shape."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True)
class Model:
    """A model imported into Relax: ``mod``'s ``main`` takes ``inputs`` in order, every weight a
    constant, made ready for inference by ``autosched.model.prepare`` (the module that is tuned
    and compiled). ``reference`` runs the model in its framework (ONNX Runtime, PyTorch eager); a
    Relax file has none, and is checked against TVM's untuned build instead."""

    name: str
    path: Path
    format: ModelFormat
    mod: tvm.IRModule
    inputs: tuple[InputSpec, ...]
    reference: Reference | None
    reference_name: str
    output_names: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Identity of the model in the log: a hash of its file and its inputs' shapes."""
        digest = hashlib.sha256(self.path.read_bytes())
        digest.update(json.dumps([spec.as_json() for spec in self.inputs]).encode())
        return digest.hexdigest()[:32]


_INPUT = re.compile(r"^([^=]+)=(\d+(?:x\d+)*)(?::(\w+))?$")


def parse_input_specs(values: Sequence[str]) -> dict[str, InputSpec]:
    """``NAME=1x3x32x32[:float32]`` options, by name (the dtype defaults to float32).

    Raises:
        UserError: a value is malformed or names an input twice.
    """
    specs: dict[str, InputSpec] = {}
    for value in values:
        match = _INPUT.match(value.strip())
        if match is None:
            raise UserError(
                f"--input {value!r}: expected NAME=DIMxDIM...[:DTYPE], e.g. x=1x3x32x32"
            )
        name, dims, dtype = match.group(1), match.group(2), match.group(3) or "float32"
        if name in specs:
            raise UserError(f"--input gives {name} twice")
        specs[name] = InputSpec(name, tuple(int(d) for d in dims.split("x")), dtype)
    return specs


def load_model(
    path: Path, inputs: Sequence[str] = (), *, bounds: TensorBounds | None = None
) -> Model:
    """Import the model file ``path``; ``inputs`` (``NAME=1x3x32x32:float32``) fix the shapes the
    file leaves open. An ONNX file's tensors are bounded first (``bounds``, by default from the
    environment: ``autosched.model.onnx_bounds``).

    Raises:
        UserError: the file is missing or not a model of its kind, an operator is not supported
            (named), an input's shape is not static, or a tensor is over ``bounds``; one line.
    """
    if not path.is_file():
        raise UserError(f"model file {path} does not exist")
    given = parse_input_specs(inputs)
    loaders = {
        ".onnx": partial(_load_onnx, bounds=bounds),
        ".pt2": _load_pytorch,
        ".py": _load_relax,
    }
    loader = loaders.get(path.suffix)
    if loader is None:
        raise UserError(f"{path}: a model file ends in {', '.join(MODEL_SUFFIXES)}")
    model = loader(path, given)
    unknown = set(given) - {spec.name for spec in model.inputs}
    if unknown:
        names = ", ".join(spec.name for spec in model.inputs)
        raise UserError(f"{path}: --input names {', '.join(sorted(unknown))}; its inputs: {names}")
    return replace(model, mod=_for_inference(model.mod, path))


def _for_inference(mod: tvm.IRModule, path: Path) -> tvm.IRModule:
    """``mod`` made ready for inference (``autosched.model.prepare``)."""
    try:
        return for_inference()(mod)
    except Exception as error:  # TVM's pass errors come in its own types
        raise UserError(f"{path}: TVM cannot prepare the model: {_first_line(error)}") from None


def import_onnx() -> ModuleType:
    """The ``onnx`` package, else a one-line UserError saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise UserError(
            "ONNX models need the onnx package: pip install 'autosched[models]'"
        ) from None
    return onnx


def _load_onnx(path: Path, given: dict[str, InputSpec], bounds: TensorBounds | None) -> Model:
    onnx = import_onnx()
    from onnx import helper
    from tvm.relax.frontend.onnx import from_onnx

    try:
        proto = onnx.load(str(path))
        onnx.checker.check_model(proto)
    except Exception as error:  # protobuf and the checker raise several types, all the file's
        raise UserError(f"{path}: not a valid ONNX model: {_first_line(error)}") from None
    initializers = {tensor.name for tensor in proto.graph.initializer}
    specs = []
    for value in proto.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        dtype = str(np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)))
        dims = tuple(
            dim.dim_value if dim.HasField("dim_value") else (dim.dim_param or "?")
            for dim in tensor_type.shape.dim
        )
        specs.append(_static_spec(path, value.name, dims, dtype, given))
    shapes = {spec.name: spec.shape for spec in specs}
    check_tensor_bounds(proto, shapes, bounds or TensorBounds.from_env(), label=str(path))
    imported = partial(
        from_onnx,
        shape_dict={spec.name: list(spec.shape) for spec in specs},
        dtype_dict={spec.name: spec.dtype for spec in specs},
    )
    try:
        mod = imported(proto)
    except tvm.error.OpNotImplemented as error:
        operators = str(error).split(":", 1)[-1].strip()
        raise UserError(
            f"{path}: operators TVM's ONNX importer does not support: {operators}"
        ) from None
    except Exception as error:  # an importer failure on a checked model is an unsupported use
        folded = _constants_folded(proto)
        if folded is None:
            raise UserError(
                f"{path}: TVM cannot import this ONNX model: {_first_line(error)}"
            ) from None
        check_tensor_bounds(folded, shapes, bounds or TensorBounds.from_env(), label=str(path))
        try:
            mod = imported(folded)
        except Exception:  # the folded graph fails too: the first failure says why
            raise UserError(
                f"{path}: TVM cannot import this ONNX model: {_first_line(error)}"
            ) from None

    def run_onnxruntime(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        try:
            import onnxruntime
        except ImportError:
            raise UserError(
                "checking an ONNX model needs onnxruntime: pip install 'autosched[models]'"
            ) from None
        session = onnxruntime.InferenceSession(
            proto.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        feed = {spec.name: array for spec, array in zip(specs, arrays, strict=True)}
        return [np.asarray(out) for out in session.run(None, feed)]

    model = _model(path, ModelFormat.ONNX, mod, specs, run_onnxruntime, "ONNX Runtime")
    return replace(model, output_names=tuple(value.name for value in proto.graph.output))


def _constants_folded(proto: onnx.ModelProto) -> onnx.ModelProto | None:
    """``proto`` with what its constants compute folded into constants by ONNX Runtime's basic
    graph optimizations, which keep to ONNX's own operators; None without ONNX Runtime, or where
    it cannot load the model. PyTorch's TorchScript exporter writes the padding of torchvision's
    ``swin_t`` as arithmetic on constants (``Mod``, ``ConstantOfShape``, ``Concat``) that neither
    ONNX's shape inference nor TVM's importer evaluates; folded, each reshape has a known shape."""
    try:
        import onnx
        import onnxruntime
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as folder:
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(Path(folder) / "folded.onnx")
        try:
            onnxruntime.InferenceSession(
                proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
            return onnx.load(options.optimized_model_filepath)
        except Exception:  # ONNX Runtime refuses the model: there is nothing folded to import
            return None


def _load_pytorch(path: Path, given: dict[str, InputSpec]) -> Model:
    try:
        torch = import_torch()
    except ImportError:
        raise UserError(".pt2 models need PyTorch: pip install torch") from None
    from tvm.relax.frontend.torch import from_exported_program

    # torch.export.load logs the traceback of a file it cannot read before it raises (2.14)
    export_log = logging.getLogger("torch.export")
    was_disabled, export_log.disabled = export_log.disabled, True
    try:
        program = torch.export.load(str(path))
    except Exception as error:  # a file that is not an ExportedProgram archive
        raise UserError(f"{path}: not a torch.export program: {_first_line(error)}") from None
    finally:
        export_log.disabled = was_disabled
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    specs = []
    for name in program.graph_signature.user_inputs:
        value = placeholders[name].meta.get("val")
        if not isinstance(value, torch.Tensor):
            raise UserError(
                f"{path}: input {name} is not a tensor; only tensor inputs are supported"
            )
        dims = tuple(d if isinstance(d, int) else str(d) for d in value.shape)
        dtype = str(value.dtype).removeprefix("torch.")
        spec = _static_spec(path, name, dims, dtype, {})
        if name in given and given[name] != spec:
            raise UserError(
                f"{path}: input {name} is {_shape_text(spec)} in the exported program, "
                f"not {_shape_text(given[name])}; export it with the shape wanted"
            )
        specs.append(spec)
    try:
        mod = from_exported_program(program, unwrap_unit_return_tuple=True)
    except AssertionError as error:
        message = str(error)
        if message.startswith("Unsupported function types"):
            operators = message.removeprefix("Unsupported function types").strip(" []")
            raise UserError(
                f"{path}: operators TVM's PyTorch importer does not support: {operators}"
            ) from None
        raise UserError(f"{path}: TVM cannot import this program: {_first_line(error)}") from None
    except Exception as error:  # the importer's other failures are unsupported uses
        raise UserError(f"{path}: TVM cannot import this program: {_first_line(error)}") from None
    module = program.module()

    def run_eager(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            result = module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays))
        outputs = result if isinstance(result, tuple | list) else (result,)
        return [out.detach().numpy() for out in outputs]

    return _model(path, ModelFormat.PYTORCH, mod, specs, run_eager, "PyTorch eager")


def _load_relax(path: Path, given: dict[str, InputSpec]) -> Model:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read model file {path}: {error}") from None
    check_script(text, path.stem, roots=_RELAX_ROOTS, purpose="a Relax model file")
    _check_module_alias(text, path)
    try:
        parsed = tvm.script.from_source(single_definition(text, path.stem))
    except UserError as error:
        raise UserError(f"{path}: {error}") from None
    except Exception as error:  # the parser raises several types, all of them the file's
        raise UserError(f"{path}: {_first_line(error)}") from None
    functions = (
        {gvar.name_hint: func for gvar, func in parsed.functions_items()}
        if isinstance(parsed, tvm.IRModule)
        else {}
    )
    if not isinstance(functions.get("main"), relax.Function):
        raise UserError(f"{path}: expected an @I.ir_module whose main is an @R.function")
    main = parsed["main"]
    specs = []
    for param in main.params:
        ty = param.ty
        if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
            raise UserError(f"{path}: input {param.name} of main is not a tensor of known shape")
        dims = tuple(int(d) if isinstance(d, tvm.tirx.IntImm) else str(d) for d in ty.shape.values)
        specs.append(_static_spec(path, param.name, dims, str(ty.dtype), {}))
    if given:
        raise UserError(f"{path}: a Relax module's shapes are in its main; --input is not needed")
    return _model(path, ModelFormat.RELAX, parsed, specs, None, "TVM's untuned build")


_RELAX_ROOTS = frozenset({"T", "I", "R", "cls"})
"""Names a Relax file may use attributes of: TVMScript's, and ``cls``, the alias of the module
class that TVM's printer writes (``cls = Module``) to refer to the module's functions."""


def _check_module_alias(text: str, path: Path) -> None:
    """Refuse a Relax file that binds ``cls`` to anything but one of its classes.

    Raises:
        UserError: with the line of the binding.
    """
    tree = ast.parse(text)
    classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if "cls" in names and not (
                isinstance(node.value, ast.Name) and node.value.id in classes
            ):
                raise UserError(f"{path}: line {node.lineno}: cls may only name the module class")
        bound = (
            [node.target] if isinstance(node, ast.For | ast.AugAssign | ast.AnnAssign) else []
        ) + ([item.optional_vars for item in node.items] if isinstance(node, ast.With) else [])
        if isinstance(node, ast.arg) and node.arg == "cls":
            bound.append(ast.Name("cls"))
        if any(isinstance(name, ast.Name) and name.id == "cls" for name in bound):
            raise UserError(
                f"{path}: line {getattr(node, 'lineno', '?')}: cls may only name the module class"
            )


def _static_spec(
    path: Path,
    name: str,
    dims: tuple[int | str, ...],
    dtype: str,
    given: dict[str, InputSpec],
) -> InputSpec:
    """The input's spec: as the file says where its shape is static, else as ``--input`` gives.

    Raises:
        UserError: the shape is not static and ``--input`` does not fix it, or ``--input``
            contradicts a static dimension of the file.
    """
    if name in given:
        spec = given[name]
        fixed = [(i, d) for i, d in enumerate(dims) if isinstance(d, int) and d > 0]
        if len(spec.shape) != len(dims) or any(spec.shape[i] != d for i, d in fixed):
            raise UserError(
                f"{path}: --input {name} is {_shape_text(spec)}, but the model's input is "
                f"{'x'.join(str(d) for d in dims)}:{dtype}"
            )
        return InputSpec(name, spec.shape, dtype)
    if any(not isinstance(d, int) or d <= 0 for d in dims):
        shown = "x".join(str(d) for d in dims) or "unknown"
        raise UserError(
            f"{path}: input {name} has no static shape ({shown}); give it with "
            f"--input {name}=DIMxDIM...:{dtype}"
        )
    return InputSpec(name, tuple(int(d) for d in dims), dtype)


def _model(
    path: Path,
    fmt: ModelFormat,
    mod: tvm.IRModule,
    specs: Sequence[InputSpec],
    reference: Reference | None,
    reference_name: str,
) -> Model:
    """The imported model, checked to take exactly ``specs`` as its inputs."""
    params = mod["main"].params
    if len(params) != len(specs):
        raise UserError(
            f"{path}: the imported main takes {len(params)} inputs, the model declares {len(specs)}"
        )
    return Model(path.stem, path, fmt, mod, tuple(specs), reference, reference_name)


def _shape_text(spec: InputSpec) -> str:
    return f"{'x'.join(str(d) for d in spec.shape)}:{spec.dtype}"


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(error).__name__
