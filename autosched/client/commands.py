"""A client's commands of the `autosched` CLI: submit a job or an ONNX model to a tuning server,
and follow it with status (a job, a model job, or the latest of both), each ending with the next
command to run. They speak to the server through ``autosched.client.http`` only.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from autosched.cli.models import InputOpt
from autosched.cli.options import (
    DEFAULT_SERVER,
    FileOpt,
    JsonOpt,
    ParamOpt,
    ServerOpt,
    TokenOpt,
)
from autosched.errors import UserError
from autosched.finals.ranking import FINALISTS, MAX_FINALISTS, MAX_ROUNDS, ROUNDS
from autosched.model import ROUND_TRIALS, SERVICE_REFUSALS, is_model_file
from autosched.search.registry import DEFAULT_STRATEGY, STRATEGY_HELP

if TYPE_CHECKING:
    from autosched.client.http import ServiceClient
    from autosched.protocol import JobPublic, JobsPublic, ModelJobPublic, ModelJobsPublic

    Shown: TypeAlias = JobPublic | JobsPublic | ModelJobPublic | ModelJobsPublic

JobTargetOpt = Annotated[
    str,
    typer.Option(
        "--target",
        help='"llvm" or "cuda": the exact target of the service\'s workers of that kind; '
        "or target JSON.",
    ),
]

SubmitArg = Annotated[
    str,
    typer.Argument(
        help="A built-in workload (`autosched workloads`), or an ONNX model file (.onnx) whose "
        "tasks the service tunes as one model job."
    ),
]

_out = Console()
_err = Console(stderr=True)


def submit(
    workload: SubmitArg = "matmul",
    param: ParamOpt = None,
    file: FileOpt = None,
    target: JobTargetOpt = "llvm",
    trials: Annotated[int, typer.Option(min=1, max=100_000, help="New measurements.")] = 64,
    batch: Annotated[
        int | None,
        typer.Option(min=1, max=4096, help="Candidates per batch [64; a model's rounds: 16]."),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(min=0, max=2**31 - 1, help="Seed for a reproducible search.")
    ] = None,
    strategy: Annotated[str, typer.Option(help=STRATEGY_HELP)] = DEFAULT_STRATEGY,
    finalists: Annotated[
        int,
        typer.Option(
            min=0,
            max=MAX_FINALISTS,
            help="Fastest candidates one worker times again at the end, side by side with the "
            "untuned program (0: none); for a model, those of each tuned task.",
        ),
    ] = FINALISTS,
    rounds: Annotated[
        int, typer.Option(min=1, max=MAX_ROUNDS, help="Rounds of that timing.")
    ] = ROUNDS,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
    model_input: InputOpt = None,
) -> None:
    """Submit a tuning job, or an ONNX model as a model job, to an autosched server and print
    its id."""
    from pydantic import ValidationError

    from autosched.protocol import JobCreate, ModelJobCreate, problem_line

    kind: type[JobCreate] | type[ModelJobCreate]
    if is_model_file(workload):
        if param or file is not None:
            raise UserError("-p and --file describe a workload; a model file takes --input")
        refused = SERVICE_REFUSALS.get(Path(workload).suffix)
        if refused is not None:
            raise UserError(f"{workload}: {refused}")
        kind = ModelJobCreate
        document: dict[str, Any] = {
            "inputs": model_input or [],
            "target": target.strip(),
            "batch_size": batch or ROUND_TRIALS,
            "final_rounds": rounds,
        }
    else:
        if model_input:
            raise UserError("--input sets a model file's input shapes; a workload takes -p")
        kind = JobCreate
        document = {
            "workload": _workload_document(workload, param, file),
            "target": _target_document(target),
            "batch_size": batch or 64,
            "rounds": rounds,
        }
    search = {"trials": trials, "seed": seed, "strategy": strategy, "finalists": finalists}
    try:
        fields = kind.model_validate({**document, **search})
    except ValidationError as error:
        raise UserError(problem_line(error.errors())) from None
    with _client(server, token) as client:
        if isinstance(fields, ModelJobCreate):
            created: JobPublic | ModelJobPublic = client.submit_model(Path(workload), fields)
            watched = f"--model {created.id}"
        else:
            created = client.submit(fields)
            watched = str(created.id)
    print(created.model_dump_json() if as_json else created.id)
    if not as_json:
        _next(f"autosched status {watched} --watch{_server_option(server)}")


def _next(command: str) -> None:
    """The command to run next, on stderr: stdout keeps what scripts read (a job's id)."""
    _err.print(f"next: {command}", highlight=False, markup=False, soft_wrap=True)


def _server_option(server: str) -> str:
    return "" if server == DEFAULT_SERVER else f" --server {shlex.quote(server)}"


def _export_commands(job: JobPublic, server: str) -> str | None:
    """The commands that export a finished job's best schedule from the server as a library and
    run it; None for a job without a best or of a program of the client's (its --file)."""
    if job.status.value != "finished" or job.best_latency_secs is None or not job.workload.params:
        return None
    library = f"{job.workload.name}.so"
    export = ["autosched", "export", job.workload.name]
    for name, value in job.workload.params.items():
        export += ["-p", f"{name}={value}"]
    export += ["--server", server, "--target", job.target.key, "--format", "library"]
    return f"{shlex.join([*export, '-o', library])} && autosched run {library} --time"


def _model_export_commands(model: ModelJobPublic, server: str) -> str | None:
    """The commands that fetch a finished model job's library and run it beside ONNX Runtime
    (on the local copy of the model file, named as uploaded); None for a model job that did
    not finish with its outputs checked."""
    check = model.output_check
    if model.status.value != "finished" or check is None or check.reason is not None:
        return None
    source, library = f"{model.name}.onnx", f"{model.name}.so"
    export = ["autosched", "export", source, "--server", server, "--model-job", str(model.id)]
    export += ["--format", "library", "-o", library]
    return f"{shlex.join(export)} && autosched run {library} --time --compare onnxruntime"


def _workload_document(name: str, params: list[str] | None, file: Path | None) -> dict[str, Any]:
    if file is None:
        from autosched.workloads import parse_param_overrides

        return {"name": name, "params": parse_param_overrides(params or [])}
    if params:
        raise UserError("-p sets parameters of built-in workloads; a --file takes none")
    from autosched.workload import load_workload_file

    if file.suffix == ".json":  # data already: the server admits it
        try:
            return {"name": file.stem, "ir_json": file.read_text()}
        except (OSError, UnicodeDecodeError) as error:
            raise UserError(f"cannot read workload file {file}: {error}") from None
    from autosched.script_check import check_script

    # TVMScript from anyone: its syntax is checked before TVM's parser runs it here, and the
    # server gets the program as data.
    try:
        check_script(file.read_text(), file.stem)
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read workload file {file}: {error}") from None
    workload = load_workload_file(str(file))
    return {"name": workload.name, "ir_json": workload.source}


def _target_document(text: str) -> str | dict[str, Any]:
    """A kind stays a word, for the server to resolve; target JSON travels as an object."""
    if not text.lstrip().startswith("{"):
        return text.strip()
    try:
        target = json.loads(text)
    except json.JSONDecodeError as error:
        raise UserError(f"target is not valid JSON: {error}") from None
    if not isinstance(target, dict):
        raise UserError("target JSON must be an object")
    return target


def status(
    job: Annotated[
        int | None, typer.Argument(help="A job id; the latest jobs if left out.")
    ] = None,
    model: Annotated[
        int | None,
        typer.Option(
            "--model", min=1, help="A model job's id: its tasks and the split of its budget."
        ),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", help="Refresh live until the job ends (Ctrl-C to leave).")
    ] = False,
    interval: Annotated[
        float, typer.Option(min=0.1, max=3600, help="Seconds between refreshes of --watch.")
    ] = 2.0,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Jobs listed at most.")] = 20,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a job's progress (status, trials, best latency, curve), a model job's (--model), or
    list the latest jobs and model jobs."""
    if watch and as_json:
        raise UserError("--watch shows a live view; leave out --json")
    if job is not None and model is not None:
        raise UserError("give a job id or --model, not both")
    with _client(server, token) as client:

        def fetch() -> Shown:
            if model is not None:
                return client.model(model)
            return client.jobs(limit=limit) if job is None else client.job(job)

        if as_json:
            print(fetch().model_dump_json())
            return
        shown = _watch(fetch, interval) if watch else fetch()
        if not watch:
            _out.print(_render(shown))
            if job is None and model is None and (models := client.models(limit=limit)).data:
                _out.print(_render(models))
    from autosched.protocol import JobPublic, ModelJobPublic

    commands = None
    if isinstance(shown, JobPublic):
        commands = _export_commands(shown, server)
    elif isinstance(shown, ModelJobPublic):
        commands = _model_export_commands(shown, server)
    if commands is not None:
        _out.print(f"next: {commands}", highlight=False, markup=False, soft_wrap=True)


def _watch(fetch: Callable[[], Shown], interval: float) -> Shown:
    """Refresh until the job ends (a list, until Ctrl-C): in place on a terminal; in a log, a new
    view each time something changed."""
    current = fetch()
    if _out.is_terminal:
        with Live(_render(current), console=_out, auto_refresh=False) as live:
            while not _ended(current):
                time.sleep(interval)
                current = fetch()
                live.update(_render(current), refresh=True)
        return current
    _out.print(_render(current))
    while not _ended(current):
        time.sleep(interval)
        previous, current = current, fetch()
        if current != previous:
            _out.print(_render(current))
    return current


def _ended(current: Shown) -> bool:
    """Whether a watched job or model job has ended; a list never does."""
    from autosched.protocol import JobPublic, ModelJobPublic

    return isinstance(current, JobPublic | ModelJobPublic) and current.status.final


def _render(current: Shown) -> Table | Group:
    from autosched.protocol import JobPublic, ModelJobPublic, ModelJobsPublic

    if isinstance(current, JobPublic):
        return _render_job(current)
    if isinstance(current, ModelJobPublic):
        return _render_model(current)
    if isinstance(current, ModelJobsPublic):
        return _render_models(current)
    table = Table("job", "workload", "target", "status", "trials", "failed", "best", "submitted")
    for job in current.data:
        table.add_row(
            str(job.id),
            _workload_text(job),
            _target_text(job),
            job.status.value,
            f"{job.trials_done}/{job.trials}",
            str(job.failed),
            _latency(job.best_latency_secs),
            f"{job.created_at:%Y-%m-%d %H:%M:%S}",
        )
    table.caption = f"{len(current.data)} of {current.count} jobs"
    return table


def _render_job(job: JobPublic) -> Group:
    table = Table(show_header=False, box=None)
    table.add_row("job", str(job.id))
    table.add_row("workload", f"{_workload_text(job)} ({job.workload.key})")
    table.add_row("target", f"{_target_text(job)} ({job.target.key})")
    table.add_row("status", job.status.value)
    table.add_row("trials", f"{job.trials_done}/{job.trials} measured, {job.failed} failed")
    if job.stop_reason is not None:
        table.add_row("stopped", job.stop_reason)
    table.add_row("best median latency", _latency(job.best_latency_secs))
    if job.workload.flops and job.best_latency_secs:
        table.add_row(
            "throughput", f"{job.workload.flops / job.best_latency_secs / 1e9:.1f} GFLOP/s"
        )
    if job.final is not None:
        table.add_row("final", _final_text(job))
    curve = "  ".join(f"{p.trials}:{_latency(p.best_latency_secs)}" for p in job.curve[-8:])
    return Group(table, Text(f"best so far (trials: latency)  {curve or '-'}"))


def _final_text(job: JobPublic) -> str:
    """Where a job's final stands; once timed, its winner's re-timed median and interval beside
    the untuned program's."""
    final = job.final
    assert final is not None
    if final.state != "timed" or not job.finalists:
        entrants = f"{final.finalists} finalists and the untuned program, {final.rounds} rounds"
        return f"{final.state}: {final.reason or entrants}"
    winner = job.finalists[0]
    low, high = winner.interval_secs
    text = (
        f"timed: {len(job.finalists)} finalists, the winner {_latency(winner.median_secs)} "
        f"({_latency(low)} - {_latency(high)})"
    )
    untuned = next((f for f in job.finalists if f.untuned), None)
    if untuned is not None:
        text += f", untuned {_latency(untuned.median_secs)}"
    ties = sum(f.tie for f in job.finalists[1:])
    return text + (f", {ties} tied with it" if ties else "")


def _render_model(model: ModelJobPublic) -> Group:
    summary = Table(show_header=False, box=None)
    summary.add_row("model job", f"{model.id} ({model.name})")
    summary.add_row("target", f"{_target_text(model)} ({model.target.key})")
    summary.add_row("status", model.status.value)
    if model.reason is not None:
        summary.add_row("reason", model.reason)
    current = "" if model.round_job_id is None else f"; this round: job {model.round_job_id}"
    summary.add_row(
        "trials", f"{model.trials_done}/{model.trials} measured in {model.rounds} rounds{current}"
    )
    summary.add_row(
        "finals",
        f"each tuned task's top {model.finalists} and its untuned program, "
        f"{model.final_rounds} rounds"
        if model.finalists
        else "none: each task keeps its fastest single shot",
    )
    estimated = [task for task in model.tasks if task.untuned_latency_secs is not None]
    summary.add_row(
        "estimated latency",
        f"{_latency(model.estimated_latency_secs)} tuned, "
        f"{_latency(model.untuned_latency_secs)} untuned "
        f"(over {len(estimated)} of {len(model.tasks)} tasks)",
    )
    check = model.output_check
    if check is not None:
        summary.add_row(
            "output check",
            f"outputs match {check.reference} (max abs error {check.max_abs_error:.2g})"
            if check.ran and check.reason is None
            else f"{'failed' if check.ran else 'not run'}: {check.reason}",
        )
    tasks = Table("task", "weight", "trials", "rounds", "reused", "best", "untuned", "schedule")
    for task in model.tasks:
        tasks.add_row(
            task.name,
            str(task.weight),
            str(task.trials),
            str(task.rounds),
            str(task.reused_records),
            _latency(task.best_latency_secs),
            _latency(task.untuned_latency_secs),
            "tuned" if task.default_schedule is None else f"default: {task.default_schedule}",
        )
    return Group(summary, tasks)


def _render_models(models: ModelJobsPublic) -> Table:
    table = Table(
        "model job", "name", "target", "status", "trials", "tuned", "untuned", "submitted"
    )
    for model in models.data:
        table.add_row(
            str(model.id),
            model.name,
            _target_text(model),
            model.status.value,
            f"{model.trials_done}/{model.trials}",
            _latency(model.estimated_latency_secs),
            _latency(model.untuned_latency_secs),
            f"{model.created_at:%Y-%m-%d %H:%M:%S}",
        )
    table.caption = f"{len(models.data)} of {models.count} model jobs (autosched status --model ID)"
    return table


def _workload_text(job: JobPublic) -> str:
    params = " ".join(f"{k}={v}" for k, v in job.workload.params.items())
    return f"{job.workload.name} {params}".strip()


def _target_text(job: JobPublic | ModelJobPublic) -> str:
    config = job.target.target_json
    detail = config.get("mcpu") or config.get("arch")
    return f"{job.target.kind} {detail}" if detail else job.target.kind


def _latency(secs: float | None) -> str:
    return "-" if secs is None else f"{secs * 1e6:.2f} us"


def _client(server: str, token: str | None) -> ServiceClient:
    from autosched.client.http import ServiceClient

    return ServiceClient(server, token)
