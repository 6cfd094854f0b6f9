"""The `autosched log` group: list the log (its bare form), and carry it between machines as one
portable file (`log export`, `log import`; the format is ``autosched.log.portable``'s).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from autosched.cli import tune
from autosched.cli.models import show_models
from autosched.cli.options import DbOpt, JsonOpt, open_log

if TYPE_CHECKING:
    from autosched.log.portable import ImportSummary

log_app = typer.Typer(
    name="log",
    help="The tuning log: list it (no sub-command) or its tuned models (`log models`), or export "
    "and import it as a portable file.",
    invoke_without_command=True,
    pretty_exceptions_enable=False,
)
_out = Console()

_TARGET_KEY = re.compile(r"[0-9a-f]{32}")


@log_app.callback()
def show(ctx: typer.Context, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """List tuned workloads x targets with best latency and trial counts."""
    if ctx.invoked_subcommand is None:
        tune.show_log(db, as_json)


@log_app.command("models")
def models(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """List tuned models with their tasks: weight, best latency, default schedules."""
    show_models(db, as_json)


@log_app.command("export")
def export_file(
    output: Annotated[Path, typer.Option("--output", "-o", help="The file to write (.jsonl.gz).")],
    workload: Annotated[
        str | None, typer.Option("--workload", help="Only this workload (key or name).")
    ] = None,
    target: Annotated[
        str | None,
        typer.Option("--target", help='Only this target: its key, "llvm", "cuda" or target JSON.'),
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only measurements since DATE (ISO, UTC).")
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write the tuning log, or part of it, to one portable file.

    Workloads, targets, devices, every measurement with its provenance, and the best records, as
    gzip-compressed JSON lines.
    """
    from autosched.log.portable import Selection, export_log, parse_since

    selection = Selection(
        workload=workload,
        target_key=None if target is None else _target_key(target),
        since=None if since is None else parse_since(since),
    )
    log = open_log(db, must_exist=True, read_only=True)
    started = time.perf_counter()
    try:
        summary = export_log(log, output, selection)
    finally:
        log.close()
    secs = time.perf_counter() - started
    if as_json:
        print(
            json.dumps(
                {
                    "path": str(output),
                    "counts": summary.counts,
                    "bytes": summary.bytes,
                    "secs": secs,
                }
            )
        )
        return
    counts = summary.counts
    _out.print(
        f"wrote {escape(str(output))}: {counts['workload']} workloads, {counts['target']} "
        f"targets, {counts['device']} devices, {counts['measurement']} measurements, "
        f"{counts['best']} best records ({summary.bytes} bytes, {secs:.1f} s)",
        highlight=False,
        soft_wrap=True,
    )


@log_app.command("import")
def import_file(
    file: Annotated[Path, typer.Argument(help="A file written by `autosched log export`.")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Merge a portable log file into the tuning log.

    One transaction: what is there already is kept and counted; importing a file twice changes
    nothing.
    """
    from autosched.log.portable import import_log

    log = open_log(db, must_exist=False)
    started = time.perf_counter()
    try:
        summary = import_log(log, file)
    finally:
        log.close()
    secs = time.perf_counter() - started
    if as_json:
        print(json.dumps({**summary.as_json(), "secs": secs}))
        return
    _out.print(
        f"imported {escape(str(file))} in {secs:.1f} s: {describe(summary)}", highlight=False
    )


def describe(summary: ImportSummary) -> str:
    """What an import brought in, in one line."""
    parts = [
        f"{tally.new} {name} new, {tally.existing} already there"
        for name, tally in (
            ("workloads", summary.workloads),
            ("targets", summary.targets),
            ("devices", summary.devices),
            ("measurements", summary.measurements),
        )
    ]
    if summary.other_tvm:
        parts.append(
            f"{summary.other_tvm} measurements from another TVM version (replayed before use)"
        )
    if summary.rekeyed:
        parts.append(f"{summary.rekeyed} workloads or targets keyed anew by this TVM")
    return "; ".join(parts)


def _target_key(text: str) -> str:
    if _TARGET_KEY.fullmatch(text.strip()):
        return text.strip()
    from autosched.target import parse_target, target_key

    return target_key(parse_target(text))
