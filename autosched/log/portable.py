"""The portable tuning log: one self-describing, versioned, gzip-compressed file of JSON lines
that carries workloads, targets, devices, measurements, best records and the finals that timed
their winners again from one log to another.

``export_log`` writes a log (or part of it) to such a file; ``import_log`` merges one into any log,
in one transaction, so a refused file leaves nothing behind. The file is data: every line is
validated (pydantic) before anything is stored, every workload's program is admitted as a
submitted program is (``autosched.admission``), every trace too (``autosched.trace_check``), and
traces stay JSON text that only TVM's trace replay ever reads; and the file's size, its
decompressed size, its lines and their length are bounded.

The format (version 2; version 1 files, without finals, are read too), one JSON object per line:

    {"format": "autosched-log", "version": 2, "created_at", "autosched", "tvm", "filters"}
    {"type": "workload", "key", "name", "params", "flops", "builtin", "program"}   (IR JSON)
    {"type": "target", "key", "kind", "target"}
    {"type": "device", "key", "fingerprint"}
    {"type": "measurement", "uid", "workload", "target", "program_hash", "trace", "device",
     "samples", "error_kind", "error_msg", "verified", "build_secs", "started_at", "finished_at",
     "provenance"}
    {"type": "best", "workload", "target", "measurement"}                       (a measurement uid)
    {"type": "final", "workload", "target", "device", "created_at", "job",
     "finalists": [{"program_hash", "first_median_secs", "samples"}, ...]}      (the winner first)
    {"type": "end", "counts": {"workload": N, ...}}

Workloads, targets and devices are named by their keys; a measurement by its ``uid``, which it
keeps in every log, so importing a file twice adds nothing while another log's measurement of the
same program is kept beside this one's. A final names programs measured in the file; its medians,
intervals, ranks and ties are computed again from its samples on import, and a final already
stored (the same programs with the same samples) is not stored twice. It comes with its job
(strategy, budget, seed, times), stored as a finished job of no owner.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator
from sqlalchemy import Select, and_, or_, select
from sqlalchemy.orm import Session

from autosched.errors import Conflict, UserError
from autosched.finals.ranking import MAX_FINALISTS, MAX_ROUNDS, Entrant, rank_finalists
from autosched.finals.timings import timing_rows
from autosched.log.db import one_line
from autosched.log.queries import best_row
from autosched.log.store import TuningLog
from autosched.log.tables import (
    BestRecord,
    Candidate,
    CandidateState,
    Device,
    FinalistTiming,
    Measurement,
    Target,
    TuningJob,
    Workload,
    utcnow,
)
from autosched.records import ErrorKind, JobStatus, MeasureResult, WorkloadRef
from autosched.trace_check import check_trace

FORMAT = "autosched-log"
VERSION = 2
SUFFIX = ".jsonl.gz"

_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 500  # rows per statement: well within SQLite's limit of bound parameters


@dataclass(frozen=True)
class Limits:
    """Bounds on a file to import: its size, its decompressed size, its lines and their length."""

    file_bytes: int = 1 << 30
    data_bytes: int = 8 << 30
    line_bytes: int = 16 << 20
    lines: int = 20_000_000


@dataclass(frozen=True)
class Selection:
    """What to export: one workload (key or name), one target (key), measurements since a time;
    None selects everything."""

    workload: str | None = None
    target_key: str | None = None
    since: datetime | None = None

    def as_json(self) -> dict[str, str | None]:
        return {
            "workload": self.workload,
            "target": self.target_key,
            "since": None if self.since is None else self.since.isoformat(),
        }


@dataclass(frozen=True)
class ExportSummary:
    """What a file holds: how many of each kind of line, and its size in bytes."""

    path: Path
    counts: dict[str, int]
    bytes: int


@dataclass
class Tally:
    """Lines of one kind in an imported file: ``new`` ones stored, ``existing`` ones already
    there."""

    new: int = 0
    existing: int = 0


@dataclass
class ImportSummary:
    """What an import brought in and what was there already; ``other_tvm`` counts measurements
    taken with another TVM version than this one (kept, replayed before use), ``rekeyed`` the
    workloads and targets this TVM keys differently than the file (stored under this TVM's key).
    """

    workloads: Tally = field(default_factory=Tally)
    targets: Tally = field(default_factory=Tally)
    devices: Tally = field(default_factory=Tally)
    measurements: Tally = field(default_factory=Tally)
    finals: Tally = field(default_factory=Tally)
    best: int = 0
    other_tvm: int = 0
    rekeyed: int = 0

    def tallies(self) -> dict[str, Tally]:
        """The tally of each kind of line, by its plural name (``workloads``, ...)."""
        return {
            "workloads": self.workloads,
            "targets": self.targets,
            "devices": self.devices,
            "measurements": self.measurements,
            "finals": self.finals,
        }

    def as_json(self) -> dict[str, Any]:
        tallies = {
            name: {"new": tally.new, "existing": tally.existing}
            for name, tally in self.tallies().items()
        }
        return {
            **tallies,
            "best_records_offered": self.best,
            "other_tvm": self.other_tvm,
            "rekeyed": self.rekeyed,
        }


# The lines of a file, validated. Sizes not bounded here are bounded by the line length.

_Hex32 = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
_Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
_ProgramHash = Annotated[str, Field(pattern=r"^[0-9a-f]{1,128}$")]
_Name = Annotated[str, Field(min_length=1, max_length=255)]
_Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


class Header(_Line):
    format: Literal["autosched-log"]
    version: Literal[1, 2]
    created_at: datetime
    autosched: str
    tvm: str | None
    filters: dict[str, str | None]


class WorkloadLine(_Line):
    type: Literal["workload"]
    key: _Hex32
    name: _Name
    params: dict[str, Any]
    flops: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None
    builtin: bool
    program: str


class TargetLine(_Line):
    type: Literal["target"]
    key: _Hex32
    kind: _Name
    target: dict[str, Any]


class DeviceLine(_Line):
    type: Literal["device"]
    key: _Hex64
    fingerprint: dict[str, Any]


class Provenance(_Line):
    autosched: str | None
    tvm: str | None
    llvm: str | None
    machine: dict[str, str | int | float | bool | None]
    job: int | None


class MeasurementLine(_Line):
    type: Literal["measurement"]
    uid: _Hex32
    workload: _Hex32
    target: _Hex32
    program_hash: _ProgramHash
    trace: Annotated[str, Field(max_length=4 << 20)]
    device: _Hex64 | None
    samples: Annotated[list[_Seconds], Field(max_length=100_000)]
    error_kind: ErrorKind | None
    error_msg: Annotated[str, Field(max_length=1 << 16)] | None
    verified: bool
    build_secs: _Seconds | None
    started_at: datetime | None
    finished_at: datetime | None
    provenance: Provenance | None

    @field_validator("trace")
    @classmethod
    def _trace_is_json_data(cls, trace: str) -> str:
        try:
            check_trace(trace)
        except UserError as error:
            raise ValueError(str(error)) from None
        return trace

    @property
    def result(self) -> MeasureResult:
        """What the line says was measured, as the log's records hold it."""
        return MeasureResult(
            tuple(self.samples),
            self.error_kind,
            self.error_msg,
            self.build_secs,
            self.started_at,
            self.finished_at,
        )


class BestLine(_Line):
    type: Literal["best"]
    workload: _Hex32
    target: _Hex32
    measurement: _Hex32


class FinalJob(_Line):
    """The job whose final it was: what an imported final is stored under."""

    strategy: _Name
    trials: Annotated[int, Field(ge=0, le=1 << 31)]
    batch_size: Annotated[int, Field(ge=1, le=1 << 31)]
    seed: Annotated[int, Field(ge=-(1 << 63), lt=1 << 63)] | None
    created_at: datetime
    finished_at: datetime | None


class FinalEntry(_Line):
    program_hash: _ProgramHash
    first_median_secs: _Seconds
    samples: Annotated[list[_Seconds], Field(min_length=1, max_length=MAX_ROUNDS)]


class FinalLine(_Line):
    type: Literal["final"]
    workload: _Hex32
    target: _Hex32
    device: _Hex64 | None
    created_at: datetime
    job: FinalJob
    finalists: Annotated[list[FinalEntry], Field(min_length=1, max_length=MAX_FINALISTS + 1)]


class EndLine(_Line):
    type: Literal["end"]
    counts: dict[str, int]


_LINE = TypeAdapter(
    Annotated[
        WorkloadLine | TargetLine | DeviceLine | MeasurementLine | BestLine | FinalLine | EndLine,
        Field(discriminator="type"),
    ]
)
_KINDS = ("workload", "target", "device", "measurement", "best", "final")


# Export.


def export_log(log: TuningLog, output: Path, selection: Selection = Selection()) -> ExportSummary:
    """Write the log's records that ``selection`` picks to ``output``, in the portable format.

    The file appears complete or not at all (written beside it, then renamed).

    Raises:
        UserError: nothing in the log matches the selection, a built-in workload no longer
            rebuilds into its stored program, or ``output`` cannot be written.
    """
    import tvm

    with log.sessions.begin() as session:
        lines = list(_export_lines(session, selection))
    if not any(line.get("type") == "measurement" for line in lines):
        raise UserError("the tuning log holds no measurement that matches; nothing to export")
    header = {
        "format": FORMAT,
        "version": VERSION,
        "created_at": utcnow().isoformat(),
        "autosched": _autosched_version(),
        "tvm": tvm.__version__,
        "filters": selection.as_json(),
    }
    counts = {kind: sum(1 for line in lines if line["type"] == kind) for kind in _KINDS}
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent)
        try:
            with os.fdopen(handle, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb") as data:
                for line in [header, *lines, {"type": "end", "counts": counts}]:
                    data.write(_dumps(line).encode() + b"\n")
            os.replace(temporary, output)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as error:
        raise UserError(f"cannot write {output}: {error.strerror or error}") from None
    return ExportSummary(output, counts, output.stat().st_size)


def _export_lines(session: Session, selection: Selection) -> Iterator[dict[str, Any]]:
    """The lines of the file after its header: workloads, targets, devices, measurements and best
    records, each group in a stable order (keys; measurements as stored)."""
    chosen = _measurements(selection)
    best = _best_rows(session, selection)
    best_uids = {uid for _, _, uid in best}
    finals = _finals(session, selection)
    finalists = {timing.candidate_id for timings in finals.values() for timing, *_ in timings}
    rows = session.execute(
        chosen.where(
            or_(
                *_since(selection),
                Measurement.uid.in_(best_uids),
                Measurement.candidate_id.in_(finalists),
            )
        )
        if selection.since is not None
        else chosen
    ).all()
    workload_ids = sorted({row.Candidate.workload_id for row in rows})
    target_ids = sorted({row.Candidate.target_id for row in rows})
    device_ids = sorted({row.Measurement.device_id for row in rows} - {None})
    workloads = session.scalars(
        select(Workload).where(Workload.id.in_(workload_ids)).order_by(Workload.key)
    ).all()
    for workload in workloads:
        yield _workload_line(workload)
    for target in session.scalars(
        select(Target).where(Target.id.in_(target_ids)).order_by(Target.key)
    ):
        yield {
            "type": "target",
            "key": target.key,
            "kind": target.kind,
            "target": target.target_json,
        }
    for device in session.scalars(
        select(Device).where(Device.id.in_(device_ids)).order_by(Device.key)
    ):
        yield {"type": "device", "key": device.key, "fingerprint": device.fingerprint}
    for row in rows:
        yield _measurement_line(row)
    exported = {row.Measurement.uid for row in rows}
    for workload_key, target_key, uid in best:
        if uid in exported:
            yield {
                "type": "best",
                "workload": workload_key,
                "target": target_key,
                "measurement": uid,
            }
    for job_id in sorted(finals):
        yield _final_line(session.get_one(TuningJob, job_id), finals[job_id])


def _measurements(selection: Selection) -> Select[Any]:
    query = _with_keys(Measurement, Candidate).order_by(Measurement.id)
    return query.where(*_subject(selection))


def _with_keys(timing: type[Measurement | FinalistTiming], *candidate: Any) -> Select[Any]:
    """The rows of ``timing`` (a measurement or a finalist's timing), with the ``candidate``
    columns of what they timed and the keys of its workload, target and device."""
    return (
        select(
            timing,
            *candidate,
            Workload.key.label("workload_key"),
            Target.key.label("target_key"),
            Device.key.label("device_key"),
        )
        .join(Candidate, Candidate.id == timing.candidate_id)
        .join(Workload, Workload.id == Candidate.workload_id)
        .join(Target, Target.id == Candidate.target_id)
        .outerjoin(Device, Device.id == timing.device_id)
    )


def _subject(selection: Selection) -> list[Any]:
    conditions: list[Any] = []
    if selection.workload is not None:
        conditions.append(
            or_(Workload.key == selection.workload, Workload.name == selection.workload)
        )
    if selection.target_key is not None:
        conditions.append(Target.key == selection.target_key)
    return conditions


def _since(selection: Selection) -> list[Any]:
    if selection.since is None:
        return []
    return [Measurement.finished_at >= selection.since]


def _best_rows(session: Session, selection: Selection) -> list[tuple[str, str, str]]:
    """Each best record of the selection: its workload and target keys and the uid of the
    measurement that made it the best (the one ``TuningLog.best`` reads back)."""
    query = (
        select(
            Workload.key.label("workload_key"),
            Target.key.label("target_key"),
            BestRecord.workload_id,
            BestRecord.target_id,
        )
        .select_from(BestRecord)
        .join(Workload, Workload.id == BestRecord.workload_id)
        .join(Target, Target.id == BestRecord.target_id)
        .where(*_subject(selection))
        .order_by(Workload.key, Target.key)
    )
    best = []
    for row in session.execute(query).all():
        found = best_row(session, row.workload_id, row.target_id)
        if found is not None and found[1].verified and found[1].median_secs is not None:
            best.append((row.workload_key, row.target_key, found[1].uid))
    return best


_FinalRow = tuple[FinalistTiming, str, str, str, str | None]
"""A finalist's timing with its program hash and the keys of its workload, target and device."""


def _finals(session: Session, selection: Selection) -> dict[int, list[_FinalRow]]:
    """The finals of the selection (with ``since``, those timed since), by job: each finalist's
    timing with its program hash and keys, the winner first."""
    query = (
        _with_keys(FinalistTiming, Candidate.program_hash)
        .where(*_subject(selection))
        .order_by(FinalistTiming.job_id, FinalistTiming.rank)
    )
    if selection.since is not None:
        query = query.where(FinalistTiming.created_at >= selection.since)
    finals: dict[int, list[_FinalRow]] = {}
    for row in session.execute(query):
        finals.setdefault(row.FinalistTiming.job_id, []).append(tuple(row))
    return finals


def _final_line(job: TuningJob, timings: list[_FinalRow]) -> dict[str, Any]:
    first, _, workload_key, target_key, device_key = timings[0]
    return {
        "type": "final",
        "workload": workload_key,
        "target": target_key,
        "device": device_key,
        "created_at": _time(first.created_at),
        "job": {
            "strategy": job.strategy,
            "trials": job.trials,
            "batch_size": job.batch_size,
            "seed": job.seed,
            "created_at": _time(job.created_at),
            "finished_at": _time(job.finished_at),
        },
        "finalists": [
            {
                "program_hash": program_hash,
                "first_median_secs": timing.first_median_secs,
                "samples": list(timing.samples),
            }
            for timing, program_hash, *_ in timings
        ],
    }


def _workload_line(workload: Workload) -> dict[str, Any]:
    """A workload with its program as IR JSON: a user's as stored, a built-in one rebuilt from
    the registry (and checked against its stored key)."""
    if workload.source is not None:
        program = workload.source
    else:
        from autosched.admission import program_json
        from autosched.workload import resolve_workload

        built = resolve_workload(WorkloadRef(workload.name, workload.params, workload.key))
        program = program_json(built.func)
    return {
        "type": "workload",
        "key": workload.key,
        "name": workload.name,
        "params": workload.params,
        "flops": workload.flops,
        "builtin": workload.source is None,
        "program": program,
    }


def _measurement_line(row: Any) -> dict[str, Any]:
    measurement: Measurement = row.Measurement
    candidate: Candidate = row.Candidate
    return {
        "type": "measurement",
        "uid": measurement.uid,
        "workload": row.workload_key,
        "target": row.target_key,
        "program_hash": candidate.program_hash,
        "trace": candidate.trace_json,
        "device": row.device_key,
        "samples": list(measurement.samples),
        "error_kind": measurement.error_kind,
        "error_msg": measurement.error_msg,
        "verified": measurement.verified,
        "build_secs": measurement.build_secs,
        "started_at": _time(measurement.started_at),
        "finished_at": _time(measurement.finished_at),
        "provenance": measurement.provenance,
    }


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _dumps(line: dict[str, Any]) -> str:
    return json.dumps(line, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _autosched_version() -> str:
    from autosched.log.provenance import autosched_version

    return autosched_version()


# Import.


@dataclass
class _File:
    """A file's lines, validated, grouped by kind."""

    header: Header
    workloads: list[WorkloadLine] = field(default_factory=list)
    targets: list[TargetLine] = field(default_factory=list)
    devices: list[DeviceLine] = field(default_factory=list)
    measurements: list[MeasurementLine] = field(default_factory=list)
    best: list[BestLine] = field(default_factory=list)
    finals: list[FinalLine] = field(default_factory=list)


@dataclass(frozen=True)
class _Admitted:
    """A workload of the file as this autosched stores it."""

    key: str
    name: str
    params: dict[str, Any]
    flops: float | None
    tvmscript: str
    source: str | None


def import_log(
    log: TuningLog, source: Path | IO[bytes], limits: Limits = Limits(), *, name: str | None = None
) -> ImportSummary:
    """Merge the portable log file ``source`` (a path or a binary stream) into ``log``.

    Everything is validated first; then the whole file is stored in one transaction. Workloads,
    targets and devices are matched by key, candidates by workload, target and program hash,
    measurements by uid: what is there already is kept as it is and counted as existing.
    Measurements become best records as in the log they come from (only a strictly faster
    verified one replaces a best record).

    Raises:
        UserError: the file is not a readable portable log of a version this autosched reads, is
            over a bound of ``limits``, holds a line that does not validate or refers to what it
            does not hold, or a program that is not admitted; or a workload it holds is stored
            here as another program. The message is one line, naming the file (``name``) and the
            line; nothing is stored.
    """
    label = name or (str(source) if isinstance(source, Path) else "the file")
    try:
        if isinstance(source, Path):
            try:
                size = source.stat().st_size
                if size > limits.file_bytes:
                    raise UserError(
                        f"{label} is {size} bytes, over the limit of {limits.file_bytes}"
                    )
                with source.open("rb") as stream:
                    parsed = _parse(stream, limits)
            except OSError as error:
                raise UserError(f"cannot read {label}: {error.strerror or error}") from None
        else:
            parsed = _parse(source, limits)
        admitted = _admit_workloads(parsed.workloads)
        return _store(log, parsed, admitted)
    except UserError as error:
        raise type(error)(f"{label}: {error}") from None


def _parse(stream: IO[bytes], limits: Limits) -> _File:
    """Read and validate every line; check that lines refer only to what the file holds."""
    lines = _lines(stream, limits)
    first = next(lines, None)
    if first is None:
        raise UserError("the file is empty")
    header = _header(first[1])
    parsed = _File(header)
    end: EndLine | None = None
    for number, text in lines:
        if end is not None:
            raise UserError(f"line {number}: lines after the end line")
        try:
            line = _LINE.validate_json(text)
        except ValidationError as error:
            raise UserError(f"line {number}: {_problem(error)}") from None
        if isinstance(line, EndLine):
            end = line
        else:
            getattr(parsed, _GROUPS[line.type]).append(line)
    if end is None:
        raise UserError("the file ends before its end line: it is truncated")
    counts = {
        "workload": len(parsed.workloads),
        "target": len(parsed.targets),
        "device": len(parsed.devices),
        "measurement": len(parsed.measurements),
        "best": len(parsed.best),
        "final": len(parsed.finals),
    }
    if header.version == 1 and not parsed.finals:
        del counts["final"]  # version 1 files carry no finals and do not count them
    if end.counts != counts:
        raise UserError(f"the end line counts {end.counts}, the file holds {counts}")
    _check_references(parsed)
    return parsed


_GROUPS = {
    "workload": "workloads",
    "target": "targets",
    "device": "devices",
    "measurement": "measurements",
    "best": "best",
    "final": "finals",
}


def _lines(stream: IO[bytes], limits: Limits) -> Iterator[tuple[int, bytes]]:
    """The file's lines, numbered from 1, decompressed within ``limits``."""
    bounded = _BoundedReader(stream, limits.file_bytes)
    if bounded.peek_magic() != _GZIP_MAGIC:
        raise UserError("the file is not gzip-compressed; it is not a portable tuning log")
    total = 0
    number = 0
    try:
        with gzip.GzipFile(fileobj=bounded, mode="rb") as data:
            while True:
                line = data.readline(limits.line_bytes + 1)
                if not line:
                    return
                number += 1
                total += len(line)
                if len(line) > limits.line_bytes:
                    raise UserError(f"line {number} is over {limits.line_bytes} bytes")
                if total > limits.data_bytes:
                    raise UserError(f"the file decompresses to over {limits.data_bytes} bytes")
                if number > limits.lines:
                    raise UserError(f"the file holds over {limits.lines} lines")
                yield number, line
    except (OSError, EOFError, zlib.error) as error:
        raise UserError(f"the file is corrupt: {one_line(str(error))}") from None


class _BoundedReader(io.RawIOBase):
    """A binary stream that refuses to read past ``limit`` bytes."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self._stream = stream
        self._limit = limit
        self._read = 0
        self._pending = b""

    def readable(self) -> bool:
        return True

    def peek_magic(self) -> bytes:
        self._pending = self._stream.read(len(_GZIP_MAGIC))
        self._read += len(self._pending)
        return self._pending

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        if self._pending:
            count = len(self._pending)
            view[:count] = self._pending
            self._pending = b""
            return count
        data = self._stream.read(len(view))
        self._read += len(data)
        if self._read > self._limit:
            raise UserError(f"the file is over the limit of {self._limit} bytes")
        view[: len(data)] = data
        return len(data)


def _header(text: bytes) -> Header:
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise UserError("line 1 is not JSON; the file is not a portable tuning log") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise UserError("line 1 is not an autosched-log header; the file is not a portable log")
    version = document.get("version")
    if version not in (1, VERSION):
        raise UserError(
            f"the file is of format version {version!r}; this autosched reads versions 1 to "
            f"{VERSION}"
        )
    try:
        return Header.model_validate(document)
    except ValidationError as error:
        raise UserError(f"line 1: {_problem(error)}") from None


def _problem(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return one_line(f"{where}: {first['msg']}" if where else first["msg"])


def _check_references(parsed: _File) -> None:
    workloads = _unique("workload", (line.key for line in parsed.workloads))
    targets = _unique("target", (line.key for line in parsed.targets))
    devices = _unique("device", (line.key for line in parsed.devices))
    _unique("measurement", (line.uid for line in parsed.measurements))
    for target in parsed.targets:
        if target.kind != target.target.get("kind"):
            raise UserError(f"target {target.key} names kind {target.kind!r}, its JSON another")
    for line in parsed.measurements:
        if line.workload not in workloads or line.target not in targets:
            raise UserError(f"measurement {line.uid} names a workload or target the file lacks")
        if line.device is not None and line.device not in devices:
            raise UserError(f"measurement {line.uid} names a device the file lacks")
        if line.error_kind is not None and line.samples:
            raise UserError(f"measurement {line.uid} has both an error and samples")
    measured = {line.uid: line for line in parsed.measurements}
    for best in parsed.best:
        record = measured.get(best.measurement)
        if record is None or (record.workload, record.target) != (best.workload, best.target):
            raise UserError(f"a best record names measurement {best.measurement}, not in the file")
        if not (record.verified and record.result.ok):
            raise UserError(f"best record {best.measurement} is not a verified timing")
    timed = {(line.workload, line.target, line.program_hash) for line in measured.values()}
    for number, final in enumerate(parsed.finals, start=1):
        if final.workload not in workloads or final.target not in targets:
            raise UserError(f"final {number} names a workload or target the file lacks")
        if final.device is not None and final.device not in devices:
            raise UserError(f"final {number} names a device the file lacks")
        hashes = [entry.program_hash for entry in final.finalists]
        if len(set(hashes)) != len(hashes):
            raise UserError(f"final {number} names a program twice")
        if any((final.workload, final.target, h) not in timed for h in hashes):
            raise UserError(f"final {number} names a program the file holds no measurement of")


def _unique(kind: str, keys: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            raise UserError(f"the file holds {kind} {key} twice")
        seen.add(key)
    return seen


def _admit_workloads(lines: list[WorkloadLine]) -> dict[str, _Admitted]:
    """Each workload's program, admitted as a submitted program is, by the file's key.

    A built-in workload stays built in (rebuilt from the registry) when the registry rebuilds
    its name and parameters into the same program; otherwise it is kept as the user's program.
    """
    from autosched.workload import workload_from_ir_json
    from autosched.workloads import get_workload

    admitted: dict[str, _Admitted] = {}
    for line in lines:
        workload = workload_from_ir_json(line.program, name=line.name)
        stored = _Admitted(
            workload.key, line.name, {}, line.flops, workload.tvmscript, workload.source
        )
        if line.builtin:
            try:
                built = get_workload(line.name, line.params)
            except UserError:
                built = None
            if built is not None and built.key == workload.key:
                stored = _Admitted(
                    built.key, line.name, dict(built.params), built.flops, built.tvmscript, None
                )
        admitted[line.key] = stored
    return admitted


def _store(log: TuningLog, parsed: _File, admitted: dict[str, _Admitted]) -> ImportSummary:
    import tvm

    from autosched.target import target_key

    summary = ImportSummary()
    summary.rekeyed = sum(1 for key, found in admitted.items() if found.key != key)
    target_keys = {line.key: target_key(line.target) for line in parsed.targets}
    summary.rekeyed += sum(1 for key, local in target_keys.items() if local != key)
    device_keys = {line.key: _device_key(line.fingerprint) for line in parsed.devices}
    now = utcnow()
    with log.sessions.begin() as session:
        workload_ids = _ensure_workloads(log, session, admitted.values(), summary.workloads)
        target_ids = _ensure_keyed(
            log,
            session,
            Target,
            [
                {"key": target_keys[line.key], "kind": line.kind, "target_json": line.target}
                for line in parsed.targets
            ],
            summary.targets,
        )
        device_ids = _ensure_keyed(
            log,
            session,
            Device,
            [
                {"key": device_keys[line.key], "fingerprint": line.fingerprint}
                for line in parsed.devices
            ],
            summary.devices,
        )

        def subject(line: MeasurementLine | BestLine | FinalLine) -> tuple[int, int]:
            return (
                workload_ids[admitted[line.workload].key],
                target_ids[target_keys[line.target]],
            )

        candidates = _ensure_candidates(log, session, parsed.measurements, subject)
        existing = _existing_uids(session, [line.uid for line in parsed.measurements])
        rows = []
        for line in parsed.measurements:
            if line.uid in existing:
                summary.measurements.existing += 1
                continue
            summary.measurements.new += 1
            tvm_version = None if line.provenance is None else line.provenance.tvm
            summary.other_tvm += int(tvm_version is not None and tvm_version != tvm.__version__)
            rows.append(
                {
                    "uid": line.uid,
                    "candidate_id": candidates[(*subject(line), line.program_hash)],
                    "device_id": None
                    if line.device is None
                    else device_ids[device_keys[line.device]],
                    "samples": list(line.samples),
                    "median_secs": line.result.median,
                    "error_kind": None if line.error_kind is None else line.error_kind.value,
                    "error_msg": line.error_msg,
                    "verified": line.verified,
                    "build_secs": line.build_secs,
                    "started_at": line.started_at,
                    "finished_at": line.finished_at,
                    "provenance": None
                    if line.provenance is None
                    else line.provenance.model_dump(mode="json"),
                    "tvm_version": tvm_version,
                    "imported_at": now,
                }
            )
        if rows:
            session.connection().execute(
                log.insert(Measurement.__table__).on_conflict_do_nothing(index_elements=["uid"]),
                rows,
            )
        measured = {line.uid: line for line in parsed.measurements}
        for best in parsed.best:
            record = measured[best.measurement]
            median = record.result.median
            assert median is not None  # checked by _check_references
            workload_id, target_id = subject(best)
            log.offer_best(
                session,
                workload_id,
                target_id,
                median,
                candidates[(workload_id, target_id, record.program_hash)],
            )
            summary.best += 1
        traces = {line.program_hash: line.trace for line in parsed.measurements}
        for final in parsed.finals:
            workload_id, target_id = subject(final)
            device_id = None if final.device is None else device_ids[device_keys[final.device]]
            ids = {
                entry.program_hash: candidates[(workload_id, target_id, entry.program_hash)]
                for entry in final.finalists
            }
            new = _store_final(session, final, workload_id, target_id, device_id, ids, traces)
            summary.finals.new += int(new)
            summary.finals.existing += int(not new)
    return summary


def _store_final(
    session: Session,
    final: FinalLine,
    workload_id: int,
    target_id: int,
    device_id: int | None,
    ids: dict[str, int],
    traces: dict[str, str],
) -> bool:
    """Store ``final`` under a finished job of its own, its finalists ranked again from their
    samples (``autosched.finals.ranking.rank_finalists``); False where a final of the same programs
    with the same samples is stored already."""
    ranked = rank_finalists(
        [
            Entrant(entry.program_hash, traces[entry.program_hash], entry.first_median_secs)
            for entry in final.finalists
        ],
        [entry.samples for entry in final.finalists],
    )
    signature = [(ids[finalist.program_hash], list(finalist.samples)) for finalist in ranked]
    with_winner = select(FinalistTiming.job_id).where(
        FinalistTiming.candidate_id == signature[0][0]
    )
    stored: dict[int, list[tuple[int, list[float]]]] = {}
    for job_id, candidate_id, samples in session.execute(
        select(FinalistTiming.job_id, FinalistTiming.candidate_id, FinalistTiming.samples)
        .where(FinalistTiming.job_id.in_(with_winner))
        .order_by(FinalistTiming.job_id, FinalistTiming.rank)
    ):
        stored.setdefault(job_id, []).append((candidate_id, list(samples)))
    if signature in stored.values():
        return False
    job = TuningJob(
        workload_id=workload_id,
        target_id=target_id,
        trials=final.job.trials,
        batch_size=final.job.batch_size,
        strategy=final.job.strategy,
        seed=final.job.seed,
        status=JobStatus.FINISHED.value,
        created_at=final.job.created_at,
        finished_at=final.job.finished_at,
    )
    session.add(job)
    session.flush()
    session.add_all(timing_rows(job.id, device_id, ranked, ids, final.created_at))
    return True


def _device_key(fingerprint: dict[str, Any]) -> str:
    canonical = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _ensure_workloads(
    log: TuningLog, session: Session, workloads: Iterable[_Admitted], tally: Tally
) -> dict[str, int]:
    """Store the workloads the log lacks; ids by key. Conflict: a key stored as another program."""
    unique = {workload.key: workload for workload in workloads}
    ids = _ensure_keyed(
        log,
        session,
        Workload,
        [
            {
                "key": workload.key,
                "name": workload.name,
                "params": workload.params,
                "tvmscript": workload.tvmscript,
                "flops": workload.flops,
                "source": workload.source,
            }
            for workload in unique.values()
        ],
        tally,
    )
    for key, tvmscript in session.execute(
        select(Workload.key, Workload.tvmscript).where(Workload.key.in_(list(unique)))
    ):
        if tvmscript != unique[key].tvmscript:
            raise Conflict(f"workload {key} is stored here as another program; nothing imported")
    return ids


def _ensure_keyed(
    log: TuningLog,
    session: Session,
    model: type[Workload] | type[Target] | type[Device],
    rows: list[dict[str, Any]],
    tally: Tally,
) -> dict[str, int]:
    """Insert the rows whose key the table lacks; returns every row's id by key."""
    keys = list(dict.fromkeys(row["key"] for row in rows))
    query = select(model.key, model.id).where(model.key.in_(keys))
    found = {row.key: row.id for row in session.execute(query)}
    missing = [{**row, "created_at": utcnow()} for row in rows if row["key"] not in found]
    tally.existing += len(rows) - len(missing)
    tally.new += len(missing)
    if missing:
        session.execute(
            log.insert(model).values(missing).on_conflict_do_nothing(index_elements=["key"])
        )
        found = {row.key: row.id for row in session.execute(query)}
    return found


def _ensure_candidates(
    log: TuningLog,
    session: Session,
    lines: list[MeasurementLine],
    subject: Callable[[MeasurementLine], tuple[int, int]],
) -> dict[tuple[int, int, str], int]:
    """The candidate of every measurement, by workload id, target id and program hash; the
    ones the log lacks are stored as measured, of no job."""
    traces: dict[tuple[int, int, str], str] = {}
    for line in lines:
        traces.setdefault((*subject(line), line.program_hash), line.trace)
    pairs = {(workload_id, target_id) for workload_id, target_id, _ in traces}
    ids: dict[tuple[int, int, str], int] = {}

    def read() -> None:
        for workload_id, target_id in pairs:
            hashes = [h for w, t, h in traces if (w, t) == (workload_id, target_id)]
            for start in range(0, len(hashes), _CHUNK):
                for row in session.execute(
                    select(Candidate.id, Candidate.program_hash).where(
                        and_(
                            Candidate.workload_id == workload_id,
                            Candidate.target_id == target_id,
                            Candidate.program_hash.in_(hashes[start : start + _CHUNK]),
                        )
                    )
                ):
                    ids[(workload_id, target_id, row.program_hash)] = row.id

    read()
    now = utcnow()
    missing = [
        {
            "workload_id": workload_id,
            "target_id": target_id,
            "program_hash": program_hash,
            "trace_json": trace,
            "created_at": now,
            "state": CandidateState.MEASURED,
            "strikes": 0,
        }
        for (workload_id, target_id, program_hash), trace in traces.items()
        if (workload_id, target_id, program_hash) not in ids
    ]
    if missing:
        session.connection().execute(
            log.insert(Candidate.__table__).on_conflict_do_nothing(
                index_elements=["workload_id", "target_id", "program_hash"]
            ),
            missing,
        )
        read()
    return ids


def _existing_uids(session: Session, uids: list[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(uids), _CHUNK):
        found.update(
            session.scalars(
                select(Measurement.uid).where(Measurement.uid.in_(uids[start : start + _CHUNK]))
            )
        )
    return found


def parse_since(text: str) -> datetime:
    """A ``--since`` value: an ISO date or date and time; without a zone, UTC.

    Raises:
        UserError: it is neither.
    """
    from datetime import timezone

    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UserError(f"--since takes a date such as 2026-11-30, not {text!r}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
