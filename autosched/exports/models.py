"""The files a tuned model exports to: the Relax VM library with its manifest (its inputs,
outputs, target, tasks and output check, the header ``manifest`` writes, and the model file it was
compiled from), or the MetaSchedule database of its tasks' best schedules."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from tvm import relax
from tvm.s_tir.meta_schedule.database import JSONDatabase

from autosched.errors import UserError
from autosched.exports.manifest import artefact_header
from autosched.model.compile import OutputCheck, TaskSchedule, fill_database
from autosched.model.load import Model
from autosched.target import canonical_target


def output_specs(model: Model) -> list[dict[str, object]]:
    """Name, shape and dtype of each output of ``model``'s main."""
    returned = model.mod["main"].ret_ty
    leaves = list(returned.fields) if isinstance(returned, relax.TupleType) else [returned]
    specs: list[dict[str, object]] = []
    for index, leaf in enumerate(leaves):
        tensor = isinstance(leaf, relax.TensorType)
        shape = None
        if tensor and isinstance(leaf.shape, relax.ShapeExpr):
            shape = [int(dim) for dim in leaf.shape.values]
        dtype = str(leaf.dtype) if tensor else None
        name = model.output_names[index] if index < len(model.output_names) else f"output{index}"
        specs.append({"name": name, "shape": shape, "dtype": dtype})
    return specs


def export_library(
    model: Model,
    executable: relax.VMExecutable,
    schedules: Sequence[TaskSchedule],
    target: dict,
    check: OutputCheck,
    output: Path,
) -> list[Path]:
    """Write the executable as ``output`` (a ``.so`` that ``tvm.runtime.load_module`` loads and
    ``relax.VirtualMachine`` runs) and its sidecar ``output.json``: inputs, outputs, target,
    tasks and the output check.

    Raises:
        UserError: ``output`` does not end in ``.so`` or cannot be written.
    """
    if output.suffix != ".so":
        raise UserError(f"a library export needs an output path ending in .so, not {output}")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        executable.export_library(str(output))
        sidecar = output.with_suffix(".json")
        document = {
            "model": model.name,
            "format": model.format.value,
            "function": "main",
            "target": canonical_target(target),
            "inputs": [spec.as_json() for spec in model.inputs],
            "outputs": output_specs(model),
            "tasks": [_task_json(schedule) for schedule in schedules],
            "check": check.as_json(),
        }
        sidecar.write_text(json.dumps(document, indent=2) + "\n")
    except OSError as error:
        raise UserError(f"cannot write {output}: {error.strerror or error}") from None
    return [output, sidecar]


def complete_model_manifest(sidecar: Path, target: dict, source: Path) -> None:
    """Make the sidecar of a model library (`export_library`) its manifest: the header
    `artefact_header` writes, and the model file it was compiled from (its path and SHA-256, for a
    peer to run the same model). The whole model is timed warm; its
    kernels were tuned cache-cold, one by one.

    Raises:
        UserError: the sidecar or the model file cannot be read or written.
    """
    try:
        document = json.loads(sidecar.read_text())
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        header = artefact_header("model", sidecar.with_suffix(".so"), target, cold=False)
        manifest = {
            **header,
            **document,
            "source": {"path": str(source.resolve()), "sha256": digest},
        }
        sidecar.write_text(json.dumps(manifest, indent=2) + "\n")
    except OSError as error:
        raise UserError(f"cannot write {sidecar}: {error.strerror or error}") from None


def export_database(schedules: Sequence[TaskSchedule], target: dict, output: Path) -> list[Path]:
    """Write the tasks' best schedules as a MetaSchedule JSON database directory, which TVM's
    ``MetaScheduleApplyDatabase`` applies to the model fused as `scheduled_module` fuses it (the
    README spells out the passes).

    Raises:
        UserError: ``output`` is a file or cannot be written.
    """
    if output.exists() and not output.is_dir():
        raise UserError(f"{output} is a file; a MetaSchedule database is written as a directory")
    try:
        output.mkdir(parents=True, exist_ok=True)
        fill_database(JSONDatabase(work_dir=str(output)), schedules, target)
    except OSError as error:
        raise UserError(f"cannot write {output}: {error.strerror or error}") from None
    return [output / "database_workload.json", output / "database_tuning_record.json"]


def _task_json(schedule: TaskSchedule) -> dict[str, object]:
    record = schedule.record
    return {
        "name": schedule.task.name,
        "workload_key": schedule.task.key,
        "weight": schedule.task.weight,
        "latency_us": None
        if record is None or record.median_secs is None
        else record.median_secs * 1e6,
        "default_schedule": schedule.reason,
    }
