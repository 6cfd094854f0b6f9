"""Jobs and model jobs belong to the client that submitted them: another client's are answered as
missing (404) and left out of its listings, an admin token sees them all; per-client limits on
open jobs, model jobs and trials; and owners take turns in the queue and in the engine's round,
so one client's many jobs do not starve another's.

Written as the attacks: a client reads and cancels another's jobs, queues jobs without end, and
floods the queue. No tuning runs: candidates are queued as an engine would.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from helpers import on_sqlite, run_at_once, submit_job
from model_files import write_mlp_onnx

from autosched.errors import OverLimit, UserError
from autosched.log.jobs import JobStore
from autosched.log.tokens import Role, TokenStore
from autosched.server.api.app import create_app
from autosched.server.settings import Settings, load_settings
from autosched.workloads import get_workload

MATMUL = {"name": "matmul", "params": {"M": 16, "N": 16, "K": 16}}
TARGET = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}
FINGERPRINT = {"cpu_model": "test cpu", "physical_cores": 2}
MODEL_FORM = {"target": '{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}'}


@dataclass
class Service:
    """The API in-process (no engine) with two client tokens, ``alice`` and ``bob``, an admin
    and a worker token."""

    http: TestClient
    jobs: JobStore
    tokens: dict[str, str]

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return self.http.request(method, f"/api/v1{path}", headers=headers, **kwargs)

    def submit(self, who: str, **fields: Any) -> httpx.Response:
        body = {"workload": MATMUL, "target": TARGET, "trials": 8, "batch_size": 4, **fields}
        return self.call(who, "POST", "/jobs", json=body)

    def job(self, who: str, **fields: Any) -> int:
        response = self.submit(who, **fields)
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def upload(self, who: str, onnx: bytes) -> httpx.Response:
        form = {**MODEL_FORM, "trials": 4, "batch_size": 2, "inputs": ["x=16x64:float32"]}
        files = {"file": ("mlp.onnx", onnx)}
        return self.call(who, "POST", "/models", files=files, data=form)


@contextmanager
def _service(db_url: str, **settings: Any) -> Iterator[Service]:
    app = create_app(Settings(db_url=db_url, **settings))
    with TestClient(app) as http:
        store: TokenStore = app.state.stores.tokens
        roles = {"alice": Role.CLIENT, "bob": Role.CLIENT, "admin": Role.ADMIN}
        tokens = {who: store.create(role, who) for who, role in roles.items()}
        tokens["worker"] = store.create(Role.WORKER, "worker")
        yield Service(http, app.state.stores.jobs, tokens)


@pytest.fixture
def service(db_url: str) -> Iterator[Service]:
    with _service(db_url) as served:
        yield served


def _queue(jobs: JobStore, job_id: int, n: int) -> list[str]:
    """What an engine does: take the job up and queue ``n`` made-up candidates."""
    assert job_id in jobs.claim_jobs("test-engine", 60)
    candidates = [(f'["trace {job_id}.{i}"]', f"program {job_id}.{i}", None) for i in range(n)]
    return jobs.enqueue(job_id, candidates)


# Reading and cancelling another client's jobs.


def _assert_as_missing(
    service: Service, who: str, resource: str, reads: list[str], detail: str
) -> None:
    """``who`` reading ``resource`` (and ``reads``, paths under it) or cancelling it gets the
    answer an id that does not exist gets, 404 and ``detail``: nothing tells that it is there."""
    requests = [("GET", resource + path) for path in ("", *reads)]
    for method, path in [*requests, ("POST", f"{resource}/cancel")]:
        response = service.call(who, method, path)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["detail"] == detail, response.text


def test_another_clients_job_is_as_missing_to_read_cancel_and_list(service: Service) -> None:
    job = service.job("alice")
    _queue(service.jobs, job, 2)
    missing = service.call("bob", "GET", "/jobs/99999")
    assert missing.status_code == 404
    detail = f"no tuning job with id {job}"
    _assert_as_missing(service, "bob", f"/jobs/{job}", ["/measurements", "/best"], detail)
    assert service.call("bob", "GET", "/jobs").json() == {"data": [], "count": 0}
    assert service.call("bob", "GET", "/jobs", params={"status": "running"}).json()["count"] == 0

    mine = service.call("alice", "GET", f"/jobs/{job}").json()
    assert mine["status"] == "running"  # bob's cancel did nothing
    assert service.call("alice", "GET", "/jobs").json()["count"] == 1


def test_an_admin_sees_and_cancels_every_job_and_submits_none(service: Service) -> None:
    alices, bobs = service.job("alice"), service.job("bob")
    # a job stored before jobs had owners (or run by `autosched tune`) is no client's
    legacy = submit_job(
        service.jobs,
        get_workload("matmul", MATMUL["params"]),
        TARGET,
        4,
        batch_size=2,
        strategy="random",
        seed=None,
    )
    listed = service.call("admin", "GET", "/jobs").json()
    assert [job["id"] for job in listed["data"]] == [legacy, bobs, alices]
    assert service.call("admin", "GET", f"/jobs/{legacy}").status_code == 200
    for who in ("alice", "bob"):
        assert service.call(who, "GET", f"/jobs/{legacy}").status_code == 404
        assert legacy not in [job["id"] for job in service.call(who, "GET", "/jobs").json()["data"]]
    # and what the dashboard shows beside a job: the workers, the queue, the cost models
    for path in ("/workers", "/queue", "/cost-models"):
        assert service.call("admin", "GET", path).status_code == 200, path
    cancelled = service.call("admin", "POST", f"/jobs/{bobs}/cancel").json()
    assert cancelled["status"] == "cancelled"
    refused = service.submit("admin")
    assert refused.status_code == 403 and "needs a client token" in refused.json()["detail"]
    worker = service.call("worker", "GET", "/jobs")
    assert worker.status_code == 403


@on_sqlite
def test_another_clients_model_job_is_as_missing(db_url: str, tmp_path: Path) -> None:
    onnx = write_mlp_onnx(tmp_path / "mlp.onnx", batch="batch").read_bytes()
    with _service(db_url, max_client_model_jobs=1) as service:
        response = service.upload("alice", onnx)
        assert response.status_code == 201, response.text
        model = response.json()["id"]
        detail = f"no model job with id {model}"
        _assert_as_missing(service, "bob", f"/models/{model}", ["/library", "/manifest"], detail)
        assert service.call("bob", "GET", "/models").json() == {"data": [], "count": 0}
        assert service.call("alice", "GET", f"/models/{model}").json()["status"] == "queued"
        assert service.call("admin", "GET", "/models").json()["count"] == 1

        # alice's second model job is over her limit of one; bob has room of his own
        second = service.upload("alice", onnx)
        assert second.status_code == 429, second.text
        assert "model jobs" in second.json()["detail"] and "Retry-After" in second.headers
        assert service.upload("bob", onnx).status_code == 201
        assert service.call("alice", "POST", f"/models/{model}/cancel").status_code == 200
        assert service.upload("alice", onnx).status_code == 201


# Limits.


def test_a_clients_seventeenth_open_job_is_refused(service: Service) -> None:
    for _ in range(16):
        service.job("alice")
    refused = service.submit("alice")
    assert refused.status_code == 429, refused.text
    detail = refused.json()["detail"]
    assert "16 jobs queued or running" in detail and "\n" not in detail
    assert int(refused.headers["Retry-After"]) > 0
    assert service.call("alice", "GET", "/jobs").json()["count"] == 16  # nothing stored
    assert service.submit("bob").status_code == 201  # the limit is alice's, not the server's
    first = service.call("alice", "GET", "/jobs").json()["data"][-1]["id"]
    service.call("alice", "POST", f"/jobs/{first}/cancel")
    assert service.submit("alice").status_code == 201  # an ended job frees its place


def test_a_job_over_the_trials_bound_is_refused(service: Service) -> None:
    refused = service.submit("alice", trials=20_001)
    assert refused.status_code == 422
    assert refused.json()["detail"] == "trials: at most 20000 per job on this server"
    assert service.call("alice", "GET", "/jobs").json()["count"] == 0
    assert service.submit("alice", trials=20_000).status_code == 201


def test_submissions_at_once_do_not_pass_the_limit(service: Service) -> None:
    workload = get_workload("matmul", MATMUL["params"])

    def submit() -> bool:
        try:
            submit_job(
                service.jobs,
                workload,
                TARGET,
                4,
                batch_size=2,
                strategy="random",
                seed=None,
                owner="token:1",
                max_open=4,
            )
        except OverLimit:
            return False
        return True

    assert sorted(run_at_once(12, submit)) == [False] * 8 + [True] * 4
    assert service.jobs.jobs(limit=100, offset=0, owner="token:1")[1] == 4


def test_the_limit_is_a_setting() -> None:
    assert Settings().max_client_jobs == 16 and Settings().max_job_trials == 20_000
    with pytest.raises(UserError, match="AUTOSCHED_MAX_CLIENT_JOBS"):
        load_settings(max_client_jobs=0)


# Tokens and principals.


def test_tokens_from_the_environment_are_one_principal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUTOSCHED_DB", f"sqlite:///{tmp_path / 'env.db'}")
    monkeypatch.setenv("AUTOSCHED_CLIENT_TOKEN", "a" * 40)
    body = {"workload": MATMUL, "target": TARGET, "trials": 4}
    with TestClient(create_app(load_settings())) as http:
        headers = {"Authorization": f"Bearer {'a' * 40}"}
        job = http.post("/api/v1/jobs", json=body, headers=headers).json()["id"]
        other = http.app.state.stores.tokens.create(Role.CLIENT, "other")
        headers_other = {"Authorization": f"Bearer {other}"}
        assert http.get(f"/api/v1/jobs/{job}", headers=headers_other).status_code == 404
    monkeypatch.setenv("AUTOSCHED_CLIENT_TOKEN", "b" * 40)  # the deployment's secret changed
    with TestClient(create_app(load_settings())) as http:
        headers = {"Authorization": f"Bearer {'b' * 40}"}
        assert http.get(f"/api/v1/jobs/{job}", headers=headers).status_code == 200
        with pytest.raises(UserError, match="kept for the token set in AUTOSCHED_CLIENT_TOKEN"):
            http.app.state.stores.tokens.create(Role.CLIENT, "AUTOSCHED_CLIENT_TOKEN")


def test_a_server_without_auth_serves_one_local_client(tmp_path: Path) -> None:
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'open.db'}", no_auth=True)
    with TestClient(create_app(settings), base_url="http://127.0.0.1:8000") as http:
        body = {"workload": MATMUL, "target": TARGET, "trials": 4}
        job = http.post("/api/v1/jobs", json=body).json()["id"]
        assert http.get("/api/v1/jobs").json()["count"] == 1
        assert http.get(f"/api/v1/jobs/{job}").status_code == 200
        assert http.app.state.stores.jobs.owner(job) == "local"


# Taking turns.


def test_one_clients_many_jobs_do_not_starve_anothers_candidates(service: Service) -> None:
    worker = service.call("worker", "POST", "/workers", json={
        "name": "w", "target": TARGET, "fingerprint": FINGERPRINT,
    }).json()["id"]  # fmt: skip
    for _ in range(16):  # alice floods the queue: 16 jobs of 63 candidates, 1008 in all
        _queue(service.jobs, service.job("alice", trials=100, batch_size=63), 63)
    bobs = set(_queue(service.jobs, service.job("bob"), 8))
    leased: list[int] = []
    for _ in range(2):
        lease = service.call("worker", "POST", f"/workers/{worker}/leases", json={"n": 8}).json()
        leased += [candidate["job_id"] for candidate in lease["candidates"]]
    bob_job = service.call("bob", "GET", "/jobs").json()["data"][0]["id"]
    assert leased.count(bob_job) == len(bobs) == 8, leased  # bob's turn comes every other one


def test_engines_drive_owners_jobs_in_turns(service: Service) -> None:
    alices = [service.job("alice") for _ in range(4)]
    bobs = service.job("bob")
    held = service.jobs.claim_jobs("engine-1", ttl_secs=60)
    assert held == [alices[0], bobs, *alices[1:]]
