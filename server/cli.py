"""The tuning service's commands of the `autosched` CLI: serve, engine and token create;
`register` adds them to the app (the ``autosched.commands`` entry point ``server``). A client's
commands, submit and status, live beside the HTTP client (``autosched.client.commands``).

Heavy modules (FastAPI, uvicorn, httpx, TVM) are imported inside the commands that need them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from autosched.cli.options import DbOpt, JsonOpt, UnsafeNoSandboxOpt

if TYPE_CHECKING:
    from autosched.server.api.app import ServiceFactory
    from autosched.server.settings import Settings


def serve(
    db: DbOpt = None,
    host: Annotated[
        str | None,
        typer.Option(
            help="Address to listen on; 0.0.0.0 for every interface [AUTOSCHED_HOST; 127.0.0.1]."
        ),
    ] = None,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Port to listen on [AUTOSCHED_PORT; 8000].")
    ] = None,
    local_worker: Annotated[
        bool, typer.Option("--local-worker", help="Also measure candidates on this machine's CPU.")
    ] = False,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth", help="Serve without tokens; loopback hosts only [AUTOSCHED_NO_AUTH]."
        ),
    ] = False,
    unsafe_no_sandbox: UnsafeNoSandboxOpt = False,
) -> None:
    """Serve the REST API (docs at /docs), the dashboard (at /) and the search engine that drives
    the submitted jobs."""
    import uvicorn

    from autosched.log import TuningLog
    from autosched.measure import sandbox
    from autosched.server.api.app import create_app
    from autosched.server.connections import KEEP_ALIVE_SECS, with_header_deadline
    from autosched.server.settings import load_settings

    settings = load_settings(db_url=db, host=host, port=port, no_auth=no_auth or None)
    sandbox.require(unsafe=unsafe_no_sandbox)  # its model builds and any local worker's
    TuningLog(settings.db_url).close()  # a bad URL or database fails here, in one line
    app = create_app(settings, background=_background(settings, local_worker))
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        http=with_header_deadline(settings.header_timeout_secs),
        timeout_keep_alive=KEEP_ALIVE_SECS,
    )


def _background(settings: Settings, local_worker: bool) -> list[ServiceFactory]:
    """The services `serve` runs beside the API: the search engine, the driver of the model
    jobs, the trainer of the shared cost models, and maybe a local worker."""
    from autosched.server.engine import Engine
    from autosched.server.models import ModelDriver, model_limits
    from autosched.server.trainer import ModelTrainer

    services: list[ServiceFactory] = [
        lambda stores: Engine(stores.log, claim_secs=settings.claim_secs),
        lambda stores: ModelDriver(stores.log, limits=model_limits(settings)),
        lambda stores: ModelTrainer(stores.log),
    ]
    if local_worker:
        from autosched.target import host_target
        from autosched.workers.daemon import WorkerDaemon

        services.append(lambda stores: WorkerDaemon(stores.leases, host_target()))
    return services


def engine(db: DbOpt = None) -> None:
    """Run a search engine alone, to scale out: it drives the jobs submitted to the log."""
    import threading

    from autosched.log import TuningLog
    from autosched.server.engine import Engine
    from autosched.server.settings import load_settings
    from autosched.signals import stop_on_signals

    settings = load_settings(db_url=db)
    stop = threading.Event()
    with TuningLog(settings.db_url) as log, stop_on_signals(stop, "jobs are left to other engines"):
        Engine(log, claim_secs=settings.claim_secs).run(stop)


token_app = typer.Typer(name="token", help="Bearer tokens of the REST API.", no_args_is_help=True)


@token_app.command("create")
def create_token(
    role: Annotated[
        Literal["client", "worker", "admin"],
        typer.Option(
            help="client: submit and read jobs; worker: lease and report only; admin: export "
            "and import the whole log."
        ),
    ],
    name: Annotated[str | None, typer.Option(help="What the token is for.")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create an API token and print it; the log keeps only its hash, so keep it safe."""
    from autosched.log import TuningLog
    from autosched.log.tokens import Role, TokenStore

    label = name or f"{role} token"
    with TuningLog(db) as log:
        token = TokenStore(log).create(Role(role), label)
    if as_json:
        print(json.dumps({"token": token, "role": role, "name": label}))
    else:
        print(token)


def register(app: typer.Typer) -> None:
    """Add the service's commands to the `autosched` app."""
    app.command()(serve)
    app.command()(engine)
    app.add_typer(token_app)
