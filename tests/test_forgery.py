"""Workers cannot forge results: each test is an attack by an ordinary worker token on the
service's API, and what it must not achieve.

A worker reports only for the candidates (or the final) of a lease it holds; it cannot report a
latency no machine of the target could reach; and a best from one worker's single shot is shown
as unconfirmed until the job's final has timed it again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from autosched.ceiling import ceiling_gflops
from autosched.finals.retiming import Finals
from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.tables import FinalState
from autosched.log.tokens import Role
from autosched.records import BASELINE_TRACE
from autosched.server.api.app import create_app
from autosched.server.settings import Settings
from autosched.workloads import get_workload

TARGET = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}
OTHER_TARGET = {"kind": "llvm", "mcpu": "znver3", "num-cores": 8}
FINGERPRINT = {"cpu_model": "test cpu", "physical_cores": 2}
MATMUL = {"name": "matmul", "params": {"M": 16, "N": 16, "K": 16}}
NOW = datetime.now(UTC).isoformat()
# Faster than any machine of TARGET could run the 16x16x16 matmul: 2 cores at the ceiling.
IMPOSSIBLE_SECS = get_workload("matmul", MATMUL["params"]).flops / ceiling_gflops(TARGET) / 1e9 / 2


@dataclass
class Service:
    http: TestClient
    log: TuningLog
    jobs: JobStore
    client: dict[str, str]

    def worker_token(self) -> dict[str, str]:
        """The headers of a new worker token, as any operator of a worker holds one."""
        token = self.http.app.state.stores.tokens.create(Role.WORKER, f"worker {id(object())}")
        return {"Authorization": f"Bearer {token}"}

    def submit(self, target: dict, **fields: Any) -> int:
        body = {"workload": MATMUL, "target": target, "trials": 8, "batch_size": 4, **fields}
        response = self.http.post("/api/v1/jobs", json=body, headers=self.client)
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def job(self, job_id: int) -> dict:
        response = self.http.get(f"/api/v1/jobs/{job_id}", headers=self.client)
        assert response.status_code == 200, response.text
        return response.json()

    def queue(self, job_id: int, traces: list[str]) -> None:
        """What an engine does: take the job up and queue candidates."""
        assert job_id in self.jobs.claim_jobs("test-engine", 60)
        self.jobs.enqueue(job_id, [(trace, f"program {trace}", None) for trace in traces])


@dataclass
class Worker:
    """A registered worker, acting with its token over HTTP."""

    service: Service
    headers: dict[str, str]
    id: int

    @classmethod
    def register(
        cls, service: Service, target: dict = TARGET, fingerprint: dict = FINGERPRINT
    ) -> Worker:
        headers = service.worker_token()
        body = {"name": "w", "target": target, "fingerprint": fingerprint}
        response = service.http.post("/api/v1/workers", json=body, headers=headers)
        assert response.status_code == 201, response.text
        return cls(service, headers, response.json()["id"])

    def post(self, path: str, body: dict | None = None) -> httpx.Response:
        url = f"/api/v1/workers/{self.id}{path}"
        return self.service.http.post(url, json=body, headers=self.headers)

    def lease(self, n: int) -> dict:
        response = self.post("/leases", {"n": n})
        assert response.status_code == 200, response.text
        return response.json()

    def report(self, lease_id: int, results: list[dict]) -> httpx.Response:
        return self.post(f"/leases/{lease_id}/report", {"results": results})


def _timed(candidate_id: int, *samples: float, verified: bool = True) -> dict:
    return {
        "candidate_id": candidate_id,
        "samples": list(samples),
        "verified": verified,
        "started_at": NOW,
        "finished_at": NOW,
    }


def _crashed(candidate_id: int) -> dict:
    return {"candidate_id": candidate_id, "error_kind": "crash", "error_msg": "SIGSEGV"}


def _one_line(response: httpx.Response) -> str:
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail, detail
    return detail


@pytest.fixture
def service(db_url: str) -> Iterator[Service]:
    app = create_app(Settings(db_url=db_url))
    with TestClient(app) as http:
        token = app.state.stores.tokens.create(Role.CLIENT, "a client")
        yield Service(
            http, app.state.stores.log, app.state.stores.jobs, {"Authorization": f"Bearer {token}"}
        )


def test_a_worker_cannot_report_the_candidates_of_another_workers_lease(service: Service) -> None:
    victim_job = service.submit(TARGET)
    service.queue(victim_job, ['["a"]', '["b"]'])
    victim = Worker.register(service)
    victims = victim.lease(2)
    held = [c["candidate_id"] for c in victims["candidates"]]
    # the attacker serves another target, with a lease of its own job's candidates
    own_job = service.submit(OTHER_TARGET)
    service.queue(own_job, ['["x"]'])
    attacker = Worker.register(service, OTHER_TARGET)
    own = attacker.lease(1)

    forged = [_timed(held[0], 1e-6), _crashed(held[1])]
    outcome = attacker.report(own["id"], forged)
    assert outcome.status_code == 200, outcome.text
    assert outcome.json() == {"stored": 0, "ignored": 2, "requeued": 0, "poisoned": 0}
    assert attacker.report(victims["id"], forged).status_code == 404
    assert victim.report(own["id"], forged).status_code == 404  # not the victim's lease either
    # the victim's job has no best and no trial, and its candidates are still the victim's
    job = service.job(victim_job)
    assert (job["best_latency_secs"], job["trials_done"]) == (None, 0)
    honest = victim.report(victims["id"], [_timed(held[0], 2e-3), _timed(held[1], 3e-3)])
    assert honest.json() == {"stored": 2, "ignored": 0, "requeued": 0, "poisoned": 0}
    assert service.job(victim_job)["best_latency_secs"] == pytest.approx(2e-3)
    # the attacker's own lease was reported: what it held went back to the queue, unmeasured
    assert service.job(own_job)["trials_done"] == 0
    assert service.jobs.budget(own_job).outstanding == 1


def test_a_worker_cannot_time_a_final_its_lease_does_not_hold(service: Service) -> None:
    singles = {'["a"]': 1e-3, '["b"]': 2e-3, BASELINE_TRACE: 5e-3}
    job, timer = _measured_by_one_worker(service, singles)
    assert Finals(service.log).plan(job) is FinalState.QUEUED
    final = timer.lease(4)
    entrants = [e["candidate_id"] for e in final["final"]["entrants"]]
    # the attacker holds a lease of candidates, not the final
    other = service.submit(TARGET)
    service.queue(other, ['["x"]'])
    attacker = Worker.register(service)
    own = attacker.lease(1)
    assert own["final"] is None

    forged = {
        "entrants": [{"candidate_id": e, "samples": [1e-6], "verified": True} for e in entrants]
    }
    taken = attacker.post(f"/leases/{own['id']}/final", forged)
    assert taken.status_code == 200 and taken.json() == {"taken": False}
    assert attacker.post(f"/leases/{final['id']}/final", forged).status_code == 404
    assert service.job(job)["final"]["state"] == "leased" and service.job(job)["finalists"] == []
    retimed = {
        "entrants": [
            {"candidate_id": entrants[0], "samples": [1.2e-3] * 3},
            {"candidate_id": entrants[1], "samples": [2e-3] * 3},
            {"candidate_id": entrants[2], "samples": [5e-3] * 3},
        ]
    }
    assert timer.post(f"/leases/{final['id']}/final", retimed).json() == {"taken": True}
    assert service.job(job)["best_latency_secs"] == pytest.approx(1.2e-3)


@pytest.mark.parametrize(
    ("samples", "why"),
    [
        ([IMPOSSIBLE_SECS], "GFLOP/s, beyond the"),
        ([2e-3, IMPOSSIBLE_SECS, 2e-3], "GFLOP/s, beyond the"),  # one impossible sample of three
        ([0.0], "greater than 0"),
    ],
)
def test_a_latency_no_machine_of_the_target_could_reach_is_refused(
    service: Service, samples: list[float], why: str
) -> None:
    job = service.submit(TARGET)
    service.queue(job, ['["a"]', '["b"]'])
    worker = Worker.register(service)
    lease = worker.lease(2)
    first, second = (c["candidate_id"] for c in lease["candidates"])

    refused = worker.report(lease["id"], [_timed(first, *samples), _timed(second, 3e-3)])
    assert refused.status_code == 422, refused.text
    assert why in _one_line(refused)
    progress = service.job(job)  # refused whole: nothing is stored
    assert (progress["best_latency_secs"], progress["trials_done"]) == (None, 0)
    assert service.jobs.budget(job).outstanding == 2
    taken = worker.report(lease["id"], [_timed(first, 2e-3), _timed(second, 3e-3)])
    assert taken.json()["stored"] == 2


def test_a_final_timed_faster_than_any_machine_of_the_target_is_refused(
    service: Service,
) -> None:
    job = service.submit(TARGET, trials=1, finalists=1, rounds=2)
    service.queue(job, ['["a"]', BASELINE_TRACE])
    worker = Worker.register(service)
    lease = worker.lease(2)
    results = [_timed(c["candidate_id"], 2e-3) for c in lease["candidates"]]
    assert worker.report(lease["id"], results).json()["stored"] == 2
    Finals(service.log).plan(job)
    final = worker.lease(1)
    tuned, untuned = (e["candidate_id"] for e in final["final"]["entrants"])

    forged = {
        "entrants": [
            {"candidate_id": tuned, "samples": [IMPOSSIBLE_SECS] * 2},
            {"candidate_id": untuned, "samples": [2e-3] * 2},
        ]
    }
    refused = worker.post(f"/leases/{final['id']}/final", forged)
    assert refused.status_code == 422 and "beyond the" in _one_line(refused)
    assert service.job(job)["final"]["state"] == "leased" and service.job(job)["finalists"] == []


def _measured_by_one_worker(service: Service, singles: dict[str, float]) -> tuple[int, Worker]:
    """A job of the programs of ``singles`` (traces, the untuned one among them) whose one worker
    so far has timed each once as ``singles`` says, checked. Returns the job and the worker."""
    job = service.submit(TARGET, trials=len(singles) - 1, finalists=2, rounds=3)
    service.queue(job, list(singles))
    worker = Worker.register(service)
    lease = worker.lease(len(singles))
    results = [_timed(c["candidate_id"], singles[c["trace_json"]]) for c in lease["candidates"]]
    assert worker.report(lease["id"], results).json()["stored"] == len(singles)
    return job, worker


def _a_lie_measured(service: Service) -> tuple[int, Worker]:
    """A job whose only worker so far, the forger, claims its slow program runs in a microsecond,
    checked: possible, but a lie. Returns the job and the forger."""
    return _measured_by_one_worker(
        service, {'["slow"]': 1e-6, '["fast"]': 2e-3, BASELINE_TRACE: 5e-3}
    )


def test_a_best_from_one_workers_single_shot_is_unconfirmed_until_the_final_times_it(
    service: Service,
) -> None:
    job, _forger = _a_lie_measured(service)
    single = service.job(job)
    assert single["best_latency_secs"] == pytest.approx(1e-6)
    assert single["best_confirmed"] is False

    # another worker of the target times the final: the slow program is slow
    assert Finals(service.log).plan(job) is FinalState.QUEUED
    timer = Worker.register(service)
    leased = timer.lease(4)
    final = leased["final"]
    retimes = {'["slow"]': 4e-3, '["fast"]': 2.1e-3, BASELINE_TRACE: 5.2e-3}
    body = {
        "entrants": [
            {"candidate_id": e["candidate_id"], "samples": [retimes[e["trace_json"]]] * 3}
            for e in final["entrants"]
        ]
    }
    assert timer.post(f"/leases/{leased['id']}/final", body).json() == {"taken": True}
    confirmed = service.job(job)
    assert confirmed["best_confirmed"] is True
    assert confirmed["best_latency_secs"] == pytest.approx(2.1e-3)
    assert confirmed["baseline_latency_secs"] == pytest.approx(5.2e-3)
    progress = service.jobs.job(job)
    best = service.log.best(progress.workload.id, progress.target.id)
    assert best is not None and best.program_hash == 'program ["fast"]'  # the lie is not the best


def test_a_best_is_confirmed_by_another_machine_where_one_serves_the_target(
    service: Service,
) -> None:
    job, forger = _a_lie_measured(service)
    other_machine = {**FINGERPRINT, "cpu_model": "another test cpu"}
    honest = Worker.register(service, fingerprint=other_machine)
    assert Finals(service.log).plan(job) is FinalState.QUEUED

    # the machine that measured the best may not confirm it while another machine serves
    assert forger.post("/leases", {"n": 4}).status_code == 204
    assert honest.lease(4)["final"] is not None
