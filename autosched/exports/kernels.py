"""Export of a kernel's tuned schedule in the forms that users and TVM consume.

- ``tvmscript``: the best scheduled PrimFunc as TVMScript text;
- ``metaschedule-db``: a MetaSchedule JSON database directory that TVM's own flows load;
- ``library``: a compiled shared library with its manifest (``manifest``), the JSON beside it
  that ``autosched.runtime`` loads it by: its function's arguments, and how the tuner ran it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

import tvm
from sqlalchemy import select
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord

from autosched.errors import UserError
from autosched.exports.manifest import artefact_header
from autosched.fallback import Fallback, FallbackLevel, nearest, replay_problem
from autosched.finals.ranking import Interval
from autosched.intrinsics import use_tensor_intrinsics
from autosched.log import TuningLog
from autosched.log.tables import FinalistTiming
from autosched.measure.local import Measurer
from autosched.records import RecordView, TunedRecord
from autosched.schedule import apply_trace
from autosched.target import canonical_target, target_key, to_tvm_target
from autosched.workload import Workload


class ExportFormat(str, Enum):
    TVMSCRIPT = "tvmscript"
    METASCHEDULE_DB = "metaschedule-db"
    LIBRARY = "library"


@dataclass(frozen=True)
class BestSchedule:
    """The best verified schedule of a workload on a target, replayed from the log.

    ``target`` is the target asked for, which exports compile for; ``tuned_for`` the target the
    record was tuned for (the same, unless a fallback found a record of another), ``level`` how
    near that is to ``target``; ``notes`` report records passed over (a trace that no longer
    replays on this TVM) and what retiming measured, one line each. ``retimed`` is the
    record's re-timed median and its interval, where a final of this log timed it again.
    """

    workload: Workload
    target: dict
    record: RecordView
    schedule: Schedule
    level: FallbackLevel = FallbackLevel.EXACT
    tuned_for: dict | None = None
    notes: tuple[str, ...] = ()
    retimed: tuple[float, Interval] | None = None


# Records of each matching target that retiming measures here.
RETIME_CANDIDATES = 4


def best_schedule(
    log: TuningLog,
    workload: Workload,
    target: dict,
    *,
    fallback: bool = False,
    machines: Sequence[dict[str, Any]] = (),
    retime: Measurer | None = None,
) -> BestSchedule:
    """Look up and replay the best record of ``workload`` on ``target``.

    A record whose trace no longer replays on this TVM (one imported from another version) is
    reported in ``notes`` and passed over. With ``fallback``, when the target has no record the
    nearest one's is taken (``autosched.fallback``; ``machines`` are the fingerprints of the
    machines that run the target, whose records match at the ``device`` level). With ``retime``,
    the best few records of each matching target are measured with it and the fastest wins.

    Raises:
        UserError: the log holds no verified record for them (or none that replays).
    """
    target = canonical_target(target)
    stored = log.find_workload(workload.key)
    tuned = [] if stored is None else log.tuned_records(stored.id)
    if not fallback:
        tuned = [item for item in tuned if item.target.key == target_key(target)]
    search = nearest(workload, target, tuned, machines, replay_problem(workload, target))
    notes = list(search.skipped)
    found = search.found
    if not found and stored is not None and tuned and not fallback:
        found = _replaying_record(log, workload, stored.id, tuned[0], notes)
    if not found:
        nearest_note = " or a nearby one" if fallback else ""
        raise UserError(
            f"the tuning log has no tuned schedule of {workload.name} for this target"
            f"{nearest_note}; run `autosched tune` first"
        )
    choice = found[0]
    record = choice.record
    if retime is not None and stored is not None:
        record = _retime(log, workload, stored.id, found, retime, notes)
    best = replay(workload, target, record)
    return replace(
        best,
        level=choice.level,
        tuned_for=choice.target.target_json,
        notes=tuple(notes),
        retimed=_final_timing(log, record.candidate_id) if retime is None else None,
    )


def _final_timing(log: TuningLog, candidate_id: int) -> tuple[float, Interval] | None:
    """The median and interval of the latest final that timed the candidate again (None: no
    final did)."""
    with log.sessions.begin() as session:
        timing = session.scalars(
            select(FinalistTiming)
            .where(FinalistTiming.candidate_id == candidate_id)
            .order_by(FinalistTiming.id.desc())
            .limit(1)
        ).first()
        if timing is None:
            return None
        interval = Interval(timing.ci_low_secs, timing.ci_high_secs, timing.confidence)
        return timing.median_secs, interval


def _replaying_record(
    log: TuningLog, workload: Workload, workload_id: int, tuned: TunedRecord, notes: list[str]
) -> list[Fallback]:
    """The fastest verified record of the exact target that replays on this TVM, when its best
    record does not."""
    problem = replay_problem(workload, tuned.target.target_json)
    for record in log.records(workload_id, tuned.target.id, ok_only=True):
        if not record.verified or record.candidate_id == tuned.record.candidate_id:
            continue
        reason = problem(record)
        if reason is None:
            return [Fallback(FallbackLevel.EXACT, tuned.target, record)]
        notes.append(f"candidate {record.candidate_id}: {reason}")
    return []


def _retime(
    log: TuningLog,
    workload: Workload,
    workload_id: int,
    found: Sequence[Fallback],
    measurer: Measurer,
    notes: list[str],
) -> RecordView:
    """Measure the best `RETIME_CANDIDATES` records of each matching target with ``measurer``;
    the fastest, with its new timing, wins (the fastest recorded one if none ran)."""
    records: dict[str, RecordView] = {}
    for choice in found:
        for record in log.records(
            workload_id, choice.target.id, ok_only=True, limit=RETIME_CANDIDATES
        ):
            if record.verified:
                records.setdefault(record.program_hash, record)
    candidates = list(records.values())
    results = measurer.measure(workload.ref, [record.trace_json for record in candidates])
    timed = [
        replace(record, samples=result.samples, median_secs=result.median)
        for record, result in zip(candidates, results, strict=True)
        if result.median is not None
    ]
    notes.append(f"retimed {len(candidates)} candidates here, {len(timed)} ran")
    if not timed:
        return found[0].record
    return min(timed, key=lambda record: record.median_secs or float("inf"))


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
    """The workload, the target and the best record's latencies: its single measurement in the
    search and, where a final timed it again, its re-timed median and interval."""
    single = best.record.median_secs
    median, interval = best.retimed or (None, None)
    return {
        "workload": best.workload.name,
        "params": dict(best.workload.params),
        "workload_key": best.workload.key,
        "target": best.target,
        "single_shot_latency_us": None if single is None else single * 1e6,
        "retimed_latency_us": None if median is None else median * 1e6,
        "retimed_interval_us": None
        if interval is None
        else [interval.low * 1e6, interval.high * 1e6],
        "match": best.level.value,
        "tuned_for": best.target if best.tuned_for is None else best.tuned_for,
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
    manifest = {
        **artefact_header("kernel", output, best.target, cold=best.workload.timed_cold),
        "arguments": arguments,
        "num_outputs": best.workload.num_outputs or 1,
        **_describe(best),
    }
    sidecar = output.with_suffix(".json")
    sidecar.write_text(json.dumps(manifest, indent=2) + "\n")
    return [output, sidecar]
