"""A model file's import and compile, each in a child process of its own (``autosched.measure``'s
measuring children, in their sandbox) under an address-space and a time limit, for a process that
must outlive what the file asks for: the tuning service. A file that gets past the bounds on its
tensors (``onnx_bounds``) and outgrows the limits costs that child, which dies or is killed; the
caller gets one line.

Requests carry the file's bytes, never a path; replies are plain data: the tasks' programs as IR
JSON (admitted again by the caller, as every program from outside is), the output check and the
compiled library's bytes. Only ONNX files come this way.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autosched.errors import ServiceUnavailable, TooLarge, UserError
from autosched.exports.models import output_specs
from autosched.measure.child import ChildDied, ChildProcess, ChildTimeout, RequestFailed
from autosched.measure.forkserver import ForkServerLost
from autosched.measure.serving import ResourceLimits
from autosched.model.compile import (
    OutputCheck,
    OutputMismatch,
    TaskSchedule,
    check_outputs,
    compile_model,
)
from autosched.model.load import InputSpec, Model, ModelFormat, import_onnx, load_model
from autosched.model.onnx_bounds import TensorBounds
from autosched.model.tasks import ModelTask, extract_tasks
from autosched.records import RecordView
from autosched.workload import workload_from_ir_json

MEMORY_VARIABLE = "AUTOSCHED_MODEL_MEMORY_BYTES"
SECS_VARIABLE = "AUTOSCHED_MODEL_SECS"

_STARTED_SECS = 60.0
"""How long a child, once started, may take to answer that it is up."""

_OUT_OF_MEMORY = ("MemoryError", "Unable to allocate", "bad_alloc", "Cannot allocate memory")
"""What a child's error says when it ran out of address space (Python's, NumPy's, C++'s, the
system's)."""


@dataclass(frozen=True)
class ModelLimits:
    """What the child working on a model may use: ``memory_bytes`` of address space and
    ``secs`` of time (of CPU, and of the clock) for each step, and the ``bounds`` on the model's
    tensors."""

    memory_bytes: int
    secs: float
    bounds: TensorBounds


@dataclass(frozen=True)
class ModelSource:
    """An ONNX model file as a caller keeps it: its bytes, its model's name (safe as a file
    name), the name its problems are told under, and the shapes given for its inputs
    (``NAME=DIMxDIM...:DTYPE``)."""

    data: bytes
    name: str
    label: str
    inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExtractedTask:
    """A task as the child extracted it: its name, weight, and its admitted workload's IR JSON
    (``program``), or why it is not admitted (``problem``)."""

    name: str
    weight: int
    program: str | None
    problem: str | None

    def model_task(self) -> ModelTask:
        """The task in this process, its program admitted here again; it holds no TVM module of
        its own: it is planned and recorded here, compiled in a child.

        Raises:
            UserError: the program is not admitted.
        """
        if self.program is None:
            return ModelTask(self.name, self.weight, None, None, self.problem)
        workload = workload_from_ir_json(self.program, name=self.name)
        return ModelTask(self.name, self.weight, None, workload)


@dataclass(frozen=True)
class ImportedModel:
    """What a child learnt of a model it imported: its name, key and format (a `Model`'s), its
    inputs, its outputs (`output_specs`), its reference's name and its tasks, heaviest first."""

    name: str
    key: str
    format_name: str
    inputs: tuple[InputSpec, ...]
    outputs: tuple[dict[str, Any], ...]
    reference_name: str
    tasks: tuple[ExtractedTask, ...]

    @property
    def format(self) -> ModelFormat:
        return ModelFormat(self.format_name)

    def model_tasks(self) -> list[ModelTask]:
        """The tasks in this process (see `ExtractedTask.model_task`)."""
        return [task.model_task() for task in self.tasks]


@dataclass(frozen=True)
class BuiltModel:
    """A model a child compiled: its library's bytes (where asked for) and, where its outputs
    were checked, the check or how they differ (``mismatch``)."""

    library: bytes | None
    check: OutputCheck | None
    mismatch: str | None


@dataclass(frozen=True)
class Refusal:
    """A child's one-line refusal of a model (a `UserError` there)."""

    message: str


@dataclass(frozen=True)
class Started:
    """Answer at once: the child is up."""

    def execute(self) -> None:
        return None


@dataclass(frozen=True)
class ImportModel:
    """Import a model file and extract its tasks for ``target``."""

    source: ModelSource
    target: dict
    bounds: TensorBounds

    def execute(self) -> ImportedModel | Refusal:
        try:
            with _opened(self.source, self.bounds) as model:
                tasks = extract_tasks(model, self.target)
                return ImportedModel(
                    name=model.name,
                    key=model.key,
                    format_name=model.format.value,
                    inputs=model.inputs,
                    outputs=tuple(output_specs(model)),
                    reference_name=model.reference_name,
                    tasks=tuple(
                        ExtractedTask(
                            task.name,
                            task.weight,
                            None if task.workload is None else task.workload.source,
                            task.problem,
                        )
                        for task in tasks
                    ),
                )
        except UserError as error:
            return Refusal(_line(error))


@dataclass(frozen=True)
class BuildModel:
    """Compile a model file for ``target`` with the records of its tasks (by workload key;
    a task without one keeps TVM's default schedule); then check its outputs against its
    framework's (``check``) and export its library (``library``), as asked."""

    source: ModelSource
    target: dict
    bounds: TensorBounds
    records: dict[str, RecordView]
    check: bool
    library: bool

    def execute(self) -> BuiltModel | Refusal:
        try:
            with _opened(self.source, self.bounds) as model:
                tasks = extract_tasks(model, self.target)
                if set(self.records) - {task.key for task in tasks}:
                    raise UserError(
                        f"{self.source.label}: the model's tasks are not those it was planned "
                        "with (has TVM changed?); submit it again"
                    )
                schedules = [TaskSchedule(t, self.records.get(t.key or "")) for t in tasks]
                executable = compile_model(model, schedules, self.target)
                check = mismatch = library = None
                if self.check:
                    try:
                        check = check_outputs(model, executable, self.target)
                    except OutputMismatch as error:
                        mismatch = _line(error)
                if self.library:
                    path = model.path.with_suffix(".so")
                    executable.export_library(str(path))
                    library = path.read_bytes()
                return BuiltModel(library, check, mismatch)
        except UserError as error:
            return Refusal(_line(error))


def import_model(source: ModelSource, target: dict, limits: ModelLimits) -> ImportedModel:
    """Import ``source`` and extract its tasks for ``target`` in a child under ``limits``.

    Raises:
        UserError: the file is not a self-contained ONNX model, an operator is not supported
            (named), an input's shape is not static, a tensor is over the bounds, or the child
            ran past its time.
        TooLarge: the child ran out of memory, or died.
        ServiceUnavailable: no child starts (the server's fault, not the file's).
    """
    imported = _run(ImportModel(source, target, limits.bounds), limits, source, "importing it")
    assert isinstance(imported, ImportedModel)
    return imported


def build_model(
    source: ModelSource,
    target: dict,
    limits: ModelLimits,
    records: Mapping[str, RecordView],
    *,
    check: bool,
    library: bool,
) -> BuiltModel:
    """Compile ``source`` for ``target`` with ``records`` (by workload key) in a child under
    ``limits``; check its outputs (``check``) and export its library (``library``) there.

    Raises:
        UserError: TVM cannot build it, or as `import_model`.
        TooLarge, ServiceUnavailable: as `import_model`.
    """
    request = BuildModel(source, target, limits.bounds, dict(records), check, library)
    built = _run(request, limits, source, "compiling it")
    assert isinstance(built, BuiltModel)
    return built


def _run(
    request: ImportModel | BuildModel, limits: ModelLimits, source: ModelSource, doing: str
) -> ImportedModel | BuiltModel:
    """The reply of a fresh child to ``request``, its failures made one-line errors: the
    model's (4xx), or, where no child starts, the server's (`ServiceUnavailable`)."""
    child = ChildProcess(
        env={"TVM_NUM_THREADS": "1"},
        limits=ResourceLimits(
            address_space_bytes=limits.memory_bytes, cpu_secs_per_request=math.ceil(limits.secs)
        ),
    )
    memory = f"{limits.memory_bytes} bytes of memory ({MEMORY_VARIABLE})"
    try:
        child.call(Started(), _STARTED_SECS)
    except (ChildDied, ChildTimeout, ForkServerLost, RequestFailed) as error:
        child.close()
        raise ServiceUnavailable(f"the server cannot start a process for models: {error}") from None
    try:
        reply = child.call(request, limits.secs)
    except ChildTimeout:
        raise UserError(
            f"{source.label}: {doing} took over {limits.secs:g} s, the limit ({SECS_VARIABLE})"
        ) from None
    except ChildDied as error:
        raise TooLarge(
            f"{source.label}: {doing} needed over {memory}, or crashed: {error}"
        ) from None
    except RequestFailed as error:
        if _out_of_memory(str(error)):
            raise TooLarge(f"{source.label}: {doing} needed over {memory}") from None
        raise UserError(f"{source.label}: {doing} failed: {_line(error)}") from None
    finally:
        child.close()
    if isinstance(reply, Refusal):
        if _out_of_memory(reply.message):
            raise TooLarge(f"{reply.message} (the limit: {memory})")
        raise UserError(reply.message)
    return reply


def _out_of_memory(text: str) -> bool:
    return any(sign in text for sign in _OUT_OF_MEMORY)


@contextmanager
def _opened(source: ModelSource, bounds: TensorBounds) -> Iterator[Model]:
    """The model imported from its bytes written to this process's directory, its problems told
    under the source's label rather than the file's path.

    Raises:
        UserError: not an ONNX model, one with external data, an operator not supported, an
            input whose shape is not static, or a tensor over ``bounds``.
    """
    _refuse_external_data(source)
    path = Path.cwd() / f"{source.name}.onnx"
    path.write_bytes(source.data)
    try:
        yield load_model(path, source.inputs, bounds=bounds)
    except UserError as error:
        message = str(error).replace(str(path), source.label).replace("--input", "inputs")
        raise type(error)(message) from None


def _refuse_external_data(source: ModelSource) -> None:
    """Refuse an ONNX file whose tensors live in other files: a file from elsewhere names no
    file of this machine's.

    Raises:
        UserError: the file is not an ONNX model, or it refers to external data.
    """
    onnx = import_onnx()
    try:
        proto = onnx.load_model_from_string(source.data)
    except Exception as error:  # protobuf's decode errors
        raise UserError(f"{source.label}: not a valid ONNX model: {_line(error)}") from None
    tensors = [*proto.graph.initializer]
    for node in proto.graph.node:
        tensors.extend(attribute.t for attribute in node.attribute if attribute.HasField("t"))
    if any(tensor.data_location == onnx.TensorProto.EXTERNAL for tensor in tensors):
        raise UserError(
            f"{source.label}: its tensors are kept in external files; send one self-contained "
            "ONNX file"
        )


def _line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(error).__name__
