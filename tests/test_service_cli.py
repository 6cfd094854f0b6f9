"""The service commands of the CLI: token create, submit, status (--watch), export --server and
serve, against a real server on loopback. Nothing is tuned: results are reported by hand.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
import tvm
import uvicorn
from helpers import Cli, free_port, served

from autosched.admission import program_json
from autosched.client.http import ServiceClient
from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.tokens import Role, TokenStore
from autosched.records import BASELINE_TRACE, MeasureResult, ReportedResult
from autosched.server.api.app import create_app
from autosched.server.settings import Settings
from autosched.workloads import get_workload

SHAPE = ["-p", "M=16", "-p", "N=16", "-p", "K=16"]
WORKER_TARGET = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}


@dataclass
class Server:
    url: str
    jobs: JobStore
    client_token: str
    worker: ServiceClient


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """The API (without engine) served by uvicorn on loopback, in a thread."""
    port = free_port()
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path / 'service.db'}", port=port))
    served = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not served.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    stores = app.state.stores
    url = f"http://127.0.0.1:{port}"
    worker = ServiceClient(url, stores.tokens.create(Role.WORKER, "test worker"))
    try:
        yield Server(url, stores.jobs, stores.tokens.create(Role.CLIENT, "test"), worker)
    finally:
        worker.close()
        served.should_exit = True
        thread.join()


def _measure_baseline(server: Server, job_id: int, worker_id: int) -> None:
    """Queue the job's untuned program and report it measured and verified, as a worker would."""
    assert job_id in server.jobs.claim_jobs("test-engine", 60)
    server.jobs.enqueue(job_id, [(BASELINE_TRACE, "baseline", None)])
    lease = server.worker.lease(worker_id, 1)
    assert lease is not None
    now = datetime.now(timezone.utc)
    result = MeasureResult(samples=(1e-4,), started_at=now, finished_at=now)
    reported = [ReportedResult(lease.candidates[0].candidate_id, result, True)]
    assert server.worker.report(worker_id, lease.id, reported).stored == 1


def test_token_create_prints_a_token_of_the_role(cli: Cli, db_url: str) -> None:
    created = cli("token", "create", "--role", "worker", "--db", db_url)
    assert created.code == 0, created.err
    token = created.out.strip()
    described = cli("token", "create", "--role", "client", "--name", "ci", "--db", db_url, "--json")
    document = json.loads(described.out)
    assert document["role"] == "client" and document["name"] == "ci"
    with TuningLog(db_url) as log:
        store = TokenStore(log)
        worker, client = store.authenticate(token), store.authenticate(document["token"])
        assert worker is not None and worker.role is Role.WORKER
        assert client is not None and client.role is Role.CLIENT and client.id != worker.id
        assert store.authenticate(token + "x") is None
    admin = cli("token", "create", "--role", "admin", "--db", db_url)
    assert admin.code == 0, admin.err
    with TuningLog(db_url) as log:
        found = TokenStore(log).authenticate(admin.out.strip())
        assert found is not None and found.role is Role.ADMIN
    refused = cli("token", "create", "--role", "root", "--db", db_url)
    assert refused.code == 2 and "root" in refused.err


def test_submit_status_and_export_from_a_server(cli: Cli, server: Server, tmp_path: Path) -> None:
    worker_id = server.worker.register_worker(name="w", target=WORKER_TARGET, fingerprint={})
    remote = ["--server", server.url, "--token", server.client_token]

    submitted = cli(
        "submit", "matmul", *SHAPE, "--trials", "4", "--seed", "3", "--strategy", "tpe",
        "--finalists", "3", "--rounds", "5", *remote,
    )  # fmt: skip
    assert submitted.code == 0, submitted.err
    job_id = int(submitted.out)
    assert submitted.err.strip() == f"next: autosched status {job_id} --watch --server {server.url}"
    listed = cli("status", *remote)
    assert "matmul" in listed.out and "queued" in listed.out
    shown = json.loads(cli("status", str(job_id), "--json", *remote).out)
    assert shown["id"] == job_id and shown["seed"] == 3 and shown["trials"] == 4
    assert shown["strategy"] == "tpe"
    assert shown["final"] == {"state": "pending", "finalists": 3, "rounds": 5, "reason": None}
    described = cli("status", str(job_id), *remote).out
    assert "pending: 3 finalists and the untuned program, 5 rounds" in described

    _measure_baseline(server, job_id, worker_id)
    output = tmp_path / "best.py"
    exported = cli(
        "export",
        "matmul",
        *SHAPE,
        "--target",
        "llvm",
        "--format",
        "tvmscript",
        "-o",
        str(output),
        *remote,
    )
    assert exported.code == 0, exported.err
    assert isinstance(tvm.script.from_source(output.read_text()), tvm.tirx.PrimFunc)

    with ServiceClient(server.url, server.client_token) as client:
        client.cancel(job_id)
    watched = cli("status", str(job_id), "--watch", "--interval", "0.1", *remote)
    assert watched.code == 0 and "cancelled" in watched.out


def test_service_commands_fail_with_one_line(cli: Cli, server: Server, tmp_path: Path) -> None:
    remote = ["--server", server.url, "--token", server.client_token]
    extern = json.loads(program_json(get_workload("softmax", {}).func))
    for node in extern["nodes"]:
        if node["type"] == "ir.Op":
            node["data"] = "tirx.call_extern"
    (tmp_path / "extern.json").write_text(json.dumps(extern))
    for args, code, message in [
        (["submit", "--file", "extern.json", *remote], 2, "not tirx.call_extern (HTTP 422)"),
        (["submit", "nope", *remote], 2, "unknown workload 'nope'"),
        (["submit", "matmul", "-p", "M=0", *remote], 2, "must be at least 1"),
        (["submit", "matmul", "--strategy", "greedy", *remote], 2, "strategy"),
        (["submit", "matmul", "--finalists", "65", *remote], 2, "--finalists"),
        (["submit", "matmul", "--rounds", "0", *remote], 2, "--rounds"),
        (["submit", "matmul", "--target", "{bad", *remote], 2, "not valid JSON"),
        (["submit", "matmul", "--target", "cuda", *remote], 2, "no live cuda worker"),
        (
            ["submit", "matmul", "--server", server.url, "--token", "wrong" * 8],
            2,
            "unknown or revoked",
        ),
        (["submit", "model.py", *remote], 2, "evaluates it as Python"),
        (["submit", "model.pt2", *remote], 2, "unpickles it"),
        (["submit", "absent.onnx", "--input", "x=4", *remote], 2, "cannot read model file"),
        (["submit", "matmul", "--input", "x=4", *remote], 2, "a workload takes -p"),
        (["status", "999", *remote], 2, "no tuning job with id 999"),
        (["status", "--model", "999", *remote], 2, "no model job with id 999"),
        (["status", "--watch", "--json", *remote], 2, "--watch"),
        (["status", "--server", "http://127.0.0.1:9"], 1, "cannot reach"),
        (["export", "matmul", "--db", "sqlite:///x.db", *remote], 2, "not both"),
        (["export", "matmul", *SHAPE, *remote], 2, "no workload"),
        (["serve", "--no-auth", "--host", "0.0.0.0"], 2, "loopback"),
        (["worker", "--token", "t" * 40, "--token-file", "f"], 2, "give the worker token once"),
        (["worker", "--token-file", "missing.token"], 2, "cannot read the token file"),
    ]:
        result = cli(*args)
        assert result.code == code, (args, result.err)
        assert message in result.err and len(result.err.strip().splitlines()) == 1, (
            args,
            result.err,
        )
    assert cli("status", *remote).out.count("matmul") == 0


@pytest.mark.slow
def test_serve_answers_until_sigterm(tmp_path: Path) -> None:
    port = free_port()
    with served(tmp_path, port, capture=True) as process:
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert health.json() == {"status": "ok"}
        jobs = httpx.get(f"http://127.0.0.1:{port}/api/v1/jobs", timeout=5)
        assert jobs.json() == {"data": [], "count": 0}
        process.send_signal(signal.SIGTERM)
        # uvicorn shuts the app down, then dies of the signal it caught, as is the convention.
        assert process.wait(timeout=30) in (0, -signal.SIGTERM)
        assert process.stdout is not None
        assert "Application shutdown complete" in process.stdout.read()
