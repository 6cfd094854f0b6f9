"""Whole models, as clients submit and follow them: upload an ONNX file as a model job, list and
read model jobs with their tasks and budget split, download the compiled model, cancel. A client
sees and cancels only its own model jobs; an admin token every one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Query, UploadFile, status
from fastapi.responses import Response

from autosched.errors import UserError
from autosched.protocol import (
    ModelJobCreate,
    ModelJobPublic,
    ModelJobsPublic,
)
from autosched.server.api.deps import (
    JobScope,
    LeasesDep,
    LogDep,
    ModelsDep,
    OwnModelId,
    PageDep,
    ReaderAuth,
    SettingsDep,
    Submitter,
    over_limit,
)
from autosched.server.api.resolve import job_target
from autosched.server.models import (
    admit_upload,
    model_library,
    model_limits,
    model_manifest,
    submit_model,
)

LibraryTarget = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=4096,
        description="The model job's kind, a target key or target JSON (default: the model "
        "job's target).",
    ),
]

router = APIRouter(prefix="/models", tags=["models"], dependencies=[ReaderAuth])

FORM_BYTES = 64 << 10
"""Room in a model upload's body for its form fields and multipart framing, beyond the file."""

_LIBRARY = "application/octet-stream"
OVER_LIMIT = over_limit("model jobs")


@router.post("", status_code=status.HTTP_201_CREATED, responses=OVER_LIMIT)
def submit_model_job(
    file: Annotated[
        UploadFile,
        File(description="The model as an ONNX file (TVMScript and .pt2 files are refused)."),
    ],
    fields: Annotated[ModelJobCreate, Form()],
    log: LogDep,
    models: ModelsDep,
    leases: LeasesDep,
    settings: SettingsDep,
    owner: Submitter,
) -> ModelJobPublic:
    """Queue a model job of the client's: the model is imported and its tasks extracted first, so
    a file that is not a model, an unsupported operator or a shape that is not static is refused,
    with nothing stored. Its tasks are tuned round by round as tuning jobs that share the
    workers."""
    if fields.trials > settings.max_job_trials:
        raise UserError(f"trials: at most {settings.max_job_trials} per model job on this server")
    models.check_room(owner, settings.max_client_model_jobs)
    data = file.file.read(settings.max_model_bytes + 1)
    upload = admit_upload(file.filename, data, max_bytes=settings.max_model_bytes)
    target = job_target(leases, fields.target)
    model_id = submit_model(
        log,
        upload,
        fields,
        target,
        max_input_bytes=settings.max_program_bytes,
        limits=model_limits(settings),
        owner=owner,
        max_open=settings.max_client_model_jobs,
    )
    return ModelJobPublic.of(models.progress(model_id))


@router.get("")
def list_model_jobs(
    models: ModelsDep,
    scope: JobScope,
    page: PageDep,
) -> ModelJobsPublic:
    """A page of the caller's model jobs (an admin's: every one), newest first, each with its
    tasks."""
    found, count = models.page(limit=page.limit, offset=page.offset, owner=scope)
    return ModelJobsPublic(data=[ModelJobPublic.of(job) for job in found], count=count)


@router.get("/{model_id}")
def get_model_job(model_id: OwnModelId, models: ModelsDep) -> ModelJobPublic:
    """A model job: status, per task its weight, reused records, rounds, trials, best and untuned
    latency; the estimated end-to-end latency tuned and untuned; the output check."""
    return ModelJobPublic.of(models.progress(model_id))


@router.post("/{model_id}/cancel")
def cancel_model_job(model_id: OwnModelId, models: ModelsDep) -> ModelJobPublic:
    """Stop a model job and its current round; one that already ended keeps its status."""
    return ModelJobPublic.of(models.cancel(model_id))


@router.get(
    "/{model_id}/library",
    response_class=Response,
    responses={
        200: {
            "content": {_LIBRARY: {"schema": {"type": "string", "format": "binary"}}},
            "description": "A Relax VM library: tvm.runtime.load_module loads it, "
            "tvm.relax.VirtualMachine runs its main.",
        }
    },
)
def get_model_library(
    model_id: OwnModelId, log: LogDep, settings: SettingsDep, target: LibraryTarget = None
) -> Response:
    """The model compiled with the log's best schedule of each task on the target (a task
    without one keeps TVM's default schedule)."""
    name, library = model_library(log, model_id, target, limits=model_limits(settings))
    return Response(
        library,
        media_type=_LIBRARY,
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.get("/{model_id}/manifest")
def get_model_manifest(
    model_id: OwnModelId, log: LogDep, settings: SettingsDep, target: LibraryTarget = None
) -> dict[str, Any]:
    """The manifest of the model job's library for the target, which ``autosched.runtime``
    loads the library by: the threads it was tuned on, its inputs and outputs, the output check
    and the SHA-256 of the uploaded file. `autosched export --model-job` writes it beside the
    library."""
    return model_manifest(log, model_id, target, limits=model_limits(settings))
