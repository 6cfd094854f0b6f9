"""The REST API: the auth matrix of every route, jobs, the worker protocol, bad input as 4xx (never
500, nothing written), body limits, health, metrics and docs; and the typed client against it.

No tuning runs: candidates are put in the queue directly, and results are reported by hand.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from autosched.admission import program_json
from autosched.client.http import ServiceClient
from autosched.errors import ServiceUnavailable, UserError
from autosched.finals.retiming import Finals
from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.tables import FinalState
from autosched.log.tokens import Role, TokenStore
from autosched.records import BASELINE_TRACE, MeasureResult, ReportedResult, RetimedEntrant
from autosched.server.api.app import create_app
from autosched.server.settings import Settings, load_settings
from autosched.target import canonical_target, target_key
from autosched.workloads import get_workload

SHAPE = {"M": 16, "N": 16, "K": 16}
MATMUL = {"name": "matmul", "params": SHAPE}
WORKER_TARGET = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}
OTHER_TARGET = {"kind": "llvm", "mcpu": "znver3", "num-cores": 8}
FINGERPRINT = {"cpu_model": "test cpu", "physical_cores": 2}
MAX_BODY = 64 * 1024
PROBLEM = ("401", "403", "404", "409", "413", "422", "503")
NOW = datetime.now(timezone.utc).isoformat()


@dataclass
class Api:
    http: TestClient
    log: TuningLog
    jobs: JobStore
    tokens: dict[Role, str]

    def headers(self, role: Role) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def as_client(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {**kwargs.pop("headers", {}), **self.headers(Role.CLIENT)}
        return self.http.request(method, path, headers=headers, **kwargs)

    def as_worker(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.request(method, path, headers=self.headers(Role.WORKER), **kwargs)

    def register(self, target: dict = WORKER_TARGET) -> int:
        body = {"name": "w", "target": target, "fingerprint": FINGERPRINT}
        response = self.as_worker("POST", "/api/v1/workers", json=body)
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def submit(self, **fields: Any) -> dict:
        body = {"workload": MATMUL, "target": WORKER_TARGET, "trials": 8, "batch_size": 4, **fields}
        response = self.as_client("POST", "/api/v1/jobs", json=body)
        assert response.status_code == 201, response.text
        return response.json()


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    app = create_app(Settings(db_url=db_url, max_body_bytes=MAX_BODY))
    with TestClient(app) as http:
        store: TokenStore = app.state.stores.tokens
        tokens = {role: store.create(role, f"test {role.value}") for role in Role}
        yield Api(http, app.state.stores.log, app.state.stores.jobs, tokens)


def _queue_candidates(api: Api, job_id: int, n: int, *, replayable: bool = False) -> None:
    """What an engine does: take the job up and queue candidates.

    Their traces are made up, or with ``replayable`` the untuned program's (which counts as the
    baseline, not as a trial).
    """
    assert job_id in api.jobs.claim_jobs("test-engine", 60)
    traces = [BASELINE_TRACE if replayable else f'["trace {i}"]' for i in range(n)]
    api.jobs.enqueue(job_id, [(trace, f"program {i}", None) for i, trace in enumerate(traces)])


def _one_line(response: httpx.Response) -> str:
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail and "\n" not in detail, detail
    return detail


# Auth.

ROUTES: list[tuple[str, str, Role, dict | None]] = [
    ("POST", "/api/v1/jobs", Role.CLIENT, {"workload": MATMUL, "target": WORKER_TARGET}),
    ("GET", "/api/v1/jobs", Role.CLIENT, None),
    ("GET", "/api/v1/jobs/{job_id}", Role.CLIENT, None),
    ("POST", "/api/v1/jobs/{job_id}/cancel", Role.CLIENT, None),
    ("GET", "/api/v1/jobs/{job_id}/best", Role.CLIENT, None),
    ("GET", "/api/v1/workloads", Role.CLIENT, None),
    ("GET", "/api/v1/workloads/{key}/best", Role.CLIENT, None),
    ("GET", "/api/v1/records", Role.CLIENT, None),
    ("GET", "/api/v1/jobs/{job_id}/measurements", Role.CLIENT, None),
    ("GET", "/api/v1/workers", Role.CLIENT, None),
    ("GET", "/api/v1/queue", Role.CLIENT, None),
    ("GET", "/api/v1/cost-models", Role.CLIENT, None),
    ("POST", "/api/v1/models", Role.CLIENT, None),
    ("GET", "/api/v1/models", Role.CLIENT, None),
    ("GET", "/api/v1/models/{model_id}", Role.CLIENT, None),
    ("POST", "/api/v1/models/{model_id}/cancel", Role.CLIENT, None),
    ("GET", "/api/v1/models/{model_id}/library", Role.CLIENT, None),
    ("GET", "/api/v1/models/{model_id}/manifest", Role.CLIENT, None),
    (
        "POST",
        "/api/v1/workers",
        Role.WORKER,
        {"name": "w", "target": WORKER_TARGET, "fingerprint": FINGERPRINT},
    ),
    ("POST", "/api/v1/workers/{worker_id}/heartbeat", Role.WORKER, None),
    ("POST", "/api/v1/workers/{worker_id}/leases", Role.WORKER, {"n": 1}),
    ("POST", "/api/v1/workers/{worker_id}/leases/{lease_id}/report", Role.WORKER, {"results": []}),
    ("POST", "/api/v1/workers/{worker_id}/leases/{lease_id}/release", Role.WORKER, None),
    ("POST", "/api/v1/workers/{worker_id}/leases/{lease_id}/final", Role.WORKER, {"entrants": []}),
    ("GET", "/api/v1/log/export", Role.ADMIN, None),
    ("POST", "/api/v1/log/import", Role.ADMIN, None),
]


def _concrete(template: str) -> str:
    """A path of the route, with made-up ids (and a query where the route needs one)."""
    path = re.sub(r"\{\w+\}", "1", template)
    if template.endswith("/best") and "{key}" in template:
        return path + "?target=llvm"
    if template.endswith("/records"):
        return path + "?workload=abc&target=llvm"
    return path


def test_every_api_route_is_in_the_auth_matrix(api: Api) -> None:
    paths = api.http.get("/openapi.json").json()["paths"]
    served = {
        (method.upper(), path)
        for path, operations in paths.items()
        if path.startswith("/api/")
        for method in operations
    }
    assert served == {(method, template) for method, template, _, _ in ROUTES}


def test_auth_matrix(api: Api) -> None:
    """No token or a bad one: 401 asking for Bearer; the other role's token: 403; the right: in."""
    for method, template, role, body in ROUTES:
        path = _concrete(template)
        other = Role.WORKER if role is Role.CLIENT else Role.CLIENT
        cases = [
            ({}, 401),
            ({"Authorization": "Bearer not-a-token-of-this-server-0123456789"}, 401),
            ({"Authorization": f"Basic {api.tokens[role]}"}, 401),
            (api.headers(other), 403),
        ]
        for headers, expected in cases:
            response = api.http.request(method, path, headers=headers, json=body)
            assert response.status_code == expected, (method, path, headers, response.text)
            if expected == 401:
                assert response.headers["WWW-Authenticate"] == "Bearer"
            _one_line(response)
        response = api.http.request(method, path, headers=api.headers(role), json=body)
        assert response.status_code not in (401, 403), (method, path, response.text)
        assert response.status_code < 500, (method, path, response.text)


def test_health_metrics_and_docs_need_no_token(api: Api) -> None:
    assert api.http.get("/healthz").json() == {"status": "ok"}
    assert api.http.get("/metrics").status_code == 200
    docs = api.http.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    spec = api.http.get("/openapi.json").json()
    assert {"/api/v1/jobs", "/api/v1/workers/{worker_id}/leases", "/healthz"} <= set(spec["paths"])
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    problem = {"$ref": "#/components/schemas/Problem"}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            codes = {"503"} if path.startswith("/healthz") or path == "/metrics" else set(PROBLEM)
            assert codes <= set(operation["responses"]), (method, path)
            for code in codes:  # the body every refusal has: {"detail": "one line"}
                (content,) = operation["responses"][code]["content"].values()
                assert content["schema"] == problem, (method, path, code)


def test_a_server_without_auth_takes_requests_without_a_token(tmp_path) -> None:
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'open.db'}", no_auth=True)
    with TestClient(create_app(settings), base_url="http://127.0.0.1:8000") as http:
        assert http.get("/api/v1/jobs").json() == {"data": [], "count": 0}
        for host in ("localhost:8000", "[::1]:8000", "127.0.0.1"):
            assert http.get("/api/v1/jobs", headers={"Host": host}).status_code == 200
        # A page on another origin whose DNS name now points here (DNS rebinding) names itself.
        rebound = http.get("/api/v1/jobs", headers={"Host": "attacker.example:8000"})
        assert rebound.status_code == 400 and "loopback" in rebound.json()["detail"]


def test_no_auth_is_refused_off_loopback() -> None:
    with pytest.raises(UserError, match="loopback"):
        Settings(host="0.0.0.0", no_auth=True)
    assert Settings(host="::1", no_auth=True).no_auth


def test_tokens_from_the_environment_are_accepted(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "w" * 40
    monkeypatch.setenv("AUTOSCHED_DB", f"sqlite:///{tmp_path / 'env.db'}")
    monkeypatch.setenv("AUTOSCHED_WORKER_TOKEN", token)
    with TestClient(create_app(load_settings())) as http:
        headers = {"Authorization": f"Bearer {token}"}
        assert http.post("/api/v1/workers/1/heartbeat", headers=headers).status_code == 404
        assert http.get("/api/v1/jobs", headers=headers).status_code == 403
    monkeypatch.setenv("AUTOSCHED_CLIENT_TOKEN", "short")
    with pytest.raises(UserError, match="at least 32 characters"):
        load_settings()


def test_settings_that_do_not_parse_name_their_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOSCHED_LEASE_SECS", "soon")
    with pytest.raises(UserError, match="AUTOSCHED_LEASE_SECS"):
        load_settings()
    monkeypatch.setenv("AUTOSCHED_LEASE_SECS", "0")
    with pytest.raises(UserError, match="AUTOSCHED_LEASE_SECS: Input should be greater than 0"):
        load_settings()


# Jobs.


def test_a_submitted_job_is_queued_and_can_be_followed_and_cancelled(api: Api) -> None:
    job = api.submit(seed=7)
    assert job["status"] == "queued" and job["trials"] == 8 and job["seed"] == 7
    assert job["workload"]["key"] == get_workload("matmul", SHAPE).key
    assert job["target"]["target_json"] == canonical_target(WORKER_TARGET)
    assert job["trials_done"] == 0 and job["best_latency_secs"] is None and job["curve"] == []

    listed = api.as_client("GET", "/api/v1/jobs").json()
    assert listed["count"] == 1 and listed["data"][0]["id"] == job["id"]
    assert api.as_client("GET", f"/api/v1/jobs/{job['id']}").json() == job

    missing = api.as_client("GET", f"/api/v1/jobs/{job['id']}/best")
    assert missing.status_code == 404 and "no verified schedule" in _one_line(missing)
    cancelled = api.as_client("POST", f"/api/v1/jobs/{job['id']}/cancel").json()
    assert cancelled["status"] == "cancelled" and cancelled["finished_at"] is not None


def test_a_job_for_a_kind_is_tuned_for_the_target_its_workers_run(api: Api) -> None:
    no_worker = api.as_client("POST", "/api/v1/jobs", json={"workload": MATMUL, "target": "llvm"})
    assert no_worker.status_code == 409 and "no live llvm worker" in _one_line(no_worker)

    api.register(WORKER_TARGET)
    job = api.submit(target="llvm")
    assert job["target"]["key"] == target_key(WORKER_TARGET)

    api.register(OTHER_TARGET)
    ambiguous = api.as_client("POST", "/api/v1/jobs", json={"workload": MATMUL, "target": "llvm"})
    assert ambiguous.status_code == 409
    assert "skylake-avx512" in _one_line(ambiguous) and "znver3" in ambiguous.json()["detail"]


def test_a_job_of_a_users_program_as_ir_json(api: Api) -> None:
    program = program_json(get_workload("matmul", SHAPE).func)
    job = api.submit(workload={"name": "mine", "ir_json": program})
    assert job["workload"]["name"] == "mine"
    assert job["workload"]["key"] == get_workload("matmul", SHAPE).key


BAD_JOBS: list[tuple[dict, str]] = [
    ({"workload": {"name": "nope"}}, "unknown workload 'nope'"),
    ({"workload": {"name": "matmul", "params": {"Q": 1}}}, "unknown parameter Q"),
    ({"workload": {"name": "matmul", "params": {"M": 10**9}}}, "must be at most"),
    ({"workload": {"name": "matmul", "params": {"M": "x"}}}, "must be an integer"),
    ({"workload": {"name": "matmul", "params": {"M": 1.5}}}, "workload.params.M"),
    ({"workload": {"tvmscript": "@T.prim_func\ndef f():\n  pass\n"}}, "not accepted"),
    ({"workload": {"ir_json": "def f(:\n"}}, "must be TVM IR JSON"),
    ({"workload": {"ir_json": "[1, 2]"}}, "list of nodes"),
    ({"workload": {"ir_json": '{"nodes": [], "root_index": 0}'}}, "does not hold"),
    ({"workload": {"ir_json": "{}", "params": {"M": 1}}}, "takes none"),
    ({"workload": {"name": "matmul", "params": {"M": 32768, "N": 32768, "K": 32768}}}, "limit"),
    ({"workload": {}}, "give the name of a built-in workload"),
    ({"workload": MATMUL, "trials": 0}, "trials"),
    ({"workload": MATMUL, "trials": 10**9}, "trials"),
    ({"workload": MATMUL, "trials": "8"}, "trials: Input should be a valid integer"),
    ({"workload": MATMUL, "trials": True}, "trials: Input should be a valid integer"),
    ({"workload": MATMUL, "seed": 1.0}, "seed"),
    ({"workload": MATMUL, "batch_size": 10**6}, "batch_size"),
    ({"workload": MATMUL, "seed": 2**40}, "seed"),
    ({"workload": MATMUL, "seed": -1}, "seed"),
    ({"workload": MATMUL, "strategy": "annealing"}, "strategy"),
    ({"workload": MATMUL, "priority": 1}, "priority"),
    ({"workload": MATMUL, "target": "tpu9000"}, "tpu9000"),
    ({"workload": MATMUL, "target": {"kind": "nope"}}, "invalid target"),
    ({"workload": MATMUL, "target": {"kind": "llvm", "mcpu": "no-such-cpu"}}, "no-such-cpu"),
    ({"workload": MATMUL, "target": "{not json"}, "not valid JSON"),
    ({"target": "llvm"}, "workload"),
]


def test_bad_jobs_are_refused_with_one_line_and_nothing_is_stored(api: Api) -> None:
    api.register(WORKER_TARGET)
    for body, message in BAD_JOBS:
        response = api.as_client("POST", "/api/v1/jobs", json=body)
        assert 400 <= response.status_code < 500, (body, response.text)
        assert message in _one_line(response), (body, response.text)
    for content in (b"{not json", b"", b"[]", b'"matmul"', b"\xff\xfe not even text"):
        response = api.as_client(
            "POST", "/api/v1/jobs", content=content, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 422, (content, response.text)
        _one_line(response)
    assert api.as_client("GET", "/api/v1/jobs").json()["count"] == 0
    assert api.as_client("GET", "/api/v1/workloads").json()["count"] == 0


def test_bad_ids_and_queries_are_4xx(api: Api) -> None:
    for method, path, status in [
        ("GET", "/api/v1/jobs/999", 404),
        ("POST", "/api/v1/jobs/999/cancel", 404),
        ("GET", "/api/v1/jobs/0", 422),
        ("GET", f"/api/v1/jobs/{2**40}", 422),
        ("GET", "/api/v1/jobs/abc", 422),
        ("GET", "/api/v1/jobs?limit=0", 422),
        ("GET", f"/api/v1/jobs?offset={2**70}", 422),
        ("GET", "/api/v1/workloads/abc/best?target=llvm", 404),
        ("GET", "/api/v1/workloads/abc/best", 422),
        ("GET", "/api/v1/records?workload=abc&target=llvm", 404),
        ("GET", "/api/v1/records?target=llvm", 422),
    ]:
        response = api.as_client(method, path)
        assert response.status_code == status, (path, response.text)
        _one_line(response)


def test_oversized_bodies_are_refused_with_413(api: Api) -> None:
    program = "x" * MAX_BODY
    response = api.as_client(
        "POST", "/api/v1/jobs", json={"workload": {"ir_json": program}, "target": "llvm"}
    )
    assert response.status_code == 413

    def chunks() -> Iterator[bytes]:
        yield b'{"workload": {"ir_json": "'
        for _ in range(MAX_BODY // 1024 + 1):
            yield b"x" * 1024
        yield b'"}}'

    streamed = api.as_client(
        "POST", "/api/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert streamed.status_code == 413
    assert api.as_client("GET", "/api/v1/jobs").json()["count"] == 0


# The worker protocol, workloads, records and best schedules.


def test_only_the_token_that_registered_a_worker_may_act_for_it(api: Api) -> None:
    worker = api.register()
    other = api.http.app.state.stores.tokens.create(Role.WORKER, "another worker")
    as_other = {"Authorization": f"Bearer {other}"}
    for path, body in [
        (f"/api/v1/workers/{worker}/heartbeat", None),
        (f"/api/v1/workers/{worker}/leases", {"n": 1}),
        (f"/api/v1/workers/{worker}/leases/1/report", {"results": []}),
        (f"/api/v1/workers/{worker}/leases/1/release", None),
    ]:
        refused = api.http.post(path, json=body, headers=as_other)
        assert refused.status_code == 403, (path, refused.text)
        assert "registered with another token" in _one_line(refused)
    assert api.as_worker("POST", f"/api/v1/workers/{worker}/heartbeat").status_code == 204
    assert api.http.post("/api/v1/workers/999/heartbeat", headers=as_other).status_code == 404


def test_workers_lease_report_and_release(api: Api) -> None:
    worker = api.register()
    job = api.submit(target="llvm")
    _queue_candidates(api, job["id"], 3)

    response = api.as_worker("POST", f"/api/v1/workers/{worker}/leases", json={"n": 2})
    assert response.status_code == 200, response.text
    lease = response.json()
    assert lease["worker_id"] == worker and len(lease["candidates"]) == 2
    first, second = lease["candidates"]
    assert first["workload"]["key"] == job["workload"]["key"]
    assert first["target"] == canonical_target(WORKER_TARGET)
    assert api.as_worker("POST", f"/api/v1/workers/{worker}/heartbeat").status_code == 204

    results = [
        {
            "candidate_id": first["candidate_id"],
            "samples": [2e-3, 1e-3, 1e-3],
            "verified": True,
            "started_at": NOW,
            "finished_at": NOW,
        },
        {"candidate_id": second["candidate_id"], "error_kind": "build", "error_msg": "no"},
    ]
    report = f"/api/v1/workers/{worker}/leases/{lease['id']}/report"
    outcome = api.as_worker("POST", report, json={"results": results}).json()
    assert outcome == {"stored": 2, "ignored": 0, "requeued": 0, "poisoned": 0}
    again = api.as_worker("POST", report, json={"results": results}).json()
    assert again == {"stored": 0, "ignored": 2, "requeued": 0, "poisoned": 0}

    third = api.as_worker("POST", f"/api/v1/workers/{worker}/leases", json={"n": 5}).json()
    assert len(third["candidates"]) == 1
    release = f"/api/v1/workers/{worker}/leases/{third['id']}/release"
    assert api.as_worker("POST", release).json() == {"released": 1}

    progress = api.as_client("GET", f"/api/v1/jobs/{job['id']}").json()
    assert progress["trials_done"] == 2 and progress["failed"] == 1
    assert progress["best_latency_secs"] == pytest.approx(1e-3)
    assert not progress["best_confirmed"]  # one worker's single shot
    assert progress["curve"] == [{"trials": 1, "best_latency_secs": pytest.approx(1e-3)}]


def test_bad_worker_requests_are_4xx(api: Api) -> None:
    worker = api.register()
    job = api.submit(target="llvm")
    _queue_candidates(api, job["id"], 1)
    lease = api.as_worker("POST", f"/api/v1/workers/{worker}/leases", json={"n": 1}).json()
    report = f"/api/v1/workers/{worker}/leases/{lease['id']}/report"
    candidate = lease["candidates"][0]["candidate_id"]
    for method, path, body, status, message in [
        ("POST", "/api/v1/workers/999/heartbeat", None, 404, "no worker with id 999"),
        ("POST", "/api/v1/workers/999/leases", {"n": 1}, 404, "no worker"),
        ("POST", f"/api/v1/workers/{worker}/leases", {"n": 0}, 422, "n:"),
        ("POST", f"/api/v1/workers/{worker}/leases", {"n": 10**6}, 422, "n:"),
        ("POST", f"/api/v1/workers/{worker}/leases/999/report", {"results": []}, 404, "no lease"),
        ("POST", f"/api/v1/workers/{worker}/leases/999/release", None, 404, "no lease"),
        ("POST", report, {"results": [{"candidate_id": candidate}]}, 422, "samples or an"),
        ("POST", report, {"results": [{"candidate_id": candidate, "samples": [-1]}]}, 422, "0"),
        (
            "POST",
            report,
            {
                "results": [
                    {
                        "candidate_id": candidate,
                        "samples": [1e-3],
                        "started_at": "2026-01-01T00:00:00",
                    }
                ]
            },
            422,
            "timezone",
        ),
        (
            "POST",
            report,
            {"results": [{"candidate_id": 2**40, "samples": [1]}]},
            422,
            "candidate_id",
        ),
        (
            "POST",
            report,
            {"results": [{"candidate_id": candidate, "error_kind": "oops"}]},
            422,
            "error_kind",
        ),
        (
            "POST",
            "/api/v1/workers",
            {"name": "w", "target": {"kind": "nope"}, "fingerprint": {}},
            422,
            "invalid target",
        ),
        (
            "POST",
            "/api/v1/workers",
            {"name": "", "target": WORKER_TARGET, "fingerprint": {}},
            422,
            "name",
        ),
    ]:
        response = api.as_worker(method, path, json=body)
        assert response.status_code == status, (path, body, response.text)
        assert message in _one_line(response), (path, body, response.text)


def test_workloads_records_and_best_schedules(api: Api) -> None:
    worker = api.register()
    job = api.submit(target="llvm")
    key = job["workload"]["key"]
    _queue_candidates(api, job["id"], 2, replayable=True)
    lease = api.as_worker("POST", f"/api/v1/workers/{worker}/leases", json={"n": 2}).json()
    results = [
        {"candidate_id": c["candidate_id"], "samples": [secs], "verified": True}
        for c, secs in zip(lease["candidates"], [3e-3, 2e-3], strict=True)
    ]
    report = f"/api/v1/workers/{worker}/leases/{lease['id']}/report"
    assert api.as_worker("POST", report, json={"results": results}).json()["stored"] == 2

    (workload,) = api.as_client("GET", "/api/v1/workloads").json()["data"]
    assert workload["key"] == key and workload["name"] == "matmul"
    assert workload["targets"][0]["best_latency_secs"] == pytest.approx(2e-3)
    assert workload["targets"][0]["trials"] == 2

    page = api.as_client("GET", f"/api/v1/records?workload={key}&target=llvm&limit=1&offset=1")
    assert page.json()["count"] == 2
    assert [r["median_secs"] for r in page.json()["data"]] == [pytest.approx(2e-3)]

    by_job = api.as_client("GET", f"/api/v1/jobs/{job['id']}/best").json()
    for target in ("llvm", target_key(WORKER_TARGET), json.dumps(WORKER_TARGET)):
        best = api.as_client("GET", f"/api/v1/workloads/{key}/best", params={"target": target})
        assert best.status_code == 200, (target, best.text)
        assert best.json() == by_job
    assert by_job["record"]["median_secs"] == pytest.approx(2e-3)
    assert "T.prim_func" in by_job["tvmscript"] and by_job["record"]["trace_json"] == BASELINE_TRACE
    untuned = api.as_client("GET", f"/api/v1/workloads/{key}/best", params={"target": "cuda"})
    assert untuned.status_code == 404 and "not tuned for any cuda" in _one_line(untuned)

    client = ServiceClient("http://testserver", api.tokens[Role.CLIENT], http=api.http)
    assert client.job_best(job["id"]).model_dump(mode="json") == by_job
    assert client.workload_best(key, "llvm").record.to_view().median_secs == pytest.approx(2e-3)
    assert client.workloads().data[0].key == key
    assert client.records(key, "llvm", limit=1).data[0].median_secs == pytest.approx(3e-3)
    assert "autosched_queue_depth 0" in client.metrics()


def test_metrics_count_the_queue_workers_and_jobs(api: Api) -> None:
    api.register()
    job = api.submit(target="llvm")
    _queue_candidates(api, job["id"], 3)
    api.submit(target="llvm")
    response = api.http.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = dict(
        line.rsplit(" ", 1) for line in response.text.splitlines() if not line.startswith("#")
    )
    assert float(samples["autosched_queue_depth"]) == 3
    assert float(samples["autosched_workers_alive"]) == 1
    assert float(samples["autosched_leases_active"]) == 0
    assert float(samples['autosched_jobs{status="running"}']) == 1
    assert float(samples['autosched_jobs{status="queued"}']) == 1
    for line in response.text.splitlines():
        assert re.fullmatch(
            r"# (HELP|TYPE) autosched_\w+ .+|autosched_\w+(\{.+\})? [\d.e+-]+", line
        )


# The client.


def test_the_client_drives_the_worker_protocol_with_queue_records(api: Api) -> None:
    client = ServiceClient("http://testserver", api.tokens[Role.WORKER], http=api.http)
    worker = client.register_worker(name="w", target=WORKER_TARGET, fingerprint=FINGERPRINT)
    assert client.lease(worker, 1) is None
    job = api.submit(target="llvm")
    _queue_candidates(api, job["id"], 2)
    lease = client.lease(worker, 2)
    assert lease is not None and [c.job_id for c in lease.candidates] == [job["id"]] * 2
    assert lease.candidates[0].workload.key == job["workload"]["key"]
    client.heartbeat(worker)
    now = datetime.now(timezone.utc)
    result = MeasureResult(samples=(1e-3,), started_at=now, finished_at=now)
    outcome = client.report(
        worker, lease.id, [ReportedResult(lease.candidates[0].candidate_id, result, True)]
    )
    assert (outcome.stored, outcome.ignored) == (1, 0)
    with pytest.raises(UserError, match="no lease 999"):
        client.release(worker, 999)


def test_a_job_submitted_without_a_final_gets_the_default_one(api: Api) -> None:
    job = api.submit()
    assert job["final"] == {"state": "pending", "finalists": 8, "rounds": 10, "reason": None}


def test_a_worker_leases_a_jobs_final_and_reports_its_timings(api: Api) -> None:
    client = ServiceClient("http://testserver", api.tokens[Role.WORKER], http=api.http)
    worker = client.register_worker(name="w", target=WORKER_TARGET, fingerprint=FINGERPRINT)
    job = api.submit(target="llvm", trials=2, finalists=1, rounds=3)
    assert job["final"] == {"state": "pending", "finalists": 1, "rounds": 3, "reason": None}
    assert job["id"] in api.jobs.claim_jobs("test-engine", 60)
    programs = [('["a"]', "program a", None), ('["b"]', "program b", None)]
    api.jobs.enqueue(job["id"], [*programs, (BASELINE_TRACE, "untuned", None)])
    lease = client.lease(worker, 3)
    assert lease is not None and lease.final is None
    now = datetime.now(timezone.utc)
    singles = {'["a"]': 1e-3, '["b"]': 2e-3, BASELINE_TRACE: 5e-3}
    client.report(
        worker,
        lease.id,
        [
            ReportedResult(
                c.candidate_id,
                MeasureResult(samples=(singles[c.trace_json],), started_at=now, finished_at=now),
                c.trace_json != '["a"]',  # the fastest single shot was never checked
            )
            for c in lease.candidates
        ],
    )
    assert api.jobs.job(job["id"]).best_latency_secs == pytest.approx(2e-3)
    assert Finals(api.log).plan(job["id"]) is FinalState.QUEUED

    leased = api.as_worker("POST", f"/api/v1/workers/{worker}/leases", json={"n": 4}).json()
    final = leased["final"]
    assert leased["candidates"] == [] and final["job_id"] == job["id"] and final["rounds"] == 3
    assert [(e["trace_json"], e["verified"]) for e in final["entrants"]] == [
        ('["a"]', False),
        (BASELINE_TRACE, True),
    ]
    path = f"/api/v1/workers/{worker}/leases/{leased['id']}/final"
    a, untuned = (e["candidate_id"] for e in final["entrants"])
    for body, message in [
        ({"entrants": [{"candidate_id": a, "samples": [0]}]}, "greater than 0"),
        ({"entrants": [{"candidate_id": a, "samples": [1e-3] * 4}]}, "3 rounds"),
        ({"entrants": [{"candidate_id": 10**6, "samples": [1e-3]}]}, "not an entrant"),
        ({"entrants": [{"candidate_id": a, "verified": "yes"}]}, "verified"),
    ]:
        response = api.as_worker("POST", path, json=body)
        assert response.status_code == 422, (body, response.text)
        assert message in _one_line(response), (body, response.text)
    retimed = [
        RetimedEntrant(a, (1.5e-3, 1.4e-3, 1.6e-3), True),
        RetimedEntrant(untuned, (5e-3, 5.1e-3, 4.9e-3), False),
    ]
    assert client.report_final(worker, leased["id"], retimed)
    assert not client.report_final(worker, leased["id"], retimed)  # taken once
    progress = api.as_client("GET", f"/api/v1/jobs/{job['id']}").json()
    assert progress["final"]["state"] == "timed"
    ranked = [(f["untuned"], f["samples"], f["tie"]) for f in progress["finalists"]]
    assert ranked == [
        (False, [1.5e-3, 1.4e-3, 1.6e-3], True),
        (True, [5e-3, 5.1e-3, 4.9e-3], False),
    ]
    # the winner, checked by the final, is the best record now (no longer the checked "b"); the
    # job reports its re-timed median beside the untuned program's, confirmed
    subject = api.jobs.job(job["id"])
    best = api.log.best(subject.workload.id, subject.target.id)
    assert best is not None and best.program_hash == "program a" and best.verified
    assert progress["best_confirmed"] and progress["best_latency_secs"] == pytest.approx(1.5e-3)
    assert progress["baseline_latency_secs"] == pytest.approx(5e-3)


def test_the_client_raises_the_servers_message_or_service_unavailable(api: Api) -> None:
    client = ServiceClient("http://testserver", api.tokens[Role.WORKER], http=api.http)
    with pytest.raises(UserError, match=r"needs a client or admin token \(HTTP 403\)"):
        client.jobs()
    failing = httpx.Client(
        transport=httpx.MockTransport(lambda _: httpx.Response(503, text="down")),
        base_url="http://x",
    )
    with pytest.raises(ServiceUnavailable, match="down"):
        ServiceClient("http://x", http=failing).health()
    with pytest.raises(ServiceUnavailable, match="cannot reach"):
        ServiceClient("http://127.0.0.1:9", timeout=2).health()
    with pytest.raises(UserError, match="http"):
        ServiceClient("ftp://x")
