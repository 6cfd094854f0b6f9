"""The commands that work on this machine alone: tune, workloads, check, calibrate.

Bad input ends with a one-line error and exit code 2, before anything is written to the log.
Heavy modules (TVM, the log) are imported inside the commands that need them.
"""

from __future__ import annotations

import json
import shlex
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autosched.cli.models import (
    InputOpt,
    WorkloadOrModelArg,
    tune_model_file,
)
from autosched.cli.options import (
    DbOpt,
    FileOpt,
    JsonOpt,
    ParamOpt,
    WorkloadArg,
    open_log,
)
from autosched.errors import Cancelled, UserError
from autosched.finals.ranking import FINALISTS, MAX_FINALISTS, Finalist
from autosched.model import ROUND_TRIALS, is_model_file
from autosched.search.registry import DEFAULT_STRATEGY, STRATEGY_HELP, check_strategy
from autosched.signals import stop_on_signals

if TYPE_CHECKING:
    from collections.abc import Sequence

    from autosched.tuner import Progress as TuneProgress
    from autosched.tuner import TuneReport
    from autosched.workload import Workload

_out = Console()
_err = Console(stderr=True)

DEFAULT_WORKLOAD = "matmul"
"""The workload of `tune` and `export` where none is named."""

TargetOpt = Annotated[
    str | None,
    typer.Option("--target", help='"llvm" (this CPU, the default), "cuda", or target JSON.'),
]


def resolve_workload(name: str, params: list[str] | None, file: Path | None) -> Workload:
    from autosched.workload import load_workload_file
    from autosched.workloads import get_workload, parse_param_overrides

    if file is not None:
        if params:
            raise UserError("-p sets parameters of built-in workloads; a --file takes none")
        return load_workload_file(str(file))
    return get_workload(name, parse_param_overrides(params or []))


def tune(
    workload: WorkloadOrModelArg = DEFAULT_WORKLOAD,
    param: ParamOpt = None,
    file: FileOpt = None,
    target: TargetOpt = None,
    trials: Annotated[int, typer.Option(min=1, max=100_000, help="New measurements.")] = 64,
    batch: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=4096,
            help="Candidates per batch; of a model, the trials of a task's round [64].",
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for a reproducible search.")] = None,
    strategy: Annotated[str, typer.Option(help=STRATEGY_HELP)] = DEFAULT_STRATEGY,
    cold: Annotated[
        bool,
        typer.Option(
            "--cold", help="Start from a fresh cost model, not the target family's shared one."
        ),
    ] = False,
    finalists: Annotated[
        int,
        typer.Option(
            min=0,
            max=MAX_FINALISTS,
            help="Time this many of the fastest candidates again at the end, side by side, and "
            "choose the best by the re-timed median (0: keep the fastest single measurement); "
            "of a model, of each task it tunes.",
        ),
    ] = FINALISTS,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    model_input: InputOpt = None,
) -> None:
    """Tune a workload, or a model file (.onnx, .pt2, .py with a Relax module), on this machine
    and record every measurement in the tuning log.

    At the end the fastest candidates are timed again side by side (see --finalists). Afterwards
    the target family's shared cost model is retrained if the log grew enough. A model's trials
    are split across its tasks by expected gain; its compiled outputs are checked.
    """
    from autosched.costmodel.shared import retrain_if_grown
    from autosched.measure import LocalMeasurer
    from autosched.target import parse_target, target_family
    from autosched.tuner import TuneOptions
    from autosched.tuner import tune as run_tuning

    check_strategy(strategy)
    if is_model_file(workload):
        from autosched.model.tuning import ModelTuneOptions

        if param or file is not None:
            raise UserError("-p and --file describe a workload; a model file takes --input")
        model_options = ModelTuneOptions(
            trials=trials,
            batch_size=batch or ROUND_TRIALS,
            seed=seed,
            strategy=strategy,
            warm=not cold,
            finalists=finalists,
        )
        tune_model_file(Path(workload), model_input or [], target, model_options, db, as_json)
        return
    if model_input:
        raise UserError("--input sets a model file's input shapes; a workload takes -p")
    batch = batch or 64
    spec = resolve_workload(workload, param, file)
    target_json = parse_target(target)
    log = open_log(db, must_exist=False)
    stop = threading.Event()
    measurer = LocalMeasurer(target_json, cancel=stop)
    options = TuneOptions(
        trials=trials,
        batch_size=batch,
        seed=seed,
        strategy=strategy,
        warm=not cold,
        finalists=finalists,
    )
    progress = Progress(
        TextColumn(f"tuning {spec.name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("trials  best {task.fields[best]}  failed {task.fields[failed]}"),
        TimeElapsedColumn(),
        console=_err,
        disable=as_json,
    )
    task = progress.add_task("tune", total=trials, best="-", failed=0)

    def on_progress(update: TuneProgress) -> None:
        best = update.best_latency_secs
        best = "-" if best is None else f"{best * 1e6:.1f} us"
        progress.update(task, completed=update.trials_done, best=best, failed=update.failed)

    try:
        try:
            with progress, stop_on_signals(stop, "the batch in flight is dropped"):
                report = run_tuning(spec, target_json, log, measurer, options, on_progress, stop)
        finally:
            measurer.close()
        retrained = retrain_if_grown(log, target_family(target_json))
    except Cancelled:
        _err.print("interrupted: measurements of completed batches are kept in the log")
        raise typer.Exit(code=130) from None
    finally:
        log.close()
    if retrained is not None and not as_json:
        model = retrained.model
        _err.print(
            f"{model.family} cost model version {model.version} trained on "
            f"{model.trained_on} measurements in {retrained.secs:.1f} s",
            highlight=False,
        )
    if as_json:
        print(json.dumps(report.as_json()))
    else:
        _print_report(report, next_commands(spec.name, param, file, target, db))
    if report.nothing_worked:
        _err.print(
            f"every trial failed: {report.failure_cause}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(code=1)


def _print_report(report: TuneReport, next_steps: str) -> None:
    def us(secs: float | None) -> str:
        return "-" if secs is None else f"{secs * 1e6:.2f} us"

    table = Table(show_header=False, box=None)
    table.add_row("workload", f"{report.workload_name} ({report.workload_key})")
    table.add_row("target", json.dumps(report.target))
    table.add_row("trials", f"{report.trials} measured, {report.failed} failed")
    if report.failure_cause is not None:
        table.add_row("failures", escape(report.failure_cause))
    if report.stop_reason is not None:
        table.add_row("stopped", report.stop_reason)
    if report.seeded_from is not None:
        table.add_row("started from", report.seeded_from)
    table.add_row("best median latency", us(report.best_latency_secs))
    if report.finalists:
        winner = report.finalists[0]
        table.add_row(
            "re-timed",
            f"{us(winner.median_secs)} (interval {us(winner.interval.low)} - "
            f"{us(winner.interval.high)}, {len(winner.samples)} samples; first timed "
            f"{us(winner.first_median_secs)})",
        )
    if report.gflops is not None:
        table.add_row("throughput", f"{report.gflops:.1f} GFLOP/s")
    table.add_row("untuned latency", us(report.baseline_latency_secs))
    if report.speedup is not None:
        table.add_row("speedup", f"{report.speedup:.1f}x")
    model = report.cost_model
    started_from = "fresh" if model is None else f"{model.family} version {model.version}"
    table.add_row("cost model", f"started from {started_from}")
    table.add_row("wall time", f"{report.wall_secs:.1f} s")
    _out.print(table)
    if report.finalists:
        _print_finalists(report.finalists)
    if report.best_latency_secs is not None:
        _out.print(f"next: {escape(next_steps)}", highlight=False, soft_wrap=True)


def next_commands(
    workload: str, params: list[str] | None, file: Path | None, target: str | None, db: str | None
) -> str:
    """The commands that export what `tune` found as a library and run it as it was tuned."""
    source = ["--file", str(file)] if file is not None else [workload]
    for param in params or []:
        source += ["-p", param]
    options = [*(["--target", target] if target else []), *(["--db", db] if db else [])]
    library = f"{file.stem if file is not None else workload}.so"
    export = ["autosched", "export", *source, *options, "--format", "library", "-o", library]
    return f"{shlex.join(export)} && autosched run {shlex.quote(library)} --time"


def _print_finalists(finalists: Sequence[Finalist]) -> None:
    from autosched.records import BASELINE_TRACE

    confidence = min(finalist.interval.confidence for finalist in finalists)
    table = Table(
        "rank", "program", "first us", "re-timed us", f"{confidence:.0%} interval us", "samples",
        title="finalists timed again side by side (tie: its interval overlaps the winner's)",
    )  # fmt: skip
    for rank, finalist in enumerate(finalists, start=1):
        table.add_row(
            str(rank) + (" tie" if finalist.tie and rank > 1 else ""),
            "untuned" if finalist.trace_json == BASELINE_TRACE else finalist.program_hash[:12],
            f"{finalist.first_median_secs * 1e6:.2f}",
            f"{finalist.median_secs * 1e6:.2f}",
            f"{finalist.interval.low * 1e6:.2f} - {finalist.interval.high * 1e6:.2f}",
            str(len(finalist.samples)),
        )
    _out.print(table)


def workloads(as_json: JsonOpt = False) -> None:
    """List the built-in workloads with their parameters and defaults."""
    from autosched.workloads import workload_specs

    specs = workload_specs()
    if as_json:
        document = [
            {
                "name": spec.name,
                "description": spec.description,
                "params": [
                    {
                        "name": p.name,
                        "type": p.type.__name__,
                        "default": p.default,
                        "help": p.help,
                        **({"choices": list(p.choices)} if p.choices else {}),
                    }
                    for p in spec.params
                ],
            }
            for spec in specs
        ]
        print(json.dumps(document))
        return
    table = Table("workload", "parameters (defaults)", "description")
    for spec in specs:
        params = " ".join(f"{p.name}={p.default}" for p in spec.params)
        table.add_row(spec.name, params, spec.description)
    _out.print(table)


def check(
    workload: WorkloadArg,
    param: ParamOpt = None,
    target: TargetOpt = None,
    trials: Annotated[int, typer.Option(min=1, max=1000, help="Trials of the short tuning.")] = 8,
    seed: Annotated[int, typer.Option(help="Seed of the inputs and the search.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Check a workload against its reference: untuned, after a short tuning, and its peer."""
    from autosched.check import check_workload
    from autosched.target import parse_target

    spec = resolve_workload(workload, param, None)
    results = check_workload(spec, parse_target(target), trials=trials, seed=seed)
    if as_json:
        print(json.dumps([{"stage": r.stage, "ok": r.ok, "detail": r.detail} for r in results]))
    else:
        for r in results:
            mark = {True: "ok", False: "FAILED", None: "-"}[r.ok]
            _out.print(f"{r.stage:8} {mark:6} {escape(r.detail)}", highlight=False)
    if any(r.ok is False for r in results):
        raise typer.Exit(code=1)


def calibrate(target: TargetOpt = None, as_json: JsonOpt = False) -> None:
    """Measure this machine's peak GFLOP/s and memory bandwidth, the roofline of `bench`."""
    from autosched.machine.roofline import calibrate as measure_machine
    from autosched.machine.roofline import describe_calibration, save_calibration
    from autosched.target import parse_target

    target_json = parse_target(target)
    calibration = measure_machine(target_json)
    path = save_calibration(target_json, calibration)
    if as_json:
        print(json.dumps({"path": str(path), **calibration.__dict__}))
        return
    _out.print(describe_calibration(calibration) + f"; stored in {path}", highlight=False)
    if calibration.busy:
        _err.print(
            f"warning: other processes kept {calibration.other_load:.1f} cores busy through every "
            "attempt; calibrate again on a quiet machine",
            highlight=False,
            soft_wrap=True,
        )
