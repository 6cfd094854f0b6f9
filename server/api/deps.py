"""FastAPI dependencies: the stores the app holds, typed aliases for them, bearer-token auth,
and whose jobs a request may see.

Routers take auth as a router-wide dependency (``dependencies=[ClientAuth]``), so no route of a
group can forget it. A job or model job in a path is taken as ``OwnJobId`` or ``OwnModelId``:
another principal's is answered as missing (404), so ids do not tell whose jobs exist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Path, Query, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from autosched.errors import Forbidden
from autosched.log import TuningLog
from autosched.log.jobs import JobStore, no_job
from autosched.log.leases import LeaseQueue
from autosched.log.model_jobs import ModelJobStore, no_model_job
from autosched.log.tokens import LOCAL_PRINCIPAL, Credential, Role, TokenStore
from autosched.protocol import MAX_ID, MAX_PAGE, Problem
from autosched.server.settings import Settings


@dataclass(frozen=True)
class Stores:
    """What the app opens at startup and every request uses."""

    settings: Settings
    log: TuningLog
    jobs: JobStore
    leases: LeaseQueue
    tokens: TokenStore
    models: ModelJobStore


def get_stores(request: Request) -> Stores:
    return request.app.state.stores


def get_settings(request: Request) -> Settings:
    return get_stores(request).settings


def get_log(request: Request) -> TuningLog:
    return get_stores(request).log


def get_jobs(request: Request) -> JobStore:
    return get_stores(request).jobs


def get_leases(request: Request) -> LeaseQueue:
    return get_stores(request).leases


def get_models(request: Request) -> ModelJobStore:
    return get_stores(request).models


@dataclass(frozen=True)
class Page:
    """A page of a list: ``limit`` items from the ``offset``-th on."""

    limit: int
    offset: int


def get_page(
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> Page:
    """The page a listing route was asked for, by its query parameters."""
    return Page(limit, offset)


SettingsDep = Annotated[Settings, Depends(get_settings)]
LogDep = Annotated[TuningLog, Depends(get_log)]
JobsDep = Annotated[JobStore, Depends(get_jobs)]
LeasesDep = Annotated[LeaseQueue, Depends(get_leases)]
ModelsDep = Annotated[ModelJobStore, Depends(get_models)]
PageDep = Annotated[Page, Depends(get_page)]
# Ids in paths are 32-bit in the database; a larger number is bad input, not a server error.
PathId = Annotated[int, Path(ge=1, le=MAX_ID)]
TargetQuery = Annotated[
    str,
    Query(
        min_length=1,
        max_length=4096,
        description="A target key, target JSON, or a kind (llvm, cuda) the workload was tuned for.",
    ),
]

_bearer = HTTPBearer(
    auto_error=False,
    description="A token from `autosched token create --role client|worker|admin`.",
)


def _require(*roles: Role) -> Callable[..., Credential | None]:
    """A dependency that lets a request through only with a valid token of one of ``roles``; it
    gives the token (None on a server without auth)."""

    def authorize(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Credential | None:
        stores = get_stores(request)
        if stores.settings.no_auth:
            return None
        if credentials is None:
            raise _unauthorized("a bearer token is required (Authorization: Bearer TOKEN)")
        found = stores.tokens.authenticate(credentials.credentials)
        if found is None:
            raise _unauthorized("the bearer token is unknown or revoked")
        if found.role not in roles:
            needed = " or ".join(role.value for role in roles)
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"a {found.role.value} token cannot use this route; it needs a {needed} token",
            )
        return found

    return authorize


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, message, headers={"WWW-Authenticate": "Bearer"}
    )


_worker_token = _require(Role.WORKER)
_client_token = _require(Role.CLIENT)
_reader = _require(Role.CLIENT, Role.ADMIN)
ClientAuth = Depends(_client_token)
ReaderAuth = Depends(_reader)
"""Clients, for their own jobs and the service's state, and admins, for every job as well."""
AdminAuth = Depends(_require(Role.ADMIN))
WorkerAuth = Depends(_worker_token)
WorkerCaller = Annotated[Credential | None, Depends(_worker_token)]


def _submitter(caller: Annotated[Credential | None, Depends(_client_token)]) -> str:
    """The principal a client's submission belongs to (the local one on a server without auth)."""
    return LOCAL_PRINCIPAL if caller is None else caller.principal


Submitter = Annotated[str, Depends(_submitter)]
"""The principal of a client token (else 403), whose new job this is."""


def _job_scope(caller: Annotated[Credential | None, Depends(_reader)]) -> str | None:
    """Whose jobs the caller sees: its principal's, or with an admin token every job (None);
    without auth (loopback only), every job, as whoever may read the log's file: those it ran
    itself and those `autosched tune` wrote into it."""
    if caller is None or caller.role is Role.ADMIN:
        return None
    return caller.principal


JobScope = Annotated[str | None, Depends(_job_scope)]
"""The principal whose jobs and model jobs the caller sees; None: every one (an admin)."""


def _own_job(job_id: PathId, request: Request, scope: JobScope) -> int:
    """The job ``job_id``, if the caller may see it; else as if there were none (404)."""
    if scope is not None and get_jobs(request).owner(job_id) != scope:
        raise no_job(job_id)
    return job_id


def _own_model(model_id: PathId, request: Request, scope: JobScope) -> int:
    """The model job ``model_id``, if the caller may see it; else as if there were none (404)."""
    if scope is not None and get_models(request).owner(model_id) != scope:
        raise no_model_job(model_id)
    return model_id


OwnJobId = Annotated[int, Depends(_own_job)]
"""A job id from the path, of a job the caller may see (else 404, as for a missing job)."""
OwnModelId = Annotated[int, Depends(_own_model)]
"""A model job id from the path, of one the caller may see (else 404, as for a missing one)."""


def _own_worker(worker_id: PathId, request: Request, caller: WorkerCaller) -> int:
    """The worker ``worker_id``, if the caller's token is the one it registered with."""
    owner = get_leases(request).owner(worker_id)
    if caller is not None and owner != caller.id:
        raise Forbidden(f"worker {worker_id} was registered with another token")
    return worker_id


OwnWorkerId = Annotated[int, Depends(_own_worker)]
"""A worker id from the path, acted on by the token that registered it (else 403)."""


def over_limit(what: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI response of a submission over a per-client limit on ``what`` it queues."""
    return {
        status.HTTP_429_TOO_MANY_REQUESTS: {
            "model": Problem,
            "description": f"The client has as many {what} queued or running as the server "
            "allows; retry after Retry-After seconds.",
        }
    }
