"""The tuning service end to end: real server, engine and worker processes over loopback HTTP.

Jobs are submitted and followed with a plain HTTP client; workers are `autosched worker`
processes; faults are real: `kill -9` of a worker holding a lease, and of the server mid-job.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import free_port, on_postgresql, wait_for

from autosched.log import TuningLog
from autosched.log.tokens import Role, TokenStore
from autosched.target import target_key

# Builds real programs or starts processes.
pytestmark = pytest.mark.slow

API = "/api/v1"
MATMUL = {"name": "matmul", "params": {"M": 32, "N": 32, "K": 32}}
SOFTMAX = {"name": "softmax", "params": {"rows": 8, "cols": 32}}
FAST_SERVICE = {"AUTOSCHED_LEASE_SECS": "4", "AUTOSCHED_CLAIM_SECS": "4"}


class Service:
    """The processes of one service: a server (API and engine) and workers, all on this machine."""

    def __init__(self, db_url: str, workdir: Path) -> None:
        self.db_url = db_url
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **FAST_SERVICE}
        with TuningLog(db_url) as log:  # `autosched token create` is test_service_cli.py's
            tokens = TokenStore(log)
            self.client_token = tokens.create(Role.CLIENT, "e2e client")
            self.worker_token = tokens.create(Role.WORKER, "e2e worker")
        self.http = httpx.Client(
            base_url=self.url + API,
            headers={"Authorization": f"Bearer {self.client_token}"},
            timeout=30,
        )
        self.server: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []

    def start_server(self) -> None:
        self.server = self._spawn("server", "serve", "--db", self.db_url, "--port", str(self.port))
        wait_for(self._healthy, "the server to answer")

    def _healthy(self) -> bool:
        assert self.server is not None and self.server.poll() is None, "the server died"
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def start_worker(self) -> subprocess.Popen[bytes]:
        """Start a worker and wait until the server has heard from it."""
        token_file = self.workdir / "worker.token"  # not on the command line, where ps shows it
        token_file.write_text(self.worker_token + "\n")
        args = ["--server", self.url, "--token-file", str(token_file), "--batch", "2"]
        worker = self._spawn(f"worker{len(self.workers)}", "worker", *args)
        self.workers.append(worker)
        alive = sum(process.poll() is None for process in self.workers)
        wait_for(lambda: self._workers_alive() >= alive, "the worker to register")
        return worker

    def _workers_alive(self) -> float:
        for line in httpx.get(f"{self.url}/metrics").text.splitlines():
            if line.startswith("autosched_workers_alive "):
                return float(line.split()[1])
        raise AssertionError("no autosched_workers_alive metric")

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        return subprocess.Popen(
            [sys.executable, "-m", "autosched", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.workdir,
        )

    def submit(
        self, workload: dict, trials: int, batch_size: int, seed: int, *, small_final: bool = False
    ) -> int:
        """Submit a job; ``small_final``: a final of two finalists in three rounds (the server's
        default, eight in ten rounds, is test_api.py's; two workers timing such finals at once on
        two cores took 20 s)."""
        body = {
            "workload": workload,
            "target": "llvm",
            "trials": trials,
            "batch_size": batch_size,
            "seed": seed,
            **({"finalists": 2, "rounds": 3} if small_final else {}),
        }
        response = self.http.post("/jobs", json=body)
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def job(self, job_id: int) -> dict:
        response = self.http.get(f"/jobs/{job_id}")
        assert response.status_code == 200, response.text
        return response.json()

    def wait_until_ended(self, *jobs: int) -> None:
        ended = ("finished", "cancelled", "failed", "interrupted")
        wait_for(lambda: all(self.job(job)["status"] in ended for job in jobs), "the jobs")

    def stop(self) -> None:
        self.http.close()
        for process in [*self.workers, self.server]:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in [*self.workers, self.server]:
            if process is not None:
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()


@pytest.fixture
def service(db_url: str, tmp_path: Path) -> Iterator[Service]:
    running = Service(db_url, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def _ids(log: TuningLog, job: dict) -> tuple[int, int]:
    workload = log.find_workload(job["workload"]["key"])
    target = log.find_target(target_key(job["target"]["target_json"]))
    assert workload is not None and target is not None
    return workload.id, target.id


def _assert_fully_measured_once(service: Service, job: dict) -> None:
    """The job measured its budget, every program once; the API's records are the log's."""
    assert job["status"] == "finished" and job["trials_done"] == job["trials"], job
    with TuningLog(service.db_url) as log:
        records = log.records(*_ids(log, job))
    hashes = [r.program_hash for r in records]
    assert len(hashes) == len(set(hashes)) == job["trials"] + 1  # and the untuned baseline
    served = service.http.get(
        "/records",
        params={
            "workload": job["workload"]["key"],
            "target": job["target"]["key"],
            "limit": 1000,
        },
    )
    assert served.status_code == 200, served.text
    served_ids = sorted(item["candidate_id"] for item in served.json()["data"])
    assert served_ids == sorted(r.candidate_id for r in records)


# Every test here runs on PostgreSQL, the production log and queue that workers share. The
# service on the embedded SQLite log, with a worker process, a restart and a kill -9, is
# tests/test_model_service.py's and tests/test_dashboard.py's.


@on_postgresql
def test_jobs_are_tuned_through_the_api_sharing_the_workers(service: Service) -> None:
    service.start_server()
    service.start_worker()
    service.start_worker()
    matmul = service.submit(MATMUL, trials=6, batch_size=3, seed=1, small_final=True)
    softmax = service.submit(SOFTMAX, trials=6, batch_size=3, seed=2, small_final=True)
    cancelled = service.submit(
        {"name": "matmul", "params": {"M": 48, "N": 48, "K": 48}}, trials=500, batch_size=4, seed=3
    )
    assert service.http.post(f"/jobs/{cancelled}/cancel").json()["status"] == "cancelled"
    service.wait_until_ended(matmul, softmax)
    jobs = [service.job(matmul), service.job(softmax)]
    for job in jobs:
        _assert_fully_measured_once(service, job)
        assert job["best_latency_secs"] is not None and job["curve"]
        best = service.http.get(f"/jobs/{job['id']}/best").json()
        assert "T.prim_func" in best["tvmscript"]
        # one worker timed the two fastest again beside the untuned program, in three rounds
        assert job["final"]["state"] == "timed", job["final"]
        finalists = job["finalists"]
        assert len(finalists) == 3 and sum(f["untuned"] for f in finalists) == 1
        assert all(len(f["samples"]) == 3 for f in finalists)
        assert best["record"]["program_hash"] == finalists[0]["program_hash"]
    # the jobs ran side by side: each was measured before the other ended
    with TuningLog(service.db_url) as log:
        times = [[r.measured_at for r in log.records(*_ids(log, job))] for job in jobs]
    assert min(times[0]) < max(times[1]) and min(times[1]) < max(times[0])
    stopped = service.job(cancelled)
    assert stopped["status"] == "cancelled" and stopped["trials_done"] <= 4


@on_postgresql
def test_a_killed_workers_lease_is_measured_by_another_worker(service: Service) -> None:
    service.start_server()
    doomed = service.start_worker()
    job = service.submit(MATMUL, trials=6, batch_size=2, seed=4, small_final=True)
    wait_for(
        lambda: "autosched_leases_active 1" in httpx.get(f"{service.url}/metrics").text,
        "the worker to hold a lease",
    )
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    service.start_worker()
    service.wait_until_ended(job)
    _assert_fully_measured_once(service, service.job(job))


@on_postgresql
def test_a_job_resumes_after_the_server_is_killed(service: Service) -> None:
    service.start_server()
    service.start_worker()
    job = service.submit(MATMUL, trials=8, batch_size=2, seed=5, small_final=True)
    wait_for(lambda: service.job(job)["trials_done"] >= 2, "the first measurements")
    assert service.server is not None
    service.server.send_signal(signal.SIGKILL)
    service.server.wait()
    service.start_server()
    service.wait_until_ended(job)
    _assert_fully_measured_once(service, service.job(job))


class Cluster:
    """A PostgreSQL cluster of the test's own (never the shared server), that it may crash."""

    def __init__(self, bin_dir: Path, root: Path) -> None:
        self._bin = bin_dir
        self._data = root / "data"
        self._root = root
        self.port = free_port()
        self.url = f"postgresql+psycopg://autosched@127.0.0.1:{self.port}/postgres"
        # initdb and the server refuse to run as root: run them as the postgres user then.
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(root, "postgres")
        self._run("initdb", "-D", str(self._data), "-A", "trust", "-U", "autosched")

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self._as, str(self._bin / tool), *args], check=True, capture_output=True, timeout=120
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self._root} -c listen_addresses=127.0.0.1"
        log = str(self._root / "server.log")
        self._run("pg_ctl", "-D", str(self._data), "-o", options, "-l", log, "-w", "start")

    def crash(self) -> None:
        """Stop at once, as a crash would: no checkpoint, clients cut off."""
        self._run("pg_ctl", "-D", str(self._data), "-m", "immediate", "-w", "stop")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) to run a cluster of our own")
    root = Path(tempfile.mkdtemp(prefix="autosched-pg-"))
    root.chmod(0o755)
    own = Cluster(found[-1].parent, root)
    own.start()
    try:
        yield own
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            own.crash()
        shutil.rmtree(root, ignore_errors=True)


def test_a_job_outlives_a_database_crash_and_restart(cluster: Cluster, tmp_path: Path) -> None:
    service = Service(cluster.url, tmp_path)
    try:
        service.start_server()
        service.start_worker()
        job = service.submit(MATMUL, trials=8, batch_size=2, seed=6, small_final=True)
        wait_for(lambda: service.job(job)["trials_done"] >= 2, "the first measurements")
        cluster.crash()
        down = httpx.get(f"{service.url}/healthz/ready", timeout=10)
        assert down.status_code == 503 and down.headers["Retry-After"] == "5"
        assert httpx.get(f"{service.url}/healthz", timeout=10).status_code == 200  # still alive
        refused = service.http.get(f"/jobs/{job}")
        assert refused.status_code == 503 and "unavailable" in refused.json()["detail"]
        time.sleep(3)
        cluster.start()
        wait_for(
            lambda: httpx.get(f"{service.url}/healthz/ready", timeout=10).status_code == 200,
            "the server to be ready again",
        )
        service.wait_until_ended(job)
        _assert_fully_measured_once(service, service.job(job))
    finally:
        service.stop()
    server_log = (tmp_path / "server.log").read_text()
    for loop in ("engine-", "model-trainer"):  # one line when the outage starts, not per retry
        lost = [line for line in server_log.splitlines() if loop in line and "retrying" in line]
        assert len(lost) <= 1, lost
