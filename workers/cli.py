"""`autosched worker`: a worker daemon for a tuning server, until SIGTERM; `register` adds it to
the app (the ``autosched.commands`` entry point ``worker``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from autosched.cli.options import DEFAULT_SERVER, ServerOpt, UnsafeNoSandboxOpt
from autosched.errors import UserError

WorkerTokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="AUTOSCHED_WORKER_TOKEN",
        help="A worker token of the server. On the command line it shows in `ps`: prefer the "
        "variable or --token-file.",
    ),
]
TokenFileOpt = Annotated[
    Path | None, typer.Option("--token-file", help="Read the worker token from this file.")
]


def worker(
    server: ServerOpt = DEFAULT_SERVER,
    token: WorkerTokenOpt = None,
    token_file: TokenFileOpt = None,
    target: Annotated[
        str,
        typer.Option(
            help='"auto" (this machine\'s GPU if it has one, else its CPU), "llvm", "cuda", '
            "or target JSON."
        ),
    ] = "auto",
    device: Annotated[int, typer.Option(min=0, help="Index of the GPU to measure on.")] = 0,
    batch: Annotated[int, typer.Option(min=1, max=1024, help="Candidates per lease.")] = 8,
    unsafe_no_sandbox: UnsafeNoSandboxOpt = False,
) -> None:
    """Measure candidates for a server: lease, build and time them here, report; until SIGTERM."""
    import threading

    from autosched.client.http import ServiceClient
    from autosched.measure import MeasureConfig, sandbox
    from autosched.signals import stop_on_signals
    from autosched.workers.daemon import WorkerDaemon

    sandbox.require(unsafe=unsafe_no_sandbox)
    token = _token(token, token_file)
    target_json = _worker_target(target)
    stop = threading.Event()
    with (
        ServiceClient(server, token) as client,
        stop_on_signals(stop, "the lease in hand is released"),
    ):
        daemon = WorkerDaemon(
            client, target_json, batch=batch, config=MeasureConfig(device_index=device)
        )
        daemon.run(stop)


def _token(token: str | None, token_file: Path | None) -> str | None:
    if token_file is None:
        return token
    if token is not None:
        raise UserError(
            "give the worker token once: --token (or AUTOSCHED_WORKER_TOKEN), or --token-file"
        )
    try:
        return token_file.read_text().strip() or None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read the token file {token_file}: {error}") from None


def _worker_target(text: str) -> dict[str, Any]:
    from autosched.target import host_target, parse_target

    if text != "auto":
        return parse_target(text)
    try:
        return parse_target("cuda")
    except UserError:  # no GPU here
        return host_target()


def register(app: typer.Typer) -> None:
    """Add `autosched worker` to the `autosched` app."""
    app.command()(worker)
