"""A typed HTTP client of the tuning service's REST API, for the CLI and the worker daemon.

Refusals (4xx) raise UserError (NotFound for a 404, Conflict for a 409) with the server's one-line
message; an unreachable or failing server (connection errors, timeouts, 5xx) raises
ServiceUnavailable, which a worker waits out and retries. It imports the wire protocol and the
records only: no SQL, no TVM.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from autosched.closing import Closing
from autosched.errors import Conflict, NotFound, ServiceUnavailable, UserError
from autosched.protocol import (
    BestPublic,
    FinalReportPublic,
    FinalReportRequest,
    HealthPublic,
    JobCreate,
    JobPublic,
    JobsPublic,
    LeasePublic,
    LeaseRequest,
    ModelJobCreate,
    ModelJobPublic,
    ModelJobsPublic,
    RecordsPublic,
    ReleasePublic,
    ReportOutcomePublic,
    ReportRequest,
    ResultIn,
    RetimedIn,
    WorkerPublic,
    WorkerRegister,
    WorkloadsPublic,
)
from autosched.records import Lease, ReportedResult, ReportOutcome, RetimedEntrant

API = "/api/v1"
UPLOAD_TIMEOUT_SECS = 600.0  # a model upload is answered once its tasks are extracted
_REFUSALS: dict[int, type[UserError]] = {404: NotFound, 409: Conflict}
_Model = TypeVar("_Model", bound=BaseModel)


class ServiceClient(Closing):
    """The REST API of the server at ``base_url``, authenticated with ``token``.

    The worker methods take and return the same records as ``LeaseQueue``'s, so a worker daemon
    drives a remote queue as it would a local one.

    Args:
        base_url: The server, e.g. ``http://127.0.0.1:8000``.
        token: A bearer token (``autosched token create``); ``None`` for a server run with
            ``--no-auth``.
        timeout: Seconds to wait for a connection and for each answer.
        http: An ``httpx.Client`` to send requests with instead of a new one (tests pass
            FastAPI's ``TestClient``); its base URL is used as it is.

    Raises:
        UserError: ``base_url`` is not an http(s) URL.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        http: httpx.Client | None = None,
    ) -> None:
        self._base = base_url.rstrip("/")
        if not self._base.startswith(("http://", "https://")):
            raise UserError(f"server URL must start with http:// or https://, not {base_url!r}")
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        if http is None:
            http = httpx.Client(base_url=self._base, timeout=timeout)
        http.headers.update(headers)
        self._http = http

    def close(self) -> None:
        self._http.close()

    # Health.

    def health(self) -> HealthPublic:
        return _parse(HealthPublic, self._send("GET", "/healthz"))

    def metrics(self) -> str:
        """The Prometheus text of ``/metrics``."""
        return self._send("GET", "/metrics").text

    # Jobs, workloads and records (client tokens).

    def submit(self, job: JobCreate) -> JobPublic:
        return _parse(JobPublic, self._send("POST", f"{API}/jobs", body=job))

    def jobs(self, *, limit: int = 100, offset: int = 0) -> JobsPublic:
        params = {"limit": limit, "offset": offset}
        return _parse(JobsPublic, self._send("GET", f"{API}/jobs", params=params))

    def job(self, job_id: int) -> JobPublic:
        return _parse(JobPublic, self._send("GET", f"{API}/jobs/{job_id}"))

    def cancel(self, job_id: int) -> JobPublic:
        return _parse(JobPublic, self._send("POST", f"{API}/jobs/{job_id}/cancel"))

    def job_best(self, job_id: int) -> BestPublic:
        return _parse(BestPublic, self._send("GET", f"{API}/jobs/{job_id}/best"))

    def workloads(self) -> WorkloadsPublic:
        return _parse(WorkloadsPublic, self._send("GET", f"{API}/workloads"))

    def workload_best(self, key: str, target: str, *, fallback: bool = False) -> BestPublic:
        """The best schedule of workload ``key`` on ``target`` (a target key, JSON or kind); with
        ``fallback``, the nearest hardware's when the target has none (``level`` says which)."""
        path = f"{API}/workloads/{quote(key, safe='')}/best"
        params = {"target": target, **({"fallback": "true"} if fallback else {})}
        return _parse(BestPublic, self._send("GET", path, params=params))

    def records(
        self, workload: str, target: str, *, limit: int = 100, offset: int = 0
    ) -> RecordsPublic:
        params = {"workload": workload, "target": target, "limit": limit, "offset": offset}
        return _parse(RecordsPublic, self._send("GET", f"{API}/records", params=params))

    # Whole models (client tokens).

    def submit_model(self, path: Path, fields: ModelJobCreate) -> ModelJobPublic:
        """Upload the ONNX file at ``path`` as a model job with ``fields``; the server imports
        it and extracts its tasks before it answers.

        Raises:
            UserError: the file cannot be read, or the server refuses it.
        """
        try:
            content = path.read_bytes()
        except OSError as error:
            raise UserError(f"cannot read model file {path}: {error.strerror or error}") from None
        response = self._send(
            "POST",
            f"{API}/models",
            files={"file": (path.name, content, "application/octet-stream")},
            form=fields.model_dump(mode="json", exclude_none=True),
            timeout=UPLOAD_TIMEOUT_SECS,
        )
        return _parse(ModelJobPublic, response)

    def models(self, *, limit: int = 100, offset: int = 0) -> ModelJobsPublic:
        params = {"limit": limit, "offset": offset}
        return _parse(ModelJobsPublic, self._send("GET", f"{API}/models", params=params))

    def model(self, model_id: int) -> ModelJobPublic:
        return _parse(ModelJobPublic, self._send("GET", f"{API}/models/{model_id}"))

    def cancel_model(self, model_id: int) -> ModelJobPublic:
        return _parse(ModelJobPublic, self._send("POST", f"{API}/models/{model_id}/cancel"))

    def model_library(self, model_id: int, target: str | None = None) -> bytes:
        """The model job's model compiled with the best schedules, as a Relax VM library."""
        params = {} if target is None else {"target": target}
        path = f"{API}/models/{model_id}/library"
        return self._send("GET", path, params=params, timeout=UPLOAD_TIMEOUT_SECS).content

    def model_manifest(self, model_id: int, target: str | None = None) -> dict[str, Any]:
        """The manifest of `model_library`'s library, which ``autosched.runtime`` loads it by.

        Raises:
            UserError: the server answered something other than a JSON object.
        """
        params = {} if target is None else {"target": target}
        path = f"{API}/models/{model_id}/manifest"
        response = self._send("GET", path, params=params, timeout=UPLOAD_TIMEOUT_SECS)
        try:
            document = response.json()
        except ValueError:
            document = None
        if not isinstance(document, dict):
            raise UserError(f"the server at {self._base} sent no manifest for model job {model_id}")
        return document

    # The worker protocol (worker tokens); the signatures are LeaseQueue's.

    def register_worker(self, *, name: str, target: dict, fingerprint: dict) -> int:
        body = WorkerRegister(name=name, target=target, fingerprint=fingerprint)
        return _parse(WorkerPublic, self._send("POST", f"{API}/workers", body=body)).id

    def heartbeat(self, worker_id: int) -> None:
        self._send("POST", f"{API}/workers/{worker_id}/heartbeat")

    def lease(self, worker_id: int, n: int) -> Lease | None:
        """A job's final, or up to ``n`` candidates, for the worker's target; ``None`` when
        nothing is queued."""
        body = LeaseRequest(n=n)
        response = self._send("POST", f"{API}/workers/{worker_id}/leases", body=body)
        if response.status_code == httpx.codes.NO_CONTENT:
            return None
        return _parse(LeasePublic, response).to_lease()

    def report(
        self, worker_id: int, lease_id: int, results: Sequence[ReportedResult]
    ) -> ReportOutcome:
        body = ReportRequest(results=[ResultIn.of(result) for result in results])
        path = f"{API}/workers/{worker_id}/leases/{lease_id}/report"
        return _parse(ReportOutcomePublic, self._send("POST", path, body=body)).to_outcome()

    def report_final(
        self, worker_id: int, lease_id: int, retimed: Sequence[RetimedEntrant]
    ) -> bool:
        body = FinalReportRequest(entrants=[RetimedIn.of(entrant) for entrant in retimed])
        path = f"{API}/workers/{worker_id}/leases/{lease_id}/final"
        return _parse(FinalReportPublic, self._send("POST", path, body=body)).taken

    def release(self, worker_id: int, lease_id: int) -> int:
        path = f"{API}/workers/{worker_id}/leases/{lease_id}/release"
        return _parse(ReleasePublic, self._send("POST", path)).released

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: BaseModel | None = None,
        params: dict[str, Any] | None = None,
        files: dict[str, tuple[str, bytes, str]] | None = None,
        form: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        content = None if body is None else body.model_dump_json()
        headers = {} if body is None else {"Content-Type": "application/json"}
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        try:
            response = self._http.request(
                method,
                path,
                content=content,
                headers=headers,
                params=params,
                files=files,
                data=form,
                **extra,
            )
        except httpx.TransportError as error:
            reason = " ".join(str(error).split()) or type(error).__name__
            raise ServiceUnavailable(f"cannot reach the server at {self._base}: {reason}") from None
        if response.is_server_error:
            raise ServiceUnavailable(
                f"the server at {self._base} failed: {_detail(response)} "
                f"(HTTP {response.status_code})",
                retry_after=_retry_after(response),
            )
        if response.is_error:
            error = _REFUSALS.get(response.status_code, UserError)
            raise error(f"{_detail(response)} (HTTP {response.status_code})")
        return response


def _retry_after(response: httpx.Response) -> float | None:
    """The seconds a 503's Retry-After asks to wait (the delay form only), within an hour."""
    try:
        secs = float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None
    return min(max(secs, 0.0), 3600.0)


def _detail(response: httpx.Response) -> str:
    """The server's one-line message: ``detail`` of a JSON error, else the start of the body."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    text = detail if isinstance(detail, str) else response.text[:200] or response.reason_phrase
    return " ".join(text.split())


def _parse(model: type[_Model], response: httpx.Response) -> _Model:
    try:
        return model.model_validate_json(response.content)
    except ValidationError:
        raise UserError(
            f"unexpected answer from {response.request.url}: not an autosched server "
            "of this version?"
        ) from None
