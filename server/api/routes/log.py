"""The whole tuning log as a portable file, for admin tokens: export it (or part of it) and import
one, the service's side of `autosched log export` and `autosched log import`."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from autosched.errors import UserError
from autosched.log.portable import SUFFIX, Limits, Selection, export_log, import_log, parse_since
from autosched.protocol import LogImportPublic
from autosched.server.api.deps import AdminAuth, LogDep

router = APIRouter(prefix="/log", tags=["log"], dependencies=[AdminAuth])

IMPORT_LIMITS = Limits()
_GZIP = "application/gzip"


@router.get(
    "/export",
    response_class=FileResponse,
    responses={200: {"content": {_GZIP: {}}, "description": "The portable log file."}},
)
def export_file(
    log: LogDep,
    workload: Annotated[
        str | None, Query(min_length=1, max_length=255, description="A workload key or name.")
    ] = None,
    target: Annotated[
        str | None, Query(pattern=r"^[0-9a-f]{32}$", description="A target key.")
    ] = None,
    since: Annotated[
        str | None, Query(max_length=64, description="Measurements since (ISO date, UTC).")
    ] = None,
) -> FileResponse:
    """The tuning log's workloads, targets, devices, measurements (with provenance) and best
    records, as one gzip-compressed JSON-lines file (``autosched log export``)."""
    selection = Selection(
        workload=workload,
        target_key=target,
        since=None if since is None else parse_since(since),
    )
    handle, name = tempfile.mkstemp(suffix=SUFFIX)
    os.close(handle)
    path = Path(name)
    try:
        export_log(log, path, selection)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return FileResponse(
        path,
        media_type=_GZIP,
        filename=f"autosched-log{SUFFIX}",
        background=BackgroundTask(path.unlink, missing_ok=True),
    )


@router.post(
    "/import",
    max_body_size=IMPORT_LIMITS.file_bytes,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {_GZIP: {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def import_file(request: Request, log: LogDep) -> LogImportPublic:
    """Merge a portable log file (the request's body, as ``autosched log export`` writes it)
    into the tuning log, in one transaction: a file that is refused leaves nothing behind."""
    handle, name = tempfile.mkstemp(suffix=SUFFIX)
    path = Path(name)
    try:
        with os.fdopen(handle, "wb") as file:
            async for chunk in request.stream():
                file.write(chunk)
        if path.stat().st_size == 0:
            raise UserError("the body is empty; send a file of `autosched log export`")
        summary = await run_in_threadpool(
            import_log, log, path, IMPORT_LIMITS, name="the uploaded file"
        )
    finally:
        path.unlink(missing_ok=True)
    return LogImportPublic.model_validate(summary.as_json())
