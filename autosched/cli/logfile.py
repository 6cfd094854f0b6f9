"""The `autosched log` group: list the log (its bare form), and carry it between machines as one
portable file (`log export`, `log import`; the format is ``autosched.log.portable``'s).

A best record has two latencies: the single measurement that made it the best in the search, and
the median of the final that timed it again; the listing names them apart.
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
from rich.table import Table

from autosched.cli.models import show_models
from autosched.cli.options import DbOpt, JsonOpt, open_log

if TYPE_CHECKING:
    from autosched.log.portable import ImportSummary
    from autosched.records import SummaryRow

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
        show_log(db, as_json)


def show_log(db: str | None, as_json: bool) -> None:
    """List tuned workloads x targets: the best record's latency (its re-timed median where a
    final timed it again, else its single measurement), its single measurement, the re-timed
    interval, GFLOP/s and trial counts."""
    log = open_log(db, must_exist=True, read_only=True)
    try:
        rows = log.summary()
    finally:
        log.close()
    if as_json:
        print(json.dumps([_row_json(row) for row in rows]))
        return
    table = Table(
        "workload", "params", "target", "best", "95% interval", "single shot", "GFLOP/s",
        "trials", "failed",
        caption="best: the re-timed median where a final timed the best record again, else its "
        "single measurement",
    )  # fmt: skip
    for row in rows:
        low, high = row.retimed_low_secs, row.retimed_high_secs
        rate = _gflops(row)
        table.add_row(
            row.workload_name,
            " ".join(f"{k}={v}" for k, v in row.workload_params.items()),
            ", ".join(f"{k}={v}" for k, v in row.target_json.items() if k in ("kind", "mcpu")),
            _us(_best_secs(row)),
            "-" if low is None or high is None else f"{low * 1e6:.2f} - {high * 1e6:.2f}",
            _us(row.best_latency_secs),
            "-" if rate is None else f"{rate:.1f}",
            str(row.trials),
            str(row.failed),
        )
    _out.print(table)


def _row_json(row: SummaryRow) -> dict[str, object]:
    """A row of `log --json`: ``best_latency_us`` is what `tune` reports as the best (the
    re-timed median where there is one); ``single_shot_latency_us`` the best record's single
    measurement in the search."""

    def us(secs: float | None) -> float | None:
        return None if secs is None else secs * 1e6

    low, high = row.retimed_low_secs, row.retimed_high_secs
    return {
        "workload_key": row.workload_key,
        "workload": row.workload_name,
        "params": row.workload_params,
        "target": row.target_json,
        "best_latency_us": us(_best_secs(row)),
        "single_shot_latency_us": us(row.best_latency_secs),
        "retimed_latency_us": us(row.retimed_secs),
        "retimed_interval_us": None if low is None or high is None else [low * 1e6, high * 1e6],
        "gflops": _gflops(row),
        "trials": row.trials,
        "failed": row.failed,
    }


def _best_secs(row: SummaryRow) -> float | None:
    return row.best_latency_secs if row.retimed_secs is None else row.retimed_secs


def _gflops(row: SummaryRow) -> float | None:
    best = _best_secs(row)
    return None if row.flops is None or not best else row.flops / best / 1e9


def _us(secs: float | None) -> str:
    return "-" if secs is None else f"{secs * 1e6:.2f} us"


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

    Workloads, targets, devices, every measurement with its provenance, the best records and the
    finals that timed them again, as gzip-compressed JSON lines.
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
        f"{counts['best']} best records, {counts['final']} finals ({summary.bytes} bytes, "
        f"{secs:.1f} s)",
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
        for name, tally in summary.tallies().items()
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
