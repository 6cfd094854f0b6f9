"""`autosched export`: a workload's best schedule (TVMScript, a MetaSchedule database or a
library with its manifest) from the local log or a server, a model file compiled with its tasks'
best schedules, or a server's model job's library (``autosched.exports`` writes them all).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from autosched.cli.models import InputOpt, WorkloadOrModelArg
from autosched.cli.options import DbOpt, FileOpt, ParamOpt, TokenOpt, open_log
from autosched.cli.tune import DEFAULT_WORKLOAD, TargetOpt, resolve_workload
from autosched.errors import UserError
from autosched.model import is_model_file

if TYPE_CHECKING:
    from autosched.exports.kernels import BestSchedule
    from autosched.workload import Workload

_out = Console()
_err = Console(stderr=True)


def export_schedule(
    workload: WorkloadOrModelArg = DEFAULT_WORKLOAD,
    format_name: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="tvmscript | metaschedule-db | library [a workload: tvmscript; a model: library]",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Where to write [out.py; a model: its name with .so]."),
    ] = None,
    param: ParamOpt = None,
    file: FileOpt = None,
    target: TargetOpt = None,
    db: DbOpt = None,
    server: Annotated[
        str | None,
        typer.Option("--server", help="Export from this autosched server instead of a database."),
    ] = None,
    token: TokenOpt = None,
    model_job: Annotated[
        int | None,
        typer.Option(
            "--model-job",
            min=1,
            help="With --server: a model job's library and manifest (the model file, where "
            "given, is checked to be the one it tuned, for `autosched run --compare`).",
        ),
    ] = None,
    fallback: Annotated[
        bool,
        typer.Option(
            "--fallback",
            help="Without a record for the target, take the nearest hardware's: the same "
            "device, processor model or ISA family (the level is printed).",
        ),
    ] = False,
    retime: Annotated[
        bool,
        typer.Option(
            "--retime", help="With --fallback: measure the nearest records here, keep the fastest."
        ),
    ] = False,
    model_input: InputOpt = None,
) -> None:
    """Export the best schedule of a workload: TVMScript, a MetaSchedule database or a library.

    With --server, from a tuning server; --target then names a kind, target JSON or target key;
    with --model-job, a model job's library.
    A model file exports compiled with its tasks' best schedules: a library (a Relax VM
    executable and its JSON sidecar) or a MetaSchedule database.
    """
    from autosched.exports.kernels import ExportFormat, export
    from autosched.target import parse_target

    if model_job is not None:
        if server is None:
            raise UserError("--model-job names a model job of a server; give --server")
        if param or file is not None or db is not None or fallback or retime or model_input:
            raise UserError("a model job exports from its server with --target only")
        if format_name not in (None, "library"):
            raise UserError(f"a model job exports as a library, not {format_name!r}")
        if workload != DEFAULT_WORKLOAD and not is_model_file(workload):
            raise UserError(f"{workload} is not a model file; give the one the model job tuned")
        source = Path(workload) if is_model_file(workload) else None
        named = output or Path(f"{source.stem if source else f'model-job-{model_job}'}.so")
        export_model_job(server, token, model_job, source, named, target)
        return
    if is_model_file(workload):
        if param or file is not None or server is not None or fallback or retime:
            raise UserError("a model file exports from the local log with --input only")
        model_format = format_name or "library"
        named = output or Path(f"{Path(workload).stem}.so")
        export_model_file(Path(workload), model_input or [], model_format, named, target, db)
        return
    if model_input:
        raise UserError("--input sets a model file's input shapes; a workload takes -p")

    try:
        fmt = ExportFormat(format_name or ExportFormat.TVMSCRIPT.value)
    except ValueError:
        choices = ", ".join(f.value for f in ExportFormat)
        raise UserError(f"unknown export format {format_name!r}; choose one of {choices}") from None
    if retime and not fallback:
        raise UserError("--retime measures the records --fallback finds; give --fallback too")
    spec = resolve_workload(workload, param, file)
    if server is not None:
        if db is not None:
            raise UserError("give --db or --server, not both")
        if retime:
            raise UserError("--retime measures on this machine; export from a local --db")
        best = _fetch_best(server, token, spec, target, fallback=fallback)
    else:
        best = _local_best(db, spec, parse_target(target), fallback=fallback, retime=retime)
    for note in best.notes:
        _err.print(f"note: {escape(note)}", highlight=False)
    if fallback:
        _out.print(
            f"matched at level {best.level.value}: tuned for "
            f"{escape(json.dumps(best.tuned_for or best.target))}",
            highlight=False,
            soft_wrap=True,
        )
    for path in export(best, fmt, output or Path("out.py")):
        _out.print(f"wrote {escape(str(path))}")


def export_model_file(
    path: Path,
    inputs: list[str],
    format_name: str,
    output: Path,
    target: str | None,
    db: str | None,
) -> None:
    """Export the model at ``path`` compiled with the log's best schedules of its tasks: a Relax
    VM library and its manifest (outputs checked first), or a MetaSchedule database."""
    from autosched.exports.models import (
        complete_model_manifest,
        export_database,
        export_library,
    )
    from autosched.model.compile import (
        OutputMismatch,
        best_schedules,
        check_outputs,
        compile_model,
    )
    from autosched.model.load import load_model
    from autosched.model.tasks import extract_tasks
    from autosched.target import parse_target

    if format_name not in ("library", "metaschedule-db"):
        raise UserError(f"a model exports as library or metaschedule-db, not {format_name!r}")
    target_json = parse_target(target)
    model = load_model(path, inputs)
    tasks = extract_tasks(model, target_json)
    log = open_log(db, must_exist=True, read_only=True)
    try:
        schedules = best_schedules(log, tasks, target_json)
    finally:
        log.close()
    if all(schedule.record is None for schedule in schedules):
        raise UserError(
            f"the tuning log has no tuned schedule of any task of {model.name} for this target; "
            "run `autosched tune` on the model first"
        )
    for schedule in schedules:
        if schedule.reason is not None:
            _err.print(
                f"note: {escape(schedule.task.name)} keeps the default schedule: "
                f"{escape(schedule.reason)}",
                highlight=False,
            )
    if format_name == "metaschedule-db":
        written = export_database(schedules, target_json, output)
    else:
        executable = compile_model(model, schedules, target_json)
        try:
            check = check_outputs(model, executable, target_json)
        except OutputMismatch as error:
            _err.print(f"[red]error:[/red] {escape(str(error))}", highlight=False, soft_wrap=True)
            raise typer.Exit(code=1) from None
        written = export_library(model, executable, schedules, target_json, check, output)
        complete_model_manifest(written[1], target_json, path)
    for written_path in written:
        _out.print(f"wrote {escape(str(written_path))}")


def export_model_job(
    server: str,
    token: str | None,
    model_id: int,
    source: Path | None,
    output: Path,
    target: str | None,
) -> None:
    """Fetch a server's model job compiled with its tasks' best schedules: the library as
    ``output`` and its manifest beside it, naming ``source`` (the local copy of the file the
    model job tuned, checked by its SHA-256) for `autosched run --compare` to run beside it.

    Raises:
        UserError: ``output`` does not end in ``.so`` or cannot be written, ``source`` is not the
            model job's file, or the server refuses (no such model job, a failed one).
    """
    import hashlib

    from autosched import runtime
    from autosched.client.http import ServiceClient

    if output.suffix != ".so":
        raise UserError(
            f"a model job exports as a library: give an output ending in .so, not {output}"
        )
    with ServiceClient(server, token) as client:
        manifest = client.model_manifest(model_id, target)
        library = client.model_library(model_id, target)
    if source is not None:
        try:
            digest = hashlib.sha256(source.read_bytes()).hexdigest()
        except OSError as error:
            raise UserError(f"cannot read {source}: {error.strerror or error}") from None
        stored = manifest.get("source")
        if not isinstance(stored, dict) or stored.get("sha256") != digest:
            raise UserError(
                f"{source} is not the file model job {model_id} tuned (another SHA-256)"
            )
        manifest["source"] = {**stored, "path": str(source.resolve())}
    manifest["library"] = output.name
    sidecar = output.with_suffix(".json")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_bytes(library)
        sidecar.write_text(json.dumps(manifest, indent=2) + "\n")
    except OSError as error:
        raise UserError(f"cannot write {output}: {error.strerror or error}") from None
    try:
        runtime.read_manifest(output)  # what the server sent is a manifest the loader reads
    except UserError:
        output.unlink(missing_ok=True)
        sidecar.unlink(missing_ok=True)
        raise
    for written in (output, sidecar):
        _out.print(f"wrote {escape(str(written))}")


def _local_best(
    db: str | None, spec: Workload, target: dict, *, fallback: bool, retime: bool
) -> BestSchedule:
    """The best schedule of ``spec`` on ``target`` in the local log, with the nearest hardware's
    record as ``fallback`` (this machine's records matching at the device level), retimed here
    with ``retime``."""
    from autosched.exports.kernels import best_schedule
    from autosched.measure import LocalMeasurer
    from autosched.target import device_fingerprint

    machines: list[dict] = []
    if fallback:
        try:
            machines = [device_fingerprint(target)]
        except UserError:  # a CUDA target on a machine without a GPU: no device to match
            machines = []
    log = open_log(db, must_exist=True, read_only=True)
    measurer = LocalMeasurer(target) if retime else None
    try:
        return best_schedule(
            log, spec, target, fallback=fallback, machines=machines, retime=measurer
        )
    finally:
        log.close()
        if measurer is not None:
            measurer.close()


def _fetch_best(
    server: str, token: str | None, workload: Workload, target: str | None, *, fallback: bool
) -> BestSchedule:
    """The best schedule of ``workload`` on ``target`` (a kind, target JSON or key) from a server,
    replayed here for export; with ``fallback``, the nearest hardware's if the target has none."""
    from dataclasses import replace

    from autosched.client.http import ServiceClient
    from autosched.exports.kernels import replay
    from autosched.fallback import FallbackLevel

    with ServiceClient(server, token) as client:
        found = client.workload_best(workload.key, target or "llvm", fallback=fallback)
    asked = found.target.target_json
    if fallback and found.level != FallbackLevel.EXACT.value:
        from autosched.target import parse_target

        asked = parse_target(target)  # a kind or key names the tuned target, not this one
    best = replay(workload, asked, found.record.to_view())
    return replace(best, level=FallbackLevel(found.level), tuned_for=found.target.target_json)
