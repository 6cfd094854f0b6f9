"""The FastAPI application of the tuning service: routes under /api/v1, errors as one line.

Domain errors (``autosched.errors``) become HTTP answers here and only here.

The app opens the tuning log when it starts and closes it when it stops; background services (the
search engine, a local worker) start and stop with it. `autosched serve` runs it with uvicorn.
The web dashboard is served at / beside the API, and reads the service through the API alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Protocol
from urllib.parse import urlsplit

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from autosched import __version__
from autosched.errors import (
    Conflict,
    Forbidden,
    NotFound,
    OverLimit,
    ServiceUnavailable,
    TooLarge,
    UserError,
)
from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.leases import LeaseQueue
from autosched.log.model_jobs import ModelJobStore
from autosched.log.tokens import TokenStore, env_token_name
from autosched.protocol import PROBLEMS, problem_line
from autosched.server.api.deps import Stores
from autosched.server.api.routes import (
    health,
    jobs,
    models,
    monitoring,
    records,
    workers,
    workloads,
)
from autosched.server.api.routes import log as log_routes
from autosched.server.dashboard import mount_dashboard
from autosched.server.settings import Settings, is_loopback

API_PREFIX = "/api/v1"


class BackgroundService(Protocol):
    """Work that runs beside the API (threads or processes), started and stopped with the app;
    the server is ready only while every one of them is ``alive``."""

    name: str

    @property
    def alive(self) -> bool: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


# Made once the log is open, so that a service shares the app's log and stores.
ServiceFactory = Callable[[Stores], BackgroundService]


def create_app(settings: Settings, *, background: Sequence[ServiceFactory] = ()) -> FastAPI:
    """The API app for ``settings``; ``background`` services run while it does.

    At startup the app opens (and migrates) the tuning log, accepts the tokens set in the
    environment, then starts the background services in order; at shutdown it stops them in reverse
    order and closes the log.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log = TuningLog(settings.db_url)
        started: list[BackgroundService] = []
        app.state.background = started
        try:
            tokens = TokenStore(log)
            for role, token in settings.env_tokens().items():
                tokens.add(role, env_token_name(role), token)
            leases = LeaseQueue(
                log,
                lease_secs=settings.lease_secs,
                worker_timeout_secs=settings.worker_timeout_secs,
            )
            stores = app.state.stores = Stores(
                settings, log, JobStore(log), leases, tokens, ModelJobStore(log)
            )
            for make in background:
                service = make(stores)
                service.start()
                started.append(service)
            yield
        finally:
            for service in reversed(started):
                service.stop()
            log.close()

    app = FastAPI(
        title="autosched",
        summary="Auto-scheduling and autotuning of TVM tensor programs, as a service.",
        version=__version__,
        lifespan=lifespan,
        max_body_size=settings.max_body_bytes,
    )
    app.include_router(health.router, responses={503: PROBLEMS[503]})
    for group in (jobs, workloads, records, workers, monitoring):
        app.include_router(group.router, prefix=API_PREFIX, responses=PROBLEMS)
    app.include_router(log_routes.router, prefix=API_PREFIX, responses=PROBLEMS)
    app.include_router(
        models.router,
        prefix=API_PREFIX,
        responses=PROBLEMS,
        max_body_size=settings.max_model_bytes + models.FORM_BYTES,
    )
    mount_dashboard(app, no_auth=settings.no_auth)
    app.add_exception_handler(UserError, _domain_error)
    app.add_exception_handler(ServiceUnavailable, _unavailable)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    if settings.no_auth:
        app.middleware("http")(_loopback_hosts_only)
    return app


async def _loopback_hosts_only(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """Without auth, a request must name this machine in its Host header: a web page that
    rebinds its own DNS name to 127.0.0.1 names its own host, and is refused."""
    host = urlsplit(f"//{request.headers.get('host', '')}").hostname or ""
    if not is_loopback(host):
        detail = f"this server runs without auth and answers loopback hosts only, not {host!r}"
        return JSONResponse({"detail": detail}, status_code=status.HTTP_400_BAD_REQUEST)
    return await call_next(request)


# The one place where domain errors become HTTP: the most specific class that matches wins.
_STATUS: dict[type[UserError], int] = {
    NotFound: status.HTTP_404_NOT_FOUND,
    Forbidden: status.HTTP_403_FORBIDDEN,
    Conflict: status.HTTP_409_CONFLICT,
    TooLarge: status.HTTP_413_CONTENT_TOO_LARGE,
    OverLimit: status.HTTP_429_TOO_MANY_REQUESTS,
    UserError: status.HTTP_422_UNPROCESSABLE_CONTENT,
}


RETRY_AFTER_SECS = 5
LIMIT_RETRY_AFTER_SECS = 60  # a client's jobs take minutes to end


async def _unavailable(_request: Request, error: Exception) -> JSONResponse:
    """The tuning log's database is down for now: 503, and when to try again."""
    return JSONResponse(
        {"detail": " ".join(str(error).split())},
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": str(RETRY_AFTER_SECS)},
    )


async def _domain_error(_request: Request, error: Exception) -> JSONResponse:
    code = next(code for kind, code in _STATUS.items() if isinstance(error, kind))
    headers = {"Retry-After": str(LIMIT_RETRY_AFTER_SECS)} if isinstance(error, OverLimit) else None
    return JSONResponse({"detail": " ".join(str(error).split())}, status_code=code, headers=headers)


async def _http_error(_request: Request, error: Exception) -> JSONResponse:
    """FastAPI's own refusals as one line; a body it cannot even decode is bad input, a 422."""
    assert isinstance(error, StarletteHTTPException)
    code = error.status_code
    if code == status.HTTP_400_BAD_REQUEST:  # FastAPI's "error parsing the body"
        code = status.HTTP_422_UNPROCESSABLE_CONTENT
        detail = "the request body is not valid JSON (nor even text)"
    else:
        detail = " ".join(str(error.detail).split())
    return JSONResponse({"detail": detail}, status_code=code, headers=error.headers)


async def _validation_error(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    return JSONResponse(
        {"detail": problem_line(error.errors(), skip=1)},
        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
    )
