"""The `autosched` command line: the app, its commands, and one-line errors with exit code 2.

The commands that work on this machine alone live beside this module, a client's of a tuning
server (`submit`, `status`) beside the HTTP client (``autosched.client.commands``); the
service's (`serve`, `engine`, `token`, `worker`) come from ``autosched.server`` and
``autosched.workers``, found through the ``autosched.commands`` entry points, so this package
never imports the service built on it.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points

import typer
from rich.console import Console
from rich.markup import escape
from typer.exceptions import TyperException

from autosched.cli import tune
from autosched.cli.bench import bench_app
from autosched.cli.costmodel import model_app
from autosched.cli.export import export_schedule
from autosched.cli.logfile import log_app
from autosched.cli.run import run_artefact
from autosched.client.commands import status, submit
from autosched.errors import ServiceUnavailable, UserError
from autosched.torch_guard import keep_torch_out

COMMAND_GROUP = "autosched.commands"
"""Entry points of this group are callables that add their commands to the app."""

app = typer.Typer(
    name="autosched",
    help="Auto-scheduler and autotuner for tensor programs (TVM MetaSchedule + XGBoost).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(tune.tune)
app.command()(tune.workloads)
app.add_typer(log_app, name="log")
app.command("export")(export_schedule)
app.command("run")(run_artefact)
app.command()(tune.check)
app.command()(tune.calibrate)
app.command()(submit)
app.command()(status)
app.add_typer(bench_app, name="bench")
app.add_typer(model_app, name="model")
for plugin in sorted(entry_points(group=COMMAND_GROUP), key=lambda point: point.name):
    plugin.load()(app)

_err = Console(stderr=True)


def _print_error(message: str) -> None:
    line = escape(" ".join(message.split()))
    _err.print(f"[red]error:[/red] {line}", highlight=False, soft_wrap=True)


def run() -> None:
    """The `autosched` program: `main`, in a process that loads PyTorch only if it uses it."""
    keep_torch_out()
    main()


def main() -> None:
    """The command line: bad input, ours or the argument parser's, is one line and exit code 2."""
    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        sys.exit(130)
    except UserError as error:
        _print_error(str(error))
        sys.exit(2)
    except ServiceUnavailable as error:
        _print_error(str(error))
        sys.exit(1)
    except TyperException as error:  # the argument parser's usage errors; none after the help
        message = error.format_message() if hasattr(error, "format_message") else str(error)
        if message.strip():
            _print_error(message)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
