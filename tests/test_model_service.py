"""Whole models through the service: an ONNX upload becomes a model job whose tasks are tuned
round by round as ordinary jobs by a real worker process, through a server killed and restarted
on the way; its compiled library, downloaded, runs in TVM's VM as ONNX Runtime does. Bad uploads
are each one 4xx line, with nothing stored; a memory bomb among them, and one that outgrows the
child process importing it costs that child, not the server."""

from __future__ import annotations

import json
import resource
import shlex
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from helpers import Cli, on_sqlite, wait_for
from model_files import write_mlp_onnx, write_onnx_with
from onnx_bombs import write_bomb
from test_service_e2e import Service

from autosched.finals.timings import FinalistStore
from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.model_jobs import ModelJobStore
from autosched.log.subjects import ensure_target
from autosched.log.tokens import Role
from autosched.records import BASELINE_TRACE
from autosched.search.registry import DEFAULT_STRATEGY
from autosched.server.api.app import create_app
from autosched.server.models import why_not_checked_here
from autosched.server.settings import Settings
from autosched.target import host_target

TARGET = json.dumps({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
MAX_MODEL = 64 << 10  # the MLP file is 18 KiB
ENDED = ("finished", "failed", "cancelled")


@contextmanager
def _serving(settings: Settings) -> Iterator[TestClient]:
    """The API in-process (no engine, no driver) with ``settings``, and a client token."""
    app = create_app(settings)
    with TestClient(app) as http:
        token = app.state.stores.tokens.create(Role.CLIENT, "test")
        http.headers["Authorization"] = f"Bearer {token}"
        yield http


@pytest.fixture
def api(db_url: str) -> Iterator[TestClient]:
    """The API with a small upload limit."""
    with _serving(Settings(db_url=db_url, max_model_bytes=MAX_MODEL)) as http:
        yield http


def _upload(http: TestClient, name: str, content: bytes, **fields: object) -> httpx.Response:
    form = {"target": TARGET, "trials": 2, "batch_size": 1, **fields}
    return http.post("/api/v1/models", files={"file": (name, content)}, data=form)


@on_sqlite
def test_bad_uploads_are_refused_with_one_line_and_nothing_is_stored(
    api: TestClient, tmp_path: Path
) -> None:
    mlp = write_mlp_onnx(tmp_path / "mlp.onnx", batch="batch").read_bytes()
    det = write_onnx_with(tmp_path / "det.onnx", "Det").read_bytes()
    bomb = write_bomb(tmp_path / "bomb.onnx", "ConstantOfShape").read_bytes()
    cases = {
        "not a model": (("junk.onnx", b"\x00not a model\xff" * 8), {}, 422, "not a valid ONNX"),
        "TVMScript": (("mlp.py", b"@I.ir_module\nclass M: ..."), {}, 422, "evaluates it as Python"),
        "a .pt2 file": (("mlp.pt2", b"PK\x03\x04"), {}, 422, "unpickles it"),
        "over the limit": (("big.onnx", b"\x00" * (MAX_MODEL + 1)), {}, 413, "over the limit"),
        "unsupported operator": (("det.onnx", det), {}, 422, "does not support: Det"),
        "a memory bomb": (("bomb.onnx", bomb), {}, 422, "(ConstantOfShape) holds 1073741824 bytes"),
        "no static shape": (("mlp.onnx", mlp), {}, 422, "give it with inputs x=DIMxDIM"),
        "a misspelt field": (("mlp.onnx", mlp), {"input": "x=16x64"}, 422, "input: Extra inputs"),
        "finalists below 0": (("mlp.onnx", mlp), {"finalists": -1}, 422, "finalists: Input"),
        "no final rounds": (("mlp.onnx", mlp), {"final_rounds": 0}, 422, "final_rounds: Input"),
    }
    for case, ((name, content), fields, code, message) in cases.items():
        response = _upload(api, name, content, **fields)
        assert response.status_code == code, (case, response.text)
        detail = response.json()["detail"]
        assert message in detail and "\n" not in detail, (case, detail)
    streamed = _upload(api, "huge.onnx", b"\x00" * (MAX_MODEL + (1 << 20)))
    assert streamed.status_code == 413, streamed.text
    assert api.get("/api/v1/models").json() == {"data": [], "count": 0}
    assert api.get("/api/v1/workloads").json()["count"] == 0


@on_sqlite
def test_a_model_that_outgrows_its_importing_process_costs_that_process_not_the_server(
    db_url: str, tmp_path: Path
) -> None:
    """The bounds on tensors lifted, a bomb is imported, in a child of 2 GiB of address space:
    it runs out there, the upload is one 413 line, and the server, which grew by far less than
    the bomb's gigabyte, goes on importing models; one stored in the log is refused as well."""
    bomb = write_bomb(tmp_path / "bomb.onnx", "ConstantOfShape").read_bytes()
    mlp = write_mlp_onnx(tmp_path / "mlp.onnx").read_bytes()
    settings = Settings(db_url=db_url, max_tensor_bytes=1 << 40, model_memory_bytes=2 << 30)
    with _serving(settings) as http:
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        response = _upload(http, "bomb.onnx", bomb)
        assert response.status_code == 413, response.text
        detail = response.json()["detail"]
        assert detail.startswith("bomb.onnx: ") and "\n" not in detail
        assert "(the limit: 2147483648 bytes of memory (AUTOSCHED_MODEL_MEMORY_BYTES))" in detail
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_kib
        assert grown < 256 << 10, f"the server grew by {grown} KiB"
        assert http.get("/api/v1/models").json()["count"] == 0
        imported = _upload(http, "mlp.onnx", mlp)
        assert imported.status_code == 201, imported.text
        with TuningLog(db_url) as log:  # as a server without the bounds stored it
            models = ModelJobStore(log)
            stored = models.submit(
                name="bomb", onnx=bomb, inputs=[], target_id=ensure_target(log, host_target()).id,
                trials=2, batch_size=1, strategy=DEFAULT_STRATEGY, seed=0, tasks=[], finalists=0,
                final_rounds=1, owner=models.owner(imported.json()["id"]),
            )  # fmt: skip
        library = http.get(f"/api/v1/models/{stored}/library")
        assert library.status_code == 413, library.text
        assert library.json()["detail"].startswith(f"model job {stored}: ")


@on_sqlite
def test_an_import_past_its_time_is_one_line(db_url: str, tmp_path: Path) -> None:
    mlp = write_mlp_onnx(tmp_path / "mlp.onnx").read_bytes()
    with _serving(Settings(db_url=db_url, model_secs=0.05)) as http:
        response = _upload(http, "mlp.onnx", mlp)
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == (
        "mlp.onnx: importing it took over 0.05 s, the limit (AUTOSCHED_MODEL_SECS)"
    )


def test_an_upload_is_a_queued_model_job_with_its_tasks(api: TestClient, tmp_path: Path) -> None:
    mlp = write_mlp_onnx(tmp_path / "mlp.onnx", batch="batch").read_bytes()
    response = _upload(api, "mlp.onnx", mlp, inputs=["x=16x64:float32"], trials=4)
    assert response.status_code == 201, response.text
    model = response.json()
    assert model["name"] == "mlp" and model["status"] == "queued" and model["trials"] == 4
    assert model["inputs"] == [{"name": "x", "shape": [16, 64], "dtype": "float32"}]
    assert len(model["tasks"]) >= 2
    for task in model["tasks"]:
        assert task["weight"] == 1 and task["workload_key"] and task["default_schedule"] is None
        assert task["trials"] == task["rounds"] == task["reused_records"] == 0
    assert model["finalists"] == 8 and model["final_rounds"] == 10  # the defaults
    assert api.get(f"/api/v1/models/{model['id']}").json() == model
    assert api.get("/api/v1/models").json()["count"] == 1
    assert api.post(f"/api/v1/models/{model['id']}/cancel").json()["status"] == "cancelled"
    assert api.get("/api/v1/models/99").status_code == 404


def test_a_model_jobs_finals_take_its_finalists_and_rounds(
    api: TestClient, db_url: str, tmp_path: Path
) -> None:
    mlp = write_mlp_onnx(tmp_path / "mlp.onnx", batch="batch").read_bytes()
    shapes = {"inputs": ["x=16x64:float32"]}
    with TuningLog(db_url) as log:
        models = ModelJobStore(log)
        ids, tasks = {}, {}
        for finalists, rounds in ((3, 4), (0, 10)):
            response = _upload(
                api, "mlp.onnx", mlp, **shapes, finalists=finalists, final_rounds=rounds
            )
            assert response.status_code == 201, response.text
            model = response.json()
            assert (model["finalists"], model["final_rounds"]) == (finalists, rounds)
            models.start(model["id"])
            tasks[finalists] = [task["position"] for task in model["tasks"]]
            ids[finalists] = models.add_finals(model["id"], position=0, tasks=tasks[finalists])
        assert len(ids[3]) == len(tasks[3])
        for job_id in ids[3]:
            final = JobStore(log).job(job_id).final
            assert final is not None and (final.finalists, final.rounds) == (3, 4)
        assert ids[0] == []  # 0 finalists: each task keeps its fastest single shot


def _run_library(library: bytes, path: Path, array: np.ndarray) -> np.ndarray:
    import tvm
    from tvm import relax

    path.write_bytes(library)
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(array)).numpy()


@pytest.mark.slow
@on_sqlite
def test_a_model_is_tuned_by_the_workers_through_a_server_restart(
    db_url: str, tmp_path: Path, cli: Cli
) -> None:
    import onnxruntime

    mlp = write_mlp_onnx(tmp_path / "mlp.onnx", batch="batch")
    service = Service(db_url, tmp_path)
    # Leases that outlast the server's restart on a loaded machine: the worker loses nothing to
    # the restart (expiring leases are test_service_e2e.py's).
    service.env["AUTOSCHED_LEASE_SECS"] = "30"
    try:
        service.start_server()
        service.start_worker()
        remote = ["--server", service.url, "--token", service.client_token]
        submitted = cli(
            "submit", str(mlp), "--input", "x=16x64:float32", "--trials", "2", "--batch", "1",
            "--seed", "0", "--finalists", "1", "--rounds", "3", *remote,
        )  # fmt: skip
        assert submitted.code == 0, submitted.err
        model_id = int(submitted.out)

        def model() -> dict:
            return service.http.get(f"/models/{model_id}").json()

        # The server dies once the first round is under way; the restarted one goes on from the
        # rounds in the log.
        wait_for(lambda: model()["rounds"] >= 1, "the first round")
        assert service.server is not None
        service.server.send_signal(signal.SIGKILL)
        service.server.wait()
        service.start_server()
        wait_for(lambda: model()["status"] in ENDED, "the model job")
        tuned = model()
        assert tuned["status"] == "finished", tuned
        assert tuned["trials_done"] == 2 and tuned["rounds"] == len(tuned["tasks"]) == 2
        for task in tuned["tasks"]:
            assert task["rounds"] == task["trials"] == 1 and task["default_schedule"] is None
            assert task["best_latency_secs"] <= task["untuned_latency_secs"]
        assert tuned["estimated_latency_secs"] <= tuned["untuned_latency_secs"]
        # after its last round each task's fastest and untuned programs were timed side by side
        with TuningLog(db_url) as log:
            finals = [r for r in ModelJobStore(log).progress(model_id).rounds if not r.trials]
            assert sorted(r.task for r in finals) == [t["position"] for t in tuned["tasks"]]
            for round_ in finals:
                job = JobStore(log).job(round_.job_id)
                final = job.final
                assert final is not None
                # where a final is skipped, what the log held of its task says why
                records = [
                    (r.candidate_id, r.trace_json == BASELINE_TRACE, r.median_secs, r.error_msg)
                    for r in log.records(job.workload.id, job.target.id)
                ]
                assert (final.state, final.finalists, final.rounds) == ("timed", 1, 3), (
                    final,
                    records,
                    (tmp_path / "worker0.log").read_text()[-4000:],
                )
                timed = FinalistStore(log).of_job(round_.job_id)
                assert len(timed) == 2 and sum(f.trace_json == BASELINE_TRACE for f in timed) == 1
        check = tuned["output_check"]
        assert check["ran"] and check["reference"] == "ONNX Runtime" and check["reason"] is None

        shown = cli("status", "--model", str(model_id), *remote)
        assert shown.code == 0 and "finished" in shown.out and "outputs match" in shown.out
        assert "top 1 and its untuned program, 3 rounds" in shown.out
        # it ends with the commands that fetch the library and run it beside ONNX Runtime
        (fetch, run) = shown.out.split("next: ", 1)[1].strip().split(" && ")
        assert fetch == (
            f"autosched export mlp.onnx --server {service.url} --model-job {model_id} "
            "--format library -o mlp.so"
        )
        assert run == "autosched run mlp.so --time --compare onnxruntime"
        fetched = cli(*shlex.split(fetch)[1:], "--token", service.client_token, cwd=tmp_path)
        assert fetched.code == 0, fetched.err
        ran = cli(*shlex.split(run)[1:], "--rounds", "2", "--json", cwd=tmp_path)
        assert ran.code == 0, ran.err

        library = service.http.get(f"/models/{model_id}/library", timeout=300)
        assert library.status_code == 200, library.text
        other = write_mlp_onnx(tmp_path / "other.onnx", batch="batch", seed=7)
        refused = cli(
            "export", str(other), "--model-job", str(model_id), "--format", "library",
            "-o", str(tmp_path / "other.so"), *remote,
        )  # fmt: skip
        assert refused.code == 2 and "not the file model job" in refused.err, refused.err
        assert not (tmp_path / "other.so").exists()
    finally:
        service.stop()
    # the fetched artefact runs as tuned (its manifest's threads) and as ONNX Runtime does
    report = json.loads(ran.out)
    assert report["tuned_threads"] == 2 and report["outputs"] == [
        {"name": "y", "shape": [16, 10], "dtype": "float32"}
    ]
    assert report["peer"]["max_abs_difference"] < 1e-4
    x = np.random.default_rng(1).uniform(-1, 1, (16, 64)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(mlp), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"x": x})
    got = _run_library(library.content, tmp_path / "mlp-downloaded.so", x)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_the_server_checks_outputs_only_where_its_cpu_runs_the_target() -> None:
    host = host_target()
    assert why_not_checked_here(host) is None
    assert "cuda" in str(why_not_checked_here({"kind": "cuda", "arch": "sm_90"}))
    other = {**host, "mcpu": "generic" if host["mcpu"] != "generic" else "x86-64"}
    assert "mcpu" in str(why_not_checked_here(other))
    # a target of this CPU model with an extension this machine withholds would die of SIGILL
    if host.get("mattr"):
        unmasked = {key: value for key, value in host.items() if key != "mattr"}
        assert "does not offer" in str(why_not_checked_here(unmasked))
