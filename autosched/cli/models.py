"""`autosched tune MODEL_FILE` and `autosched log models`: whole models (ONNX, PyTorch ``.pt2``,
Relax TVMScript) tuned on this machine, and the models a log holds (their export is
``autosched.cli.export``'s).

`tune` in ``autosched.cli.tune`` hands a first argument ending in ``.onnx``, ``.pt2`` or ``.py``
to these. The model is imported and its tasks extracted before the log is opened, so
bad input writes nothing.
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
from rich.table import Table

from autosched.cli.options import open_log
from autosched.errors import Cancelled
from autosched.signals import stop_on_signals

if TYPE_CHECKING:
    from autosched.model.tuning import ModelTuneOptions, ModelTuneReport

_out = Console()
_err = Console(stderr=True)

WorkloadOrModelArg = Annotated[
    str,
    typer.Argument(
        help="A built-in workload (`autosched workloads`), or a model file: .onnx, .pt2 "
        "(torch.export.save; unpickled, so only your own files), .py (a Relax @I.ir_module)."
    ),
]
InputOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--input",
        help="A model input's static shape, NAME=1x3x32x32:float32, where the file leaves it open.",
    ),
]


def tune_model_file(
    path: Path,
    inputs: list[str],
    target: str | None,
    options: ModelTuneOptions,
    db: str | None,
    as_json: bool,
) -> None:
    """Tune the model at ``path`` on this machine; print per task and the model's estimates.

    A compiled model whose outputs differ from its framework's is reported and exits with 1.
    """
    from autosched.machine.roofline import UNCALIBRATED_SCHEDULER, load_calibration
    from autosched.measure import LocalMeasurer
    from autosched.model.compile import OutputMismatch
    from autosched.model.load import load_model
    from autosched.model.tasks import extract_tasks
    from autosched.model.tuning import round_step, tune_model
    from autosched.target import parse_target

    target_json = parse_target(target)
    model = load_model(path, inputs)
    tasks = extract_tasks(model, target_json)
    if load_calibration(target_json) is None:
        _err.print(UNCALIBRATED_SCHEDULER, highlight=False, soft_wrap=True)
    log = open_log(db, must_exist=False)
    stop = threading.Event()
    measurer = LocalMeasurer(target_json, cancel=stop)

    def on_round(task: str, trials: int, remaining: int) -> None:
        # on stderr with --json too: stdout holds the document alone
        _err.print(escape(round_step(task, trials, remaining)), highlight=False, soft_wrap=True)

    try:
        with stop_on_signals(stop, "the round in flight is dropped"):
            report = tune_model(model, tasks, target_json, log, measurer, options, on_round, stop)
    except Cancelled:
        _err.print("interrupted: measurements of completed rounds are kept in the log")
        raise typer.Exit(code=130) from None
    except OutputMismatch as error:
        _err.print(f"[red]error:[/red] {escape(str(error))}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=1) from None
    finally:
        measurer.close()
        log.close()
    if as_json:
        print(json.dumps(report.as_json()))
    else:
        _print_model_report(report)
        if not report.nothing_worked:
            next_steps = _next_commands(path, inputs, target, db)
            _out.print(f"next: {escape(next_steps)}", highlight=False, soft_wrap=True)
    if report.nothing_worked:
        _err.print(
            "every trial of every task failed; the model keeps TVM's default schedules",
            highlight=False,
        )
        raise typer.Exit(code=1)


def _next_commands(path: Path, inputs: list[str], target: str | None, db: str | None) -> str:
    """The commands that export the tuned model as a library and run it beside its framework."""
    source = [str(path), *(item for spec in inputs for item in ("--input", spec))]
    options = [*(["--target", target] if target else []), *(["--db", db] if db else [])]
    library = f"{path.stem}.so"
    export = ["autosched", "export", *source, *options, "--format", "library", "-o", library]
    peer = {".onnx": " --compare onnxruntime", ".pt2": " --compare torch"}.get(path.suffix, "")
    return f"{shlex.join(export)} && autosched run {shlex.quote(library)} --time{peer}"


def _print_model_report(report: ModelTuneReport) -> None:
    def us(secs: float | None) -> str:
        return "-" if secs is None else f"{secs * 1e6:.2f}"

    table = Table(
        "task", "weight", "trials", "reused", "best us", "re-timed", "untuned us", "schedule",
        title=f"{report.model}: tasks",
    )  # fmt: skip
    for task in report.tasks:
        table.add_row(
            task.name,
            str(task.weight),
            str(task.trials),
            str(task.reused_records) if task.reused_records else "-",
            us(task.best_secs),
            str(task.finalists) if task.finalists else "-",
            us(task.baseline_secs),
            task.schedule,
        )
    _out.print(table)
    for task in report.tasks:
        if task.default_schedule is not None:
            _out.print(
                f"note: {escape(task.name)} keeps TVM's default schedule: "
                f"{escape(task.default_schedule)}",
                highlight=False,
                soft_wrap=True,
            )
    latency = report.latency
    if report.latency_problem is not None:
        _out.print(
            f"warning: the model was not timed whole: {escape(report.latency_problem)}",
            highlight=False,
            soft_wrap=True,
        )
    if latency is not None:
        threads = "TVM's own pool" if latency.threads is None else f"{latency.threads} threads"
        _out.print(
            f"latency (the whole model, {threads}, as `autosched run` times it): "
            f"{us(latency.median_secs)} us (95% interval {us(latency.low_secs)}-"
            f"{us(latency.high_secs)})",
            highlight=False,
            soft_wrap=True,
        )
    estimated = f"over {len(report.estimated)} of {len(report.tasks)} tasks"
    _out.print(
        f"estimated latency (sum of weight x latency, {estimated}): "
        f"{us(report.tuned_secs)} us tuned, {us(report.untuned_secs)} us untuned; "
        f"{report.trials} trials, {report.reused_records} records reused; "
        f"outputs match {report.check.reference} (max abs error {report.check.max_abs_error:.2g}); "
        f"{report.wall_secs:.1f} s",
        highlight=False,
        soft_wrap=True,
    )


def show_models(db: str | None, as_json: bool) -> None:
    """List the tuned models with their tasks: weight, best latency, default schedules."""
    from autosched.log.tuned_models import TunedModelStore

    log = open_log(db, must_exist=True, read_only=True)
    try:
        models = TunedModelStore(log).list()
    finally:
        log.close()
    if as_json:
        document = [
            {
                "model": model.name,
                "key": model.key,
                "format": model.format,
                "inputs": model.inputs,
                "target": model.target_json,
                "estimated_latency_us": model.estimated_secs * 1e6,
                "estimated_untuned_latency_us": model.untuned_secs * 1e6,
                "measured_latency_us": _us(model.measured_secs),
                "measured_interval_us": None
                if model.measured_low_secs is None or model.measured_high_secs is None
                else [model.measured_low_secs * 1e6, model.measured_high_secs * 1e6],
                "reference": model.reference,
                "max_abs_error": model.max_abs_error,
                "tuned_at": model.tuned_at.isoformat(),
                "tasks": [
                    {
                        "name": task.name,
                        "workload_key": task.workload_key,
                        "weight": task.weight,
                        "best_latency_us": _us(task.best_secs),
                        "default_schedule": task.default_schedule,
                        "schedule": task.schedule,
                    }
                    for task in model.tasks
                ],
            }
            for model in models
        ]
        print(json.dumps(document))
        return
    for model in models:
        target = ", ".join(
            f"{k}={v}" for k, v in model.target_json.items() if k in ("kind", "mcpu")
        )
        whole = "" if model.measured_secs is None else f"{model.measured_secs * 1e6:.2f} us whole, "
        table = Table(
            "task", "weight", "best us", "schedule",
            title=f"{model.name} ({model.format}, {target}): {whole}estimated "
            f"{model.estimated_secs * 1e6:.2f} us tuned, {model.untuned_secs * 1e6:.2f} us untuned",
        )  # fmt: skip
        for task in model.tasks:
            table.add_row(
                task.name,
                str(task.weight),
                "-" if task.best_secs is None else f"{task.best_secs * 1e6:.2f}",
                task.schedule,
            )
        _out.print(table)
    if not models:
        _out.print("no tuned models in the log")


def _us(secs: float | None) -> float | None:
    return None if secs is None else secs * 1e6
