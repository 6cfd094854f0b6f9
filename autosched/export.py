"""Export of tuned schedules in the forms that users and TVM consume.

- ``tvmscript``: the best scheduled PrimFunc as TVMScript text;
- ``metaschedule-db``: a MetaSchedule JSON database directory that TVM's own flows load;
- ``library``: a compiled shared library with a JSON sidecar describing the function.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import tvm
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord

from autosched.errors import UserError
from autosched.intrinsics import use_tensor_intrinsics
from autosched.log import TuningLog
from autosched.records import RecordView
from autosched.schedule import apply_trace
from autosched.target import canonical_target, target_key, to_tvm_target
from autosched.workload import Workload


class ExportFormat(str, Enum):
    TVMSCRIPT = "tvmscript"
    METASCHEDULE_DB = "metaschedule-db"
    LIBRARY = "library"


@dataclass(frozen=True)
class BestSchedule:
    """The best verified schedule of a workload on a target, replayed from the log."""

    workload: Workload
    target: dict
    record: RecordView
    schedule: Schedule


def best_schedule(log: TuningLog, workload: Workload, target: dict) -> BestSchedule:
    """Look up and replay the best record of ``workload`` on ``target``.

    Raises:
        UserError: the log holds no verified record for them.
    """
    target = canonical_target(target)
    found_workload = log.find_workload(workload.key)
    found_target = log.find_target(target_key(target))
    best = (
        log.best(found_workload.id, found_target.id)
        if found_workload is not None and found_target is not None
        else None
    )
    if best is None:
        raise UserError(
            f"the tuning log has no tuned schedule of {workload.name} for this target; "
            "run `autosched tune` first"
        )
    return replay(workload, target, best)


def replay(workload: Workload, target: dict, record: RecordView) -> BestSchedule:
    """The schedule of ``record`` (a record of ``workload`` on ``target``), replayed."""
    use_tensor_intrinsics(target)
    return BestSchedule(workload, target, record, apply_trace(workload.mod, record.trace_json))


def export(best: BestSchedule, fmt: ExportFormat, output: Path) -> list[Path]:
    """Write ``best`` in format ``fmt`` at ``output``; returns the paths written.

    Raises:
        UserError: ``output`` does not suit the format (a library must end in ``.so``; a
            database is a directory, the others files), or it cannot be written (its missing
            directories are made first).
    """
    if fmt is ExportFormat.LIBRARY and output.suffix != ".so":
        raise UserError(f"a library export needs an output path ending in .so, not {output}")
    if fmt is ExportFormat.METASCHEDULE_DB and output.exists() and not output.is_dir():
        raise UserError(f"{output} is a file; a MetaSchedule database is written as a directory")
    if fmt is not ExportFormat.METASCHEDULE_DB and output.is_dir():
        raise UserError(f"{output} is a directory; give the path of the file to write")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        if fmt is ExportFormat.TVMSCRIPT:
            return [_export_tvmscript(best, output)]
        if fmt is ExportFormat.METASCHEDULE_DB:
            return _export_metaschedule_db(best, output)
        return _export_library(best, output)
    except OSError as error:
        raise UserError(f"cannot write {output}: {error.strerror or error}") from None


def _describe(best: BestSchedule) -> dict[str, object]:
    median = best.record.median_secs
    return {
        "workload": best.workload.name,
        "params": dict(best.workload.params),
        "workload_key": best.workload.key,
        "target": best.target,
        "median_latency_us": None if median is None else median * 1e6,
    }


def _export_tvmscript(best: BestSchedule, output: Path) -> Path:
    header = "".join(f"# {key}: {json.dumps(value)}\n" for key, value in _describe(best).items())
    output.write_text(header + best.schedule.mod["main"].script() + "\n")
    return output


def _export_metaschedule_db(best: BestSchedule, output: Path) -> list[Path]:
    output.mkdir(parents=True, exist_ok=True)
    database = JSONDatabase(work_dir=str(output))
    record = TuningRecord(
        best.schedule.trace,
        database.commit_workload(best.workload.mod),
        list(best.record.samples),
        to_tvm_target(best.target),
        ArgInfo.from_prim_func(best.workload.func),
    )
    database.commit_tuning_record(record)
    return [output / "database_workload.json", output / "database_tuning_record.json"]


def _export_library(best: BestSchedule, output: Path) -> list[Path]:
    tvm.compile(best.schedule.mod, target=to_tvm_target(best.target)).export_library(str(output))
    names = [param.name for param in best.workload.func.params]
    arguments = [
        {"name": name, "shape": list(shape), "dtype": dtype}
        for name, (shape, dtype) in zip(names, best.workload.args, strict=True)
    ]
    signature = {"function": "main", "arguments": arguments, **_describe(best)}
    sidecar = output.with_suffix(".json")
    sidecar.write_text(json.dumps(signature, indent=2) + "\n")
    return [output, sidecar]
