"""What the dashboard reads, over the REST API: workers, the queue per target, cost model versions,
a job's measurements, jobs filtered by status and target; and the dashboard's own files, served
under a Content-Security-Policy that forbids inline script.

No tuning runs: candidates are queued as an engine would, and results are reported by hand.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from helpers import add_cost_model, on_sqlite
from sqlalchemy import update

from autosched.log.jobs import JobStore
from autosched.log.tables import Worker
from autosched.log.tokens import Role
from autosched.records import BASELINE_TRACE
from autosched.server.api.app import create_app
from autosched.server.dashboard import STATIC
from autosched.server.settings import Settings
from autosched.target import target_key

MATMUL = {"name": "matmul", "params": {"M": 16, "N": 16, "K": 16}}
SKYLAKE = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}
ZEN = {"kind": "llvm", "mcpu": "znver3", "num-cores": 8}
FINGERPRINT = {"kind": "llvm", "cpu_model": "test cpu", "hostname": "bench-1"}


@dataclass
class Service:
    http: TestClient
    app: Any
    tokens: dict[Role, str]

    def get(self, path: str, **params: Any) -> Any:
        response = self.http.get(f"/api/v1{path}", params=params, headers=self._as(Role.CLIENT))
        assert response.status_code == 200, response.text
        return response.json()

    def post(self, path: str, role: Role, body: dict | None = None) -> httpx.Response:
        return self.http.post(f"/api/v1{path}", json=body, headers=self._as(role))

    def _as(self, role: Role) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    @property
    def jobs(self) -> JobStore:
        return self.app.state.stores.jobs

    def register(self, name: str, target: dict = SKYLAKE) -> int:
        body = {"name": name, "target": target, "fingerprint": FINGERPRINT}
        response = self.post("/workers", Role.WORKER, body)
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def submit(self, target: dict = SKYLAKE, trials: int = 8) -> dict:
        body = {"workload": MATMUL, "target": target, "trials": trials, "batch_size": 4}
        response = self.post("/jobs", Role.CLIENT, body)
        assert response.status_code == 201, response.text
        return response.json()

    def queue_candidates(self, job_id: int, n: int, *, baseline: bool = False) -> None:
        """What an engine does: take the job up and queue ``n`` made-up candidates (the first
        one the untuned program with ``baseline``)."""
        assert job_id in self.jobs.claim_jobs("test-engine", 60)
        traces = [f'["trace {job_id}.{i}"]' for i in range(n)]
        if baseline:
            traces[0] = BASELINE_TRACE
        self.jobs.enqueue(
            job_id, [(t, f"program {job_id}.{i}", None) for i, t in enumerate(traces)]
        )

    def lease(self, worker: int, n: int) -> dict:
        response = self.post(f"/workers/{worker}/leases", Role.WORKER, {"n": n})
        assert response.status_code == 200, response.text
        return response.json()

    def report(self, worker: int, lease: dict, results: list[dict]) -> None:
        path = f"/workers/{worker}/leases/{lease['id']}/report"
        response = self.post(path, Role.WORKER, {"results": results})
        assert response.status_code == 200 and response.json()["stored"] == len(results)


@pytest.fixture
def service(db_url: str) -> Iterator[Service]:
    app = create_app(Settings(db_url=db_url))
    with TestClient(app, base_url="http://127.0.0.1:8000") as http:
        store = app.state.stores.tokens
        tokens = {role: store.create(role, f"test {role.value}") for role in Role}
        yield Service(http, app, tokens)


def _timed(candidate: dict, secs: float, verified: bool = True) -> dict:
    return {
        "candidate_id": candidate["candidate_id"],
        "samples": [secs],
        "verified": verified,
        "finished_at": datetime.now(timezone.utc).isoformat(),
    }


def _failed(candidate: dict, kind: str, message: str) -> dict:
    return {"candidate_id": candidate["candidate_id"], "error_kind": kind, "error_msg": message}


# Workers.


def test_workers_show_their_target_device_heartbeat_lease_and_results(service: Service) -> None:
    idle = service.register("idle")
    busy = service.register("busy")
    job = service.submit()
    service.queue_candidates(job["id"], 3)
    lease = service.lease(busy, 2)
    service.report(busy, lease, [_timed(lease["candidates"][0], 1e-3)])  # one given back
    held = service.lease(busy, 1)

    listed = service.get("/workers")
    assert listed["count"] == 2
    first, second = listed["data"]
    assert (first["id"], second["id"]) == (busy, idle)  # the most recently heard from first
    assert first["name"] == "busy" and first["alive"] and second["alive"]
    assert first["target"]["key"] == target_key(SKYLAKE)
    assert first["fingerprint"]["cpu_model"] == "test cpu"
    assert (first["lease_id"], first["leased"]) == (held["id"], 1)
    assert (second["lease_id"], second["leased"]) == (None, 0)
    assert first["results_per_minute"] == 1  # the device both share
    assert second["results_per_minute"] == 1
    assert service.get("/workers", limit=1, offset=1)["data"][0]["id"] == idle


def test_a_worker_unheard_past_the_timeout_is_not_alive(service: Service) -> None:
    worker = service.register("silent")
    with service.app.state.stores.log.sessions.begin() as session:
        long_ago = datetime.now(timezone.utc) - timedelta(minutes=5)
        session.execute(update(Worker).where(Worker.id == worker).values(heartbeat_at=long_ago))
    (row,) = service.get("/workers")["data"]
    assert not row["alive"]
    assert service.get("/queue")["workers_alive"] == 0


# The queue.


def test_the_queue_is_counted_per_target(service: Service) -> None:
    skylake_worker = service.register("a", SKYLAKE)
    service.register("b", ZEN)
    skylake, zen = service.submit(SKYLAKE), service.submit(ZEN)
    service.queue_candidates(skylake["id"], 3)
    service.queue_candidates(zen["id"], 2)
    lease = service.lease(skylake_worker, 1)
    service.report(skylake_worker, lease, [_timed(lease["candidates"][0], 2e-3)])
    service.lease(skylake_worker, 1)

    queue = service.get("/queue")
    by_key = {item["target"]["key"]: item for item in queue["targets"]}
    assert by_key[target_key(SKYLAKE)] | {"target": None} == {
        "target": None,
        "queued": 1,
        "leased": 1,
        "workers_alive": 1,
    }
    assert (by_key[target_key(ZEN)]["queued"], by_key[target_key(ZEN)]["leased"]) == (2, 0)
    assert (queue["queued"], queue["leased"], queue["active_leases"]) == (3, 1, 1)
    assert queue["workers_alive"] == 2
    assert queue["results_per_second"] == pytest.approx(1 / 60)
    assert queue["jobs_by_status"]["running"] == 2


# Cost models.


def test_cost_model_versions_are_listed_with_their_scores(service: Service) -> None:
    log = service.app.state.stores.log
    scores = {"method": "leave-workload-out", "shared": {"pairwise": 0.8, "top1": 0.5, "top5": 0.9}}
    for family, scored in [("llvm:znver3", None), ("llvm:znver3", scores), ("cuda:sm_90", None)]:
        add_cost_model(log, family, scored)
    listed = service.get("/cost-models")
    assert listed["count"] == 3
    assert [(m["family"], m["version"]) for m in listed["data"]] == [
        ("cuda:sm_90", 1),
        ("llvm:znver3", 1),
        ("llvm:znver3", 2),
    ]
    assert listed["data"][2]["scores"] == scores and "booster" not in listed["data"][2]
    assert listed["data"][2]["features"] == "per-store-164"
    zen = service.get("/cost-models", family="llvm:znver3")["data"]
    assert [m["version"] for m in zen] == [1, 2]


# Jobs.


def test_a_jobs_measurements_are_numbered_as_its_trials(service: Service) -> None:
    worker = service.register("w")
    job = service.submit()
    service.queue_candidates(job["id"], 4, baseline=True)
    lease = service.lease(worker, 4)
    baseline, first, second, third = lease["candidates"]
    service.report(
        worker,
        lease,
        [
            _timed(baseline, 4e-3),
            _timed(first, 2e-3),
            _failed(second, "build", "<b>no</b>"),
            _timed(third, 1e-3),
        ],
    )
    measured = service.get(f"/jobs/{job['id']}/measurements")
    assert measured["count"] == 4
    assert [m["trial"] for m in measured["data"]] == [None, 1, 2, 3]
    assert measured["data"][2] | {"measured_at": None} == {
        "candidate_id": second["candidate_id"],
        "trial": 2,
        "median_secs": None,
        "error_kind": "build",
        "error_msg": "<b>no</b>",
        "verified": False,
        "measured_at": None,
    }
    page = service.get(f"/jobs/{job['id']}/measurements", limit=2, offset=2)
    assert [m["trial"] for m in page["data"]] == [2, 3] and page["count"] == 4
    progress = service.get(f"/jobs/{job['id']}")
    assert progress["trials_done"] == 3 and progress["baseline_latency_secs"] == pytest.approx(4e-3)
    assert len(progress["curve"]) == 3  # the baseline, then two improvements

    missing = service.http.get(
        "/api/v1/jobs/999/measurements",
        headers={"Authorization": f"Bearer {service.tokens[Role.CLIENT]}"},
    )
    assert missing.status_code == 404 and "no tuning job" in missing.json()["detail"]


def test_jobs_are_filtered_by_status_and_target(service: Service) -> None:
    skylake, zen, cancelled = service.submit(SKYLAKE), service.submit(ZEN), service.submit(ZEN)
    assert service.post(f"/jobs/{cancelled['id']}/cancel", Role.CLIENT).status_code == 200

    def ids(**filters: str) -> list[int]:
        listed = service.get("/jobs", **filters)
        assert listed["count"] == len(listed["data"])
        return [job["id"] for job in listed["data"]]

    assert ids() == [cancelled["id"], zen["id"], skylake["id"]]
    assert ids(status="queued") == [zen["id"], skylake["id"]]
    assert ids(target=target_key(ZEN)) == [cancelled["id"], zen["id"]]
    assert ids(status="queued", target=target_key(ZEN)) == [zen["id"]]
    assert ids(target="no-such-target") == []
    bad = service.http.get(
        "/api/v1/jobs?status=done",
        headers={"Authorization": f"Bearer {service.tokens[Role.CLIENT]}"},
    )
    assert bad.status_code == 422 and "status" in bad.json()["detail"]


# The dashboard's files.

SCRIPT_SRC = re.compile(r"script-src ([^;]*)")


@on_sqlite
def test_the_dashboard_is_served_at_the_root_under_a_strict_policy(service: Service) -> None:
    page = service.http.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    scripts = SCRIPT_SRC.search(policy)
    assert scripts is not None and scripts.group(1).split() == ["'self'"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in page.text and not re.search(r"\son\w+=", page.text)

    assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', page.text)
    assert {"/static/app.js", "/static/app.css"} <= set(assets)
    modules = [f"/static/{path.name}" for path in STATIC.glob("*.js")]
    for asset in assets + modules:
        response = service.http.get(asset)
        assert response.status_code == 200, asset
        assert response.headers["content-security-policy"] == policy
    script_type = service.http.get("/static/app.js").headers["content-type"].split(";")[0]
    assert script_type in ("text/javascript", "application/javascript")  # a module needs either
    missing = service.http.get("/static/nothing.js")
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}

    spec = service.http.get("/openapi.json").json()
    assert not [
        path for path in spec["paths"] if not path.startswith(("/api/", "/healthz", "/metrics"))
    ]
    assert "content-security-policy" not in service.http.get("/docs").headers  # Swagger UI's CDN


def test_the_page_of_a_server_without_auth_says_it_wants_no_token(tmp_path) -> None:
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'open.db'}", no_auth=True)
    with TestClient(create_app(settings), base_url="http://127.0.0.1:8000") as http:
        page = http.get("/").text
    assert '<meta name="autosched-auth" content="none">' in page
    assert '<meta name="autosched-auth" content="bearer">' in (STATIC / "index.html").read_text()


def test_the_dashboard_only_reads_the_api_and_builds_no_markup_from_text() -> None:
    """Every request of the page goes to /api/v1, and text never becomes markup: no innerHTML,
    outerHTML, insertAdjacentHTML, document.write or eval in any of its scripts."""
    sources = {path.name: path.read_text() for path in STATIC.glob("*.js")}
    for name, source in sources.items():
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in source, (name, sink)
        if "fetch(" in source:
            assert name == "api.js", name
    assert "`/api/v1${path}`" in sources["api.js"]


def test_every_dashboard_file_is_package_data() -> None:
    """pyproject ships ``static/*``: one level, so a file in a subfolder would be left out."""
    assert all(path.is_file() for path in STATIC.iterdir())
    assert {"index.html", "app.js", "app.css"} <= {path.name for path in STATIC.iterdir()}


def test_the_whole_page_weighs_under_64_kib() -> None:
    """Every file the page loads, charts included (SVG drawn by chart.js, no library)."""
    assert sum(path.stat().st_size for path in STATIC.iterdir()) < 64 * 1024
