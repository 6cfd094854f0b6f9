"""The dashboard in a real browser: Playwright drives Debian's Chromium against `autosched serve`
and an `autosched worker`, processes of their own on loopback, shared by the module's tests.

Jobs are submitted through the API and followed on the page as it refreshes itself; text from the
log that looks like markup must show as text. Every test fails on a console error or an uncaught
exception in the page. Screenshots of each page go to ``$AUTOSCHED_TEST_SCREENSHOTS`` (default: a
directory under pytest's temporary directory).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import uvicorn
from helpers import add_cost_model, free_port, wait_for
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from autosched.log import TuningLog
from autosched.log.tokens import Role, TokenStore
from autosched.measure import LocalMeasurer, MeasureConfig
from autosched.server.api.app import create_app
from autosched.server.settings import Settings
from autosched.target import host_target
from autosched.tuner import TuneOptions, tune
from autosched.workloads import get_workload

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [
    pytest.mark.slow,  # starts a server, a worker and a browser
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}: apt-get install chromium"
    ),
]
XSS = "<img src=x onerror=alert(1)>"
SMALL = {"name": "matmul", "params": {"M": 32, "N": 32, "K": 32}}
TRIALS = 6
SERVICE_ENV = {
    "AUTOSCHED_LEASE_SECS": "4",
    "AUTOSCHED_CLAIM_SECS": "4",
    "AUTOSCHED_WORKER_TIMEOUT_SECS": "3",
}
# What Chromium logs when the API refuses a token: the refusals the auth test asks for.
REFUSED = re.compile(r"Failed to load resource: the server responded with a status of 40[13]")


@dataclass
class Served:
    """`autosched serve` and one `autosched worker` on a SQLite log, with a client token."""

    url: str
    db_url: str
    tokens: dict[Role, str]
    server: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]
    api: httpx.Client

    def submit(self, workload: dict, target: str | dict = "llvm", trials: int = 4) -> dict:
        # a final of two finalists in three rounds: the page's finalists are a job of `tune`'s
        body = {"workload": workload, "target": target, "trials": trials, "batch_size": 2,
                "finalists": 2, "rounds": 3}  # fmt: skip
        response = self.api.post("/jobs", json={**body, "seed": 1})
        assert response.status_code == 201, response.text
        return response.json()

    def get(self, path: str, **params: object) -> dict:
        response = self.api.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()


def _spawn(workdir: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    log = open(workdir / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(
        [sys.executable, "-m", "autosched", *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **SERVICE_ENV},
        cwd=workdir,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    workdir = tmp_path_factory.mktemp("dashboard")
    db_url = f"sqlite:///{workdir / 'autosched.db'}"
    with TuningLog(db_url) as log:
        store = TokenStore(log)
        tokens = {role: store.create(role, f"dashboard {role.value}") for role in Role}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = _spawn(workdir, "server", "serve", "--db", db_url, "--port", str(port))
    token_file = workdir / "worker.token"
    token_file.write_text(tokens[Role.WORKER] + "\n")
    worker = _spawn(
        workdir,
        "worker",
        "worker",
        "--server",
        url,
        "--token-file",
        str(token_file),
        "--batch",
        "2",
    )
    api = httpx.Client(
        base_url=f"{url}/api/v1",
        headers={"Authorization": f"Bearer {tokens[Role.CLIENT]}"},
        timeout=30,
    )
    try:
        wait_for(lambda: server.poll() is None and _answers(url), "the server", timeout=120)
        running = Served(url, db_url, tokens, server, worker, api)
        wait_for(lambda: running.get("/workers")["count"] == 1, "the worker", timeout=120)
        yield running
    finally:
        api.close()
        _stop(worker)
        _stop(server)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("AUTOSCHED_TEST_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@dataclass
class Tab:
    """A browser tab on the dashboard, and what went wrong in it."""

    page: Page
    base_url: str
    screenshots: Path
    problems: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def open(self, token: str | None) -> None:
        """Load the dashboard; give ``token`` when it asks for one."""
        self.page.goto(self.base_url + "/")
        if token is not None:
            self.page.fill("#login input[name=token]", token)
            self.page.click("#login button[type=submit]")

    def show(self, hash_path: str) -> None:
        """Go to a view by its hash, as a link would: the page stays loaded."""
        self.page.evaluate("path => { location.hash = path; }", hash_path)

    def shoot(self, name: str) -> None:
        self.page.screenshot(path=self.screenshots / f"{name}.png", full_page=True)

    def note(self, message: ConsoleMessage) -> None:
        if message.type == "error" and not any(p.search(message.text) for p in self.allowed):
            self.problems.append(f"console: {message.text}")


@pytest.fixture
def tab(browser: Browser, served: Served, screenshots: Path) -> Iterator[Tab]:
    context = browser.new_context(
        base_url=served.url,
        viewport={"width": 1280, "height": 900},
        permissions=["clipboard-read", "clipboard-write"],
    )
    page = context.new_page()
    opened = Tab(page, served.url, screenshots)
    page.on("console", opened.note)
    page.on("pageerror", lambda error: opened.problems.append(f"uncaught: {error}"))
    page.on("dialog", lambda dialog: opened.problems.append(f"dialog: {dialog.message}"))
    try:
        yield opened
    finally:
        context.close()
    assert opened.problems == []


def _row(job_id: int) -> str:
    return f"#jobs tr[data-job-id='{job_id}']"


def test_a_submitted_job_appears_and_its_progress_advances_live(served: Served, tab: Tab) -> None:
    tab.open(served.tokens[Role.CLIENT])
    expect(tab.page.locator("#jobs table")).to_be_visible()
    tab.page.evaluate("() => { window.loadedOnce = true; }")  # gone if the page reloads

    job = served.submit(SMALL, trials=TRIALS)
    progress = tab.page.locator(f"{_row(job['id'])} .progress-text")
    expect(progress).to_be_visible(timeout=10_000)
    seen = [progress.text_content()]

    def advanced() -> bool:
        text = progress.text_content()
        if text != seen[-1]:
            seen.append(text)
        return (
            bool(text and text.startswith(f"{TRIALS}/{TRIALS}"))
            and "finished" in tab.page.locator(_row(job["id"])).inner_text()
        )

    wait_for(advanced, "the job to finish on the page", timeout=120)
    assert len(seen) >= 2, seen  # it changed on the page, which never reloaded
    assert tab.page.evaluate("() => window.loadedOnce") is True
    done = served.get(f"/jobs/{job['id']}")
    best = tab.page.locator(f"{_row(job['id'])} .best").text_content()
    assert done["status"] == "finished" and best != "—"
    tab.shoot("jobs")


def test_a_jobs_page_charts_every_measurement_and_the_best_schedule(
    served: Served, tab: Tab
) -> None:
    (job,) = served.get("/jobs", status="finished")["data"]
    measurements = served.get(f"/jobs/{job['id']}/measurements")["data"]
    best = served.get(f"/jobs/{job['id']}/best")
    tab.open(served.tokens[Role.CLIENT])
    tab.show(f"#/jobs/{job['id']}")

    page = tab.page
    expect(page.locator("pre.tvmscript")).to_have_text(best["tvmscript"])
    expect(page.locator("#job dl.facts dt")).to_have_count(10)
    assert "[object" not in page.inner_text("body")
    for chart in ("trials", "time"):
        markers = page.locator(f"svg[data-chart='{chart}'] g.measurements > *")
        expect(markers).to_have_count(len(measurements))
    expect(page.locator("svg[data-chart='trials'] g.best circle")).to_have_count(len(job["curve"]))
    expect(page.locator("svg[data-chart='time'] g.best circle")).to_have_count(len(job["curve"]))
    expect(page.locator("button.cancel")).to_be_disabled()
    # a worker timed its fastest candidates again beside the untuned program at its end
    finalists = served.get(f"/jobs/{job['id']}")["finalists"]
    assert len(finalists) >= 2 and sum(f["untuned"] for f in finalists) == 1
    expect(page.locator("#job .finalists tbody tr")).to_have_count(len(finalists))
    expect(page.locator("#job .finalists")).to_contain_text("untuned")

    page.click("button.copy")
    expect(page.locator("button.copy")).to_have_text("Copied")
    assert page.evaluate("() => navigator.clipboard.readText()") == best["tvmscript"]
    tab.shoot("job")


def test_cancel_on_the_page_cancels_the_job(served: Served, tab: Tab) -> None:
    job = served.submit({"name": "matmul", "params": {"M": 24, "N": 24, "K": 24}}, trials=500)
    tab.open(served.tokens[Role.CLIENT])
    tab.show(f"#/jobs/{job['id']}")
    tab.page.click("button.cancel")
    expect(tab.page.locator("#job h2 .status")).to_have_text("cancelled")
    assert served.get(f"/jobs/{job['id']}")["status"] == "cancelled"


def test_the_queue_and_the_cost_models_scores_over_time(served: Served, tab: Tab) -> None:
    scores = [0.62, 0.71, 0.78]
    with TuningLog(served.db_url) as log:  # a family no job of this module tunes for
        for pairwise in scores:
            shared = {"pairwise": pairwise, "top1": 0.5, "top5": 0.9}
            add_cost_model(log, "cuda:sm_90", {"shared": shared}, workloads=4)
    tab.open(served.tokens[Role.CLIENT])
    tab.show("#/queue")
    chart = tab.page.locator("svg[data-chart='scores cuda:sm_90']")
    expect(chart.locator("g.score-pairwise circle")).to_have_count(len(scores))
    expect(tab.page.locator("#queue table").first).to_contain_text("llvm")
    expect(tab.page.locator("#queue dl.facts dt")).to_have_count(5)
    tab.shoot("queue")


def test_text_from_the_log_is_shown_as_text(served: Served, tab: Tab) -> None:
    from autosched.admission import program_json
    from autosched.workloads import get_workload

    program = program_json(get_workload("matmul", {"M": 8, "N": 8, "K": 8}).func)
    # A target no worker of the module runs: its candidates wait for the worker the test plays.
    host = served.get("/workers")["data"][0]["target"]["target_json"]
    elsewhere = {**host, "num-cores": host.get("num-cores", 1) + 1}
    job = served.submit({"name": XSS, "ir_json": program}, target=elsewhere, trials=2)
    as_worker = {"Authorization": f"Bearer {served.tokens[Role.WORKER]}"}
    body = {"name": XSS, "target": elsewhere, "fingerprint": {"kind": "llvm", "cpu_model": XSS}}
    worker = served.api.post("/workers", json=body, headers=as_worker).json()["id"]
    leases: list[dict] = []

    def two_leased() -> bool:
        served.api.post(f"/workers/{worker}/heartbeat", headers=as_worker)
        response = served.api.post(f"/workers/{worker}/leases", json={"n": 2}, headers=as_worker)
        if response.status_code == 200:
            leases.append(response.json())
        return sum(len(lease["candidates"]) for lease in leases) >= 2

    wait_for(two_leased, "two candidates of the job", timeout=60)
    timed = {"samples": [1e-4], "verified": True}
    failed = {"error_kind": "run", "error_msg": XSS}
    for index, lease in enumerate(leases):
        results = [
            {"candidate_id": c["candidate_id"], **(timed if index == 0 and i == 0 else failed)}
            for i, c in enumerate(lease["candidates"])
        ]
        report = f"/workers/{worker}/leases/{lease['id']}/report"
        assert served.api.post(report, json={"results": results}, headers=as_worker).is_success

    tab.open(served.tokens[Role.CLIENT])
    page = tab.page
    expect(page.locator(f"{_row(job['id'])} td.workload")).to_contain_text(XSS)
    tab.show(f"#/jobs/{job['id']}")
    expect(page.locator("#job h2 .workload")).to_contain_text(XSS)
    best = served.get(f"/jobs/{job['id']}/best")
    expect(page.locator("pre.tvmscript")).to_have_text(best["tvmscript"])
    expect(page.locator("pre.message").first).to_have_text(XSS)
    tab.shoot("escaped")
    tab.show("#/workers")
    expect(page.locator(f"#workers tr[data-worker-id='{worker}'] td.name")).to_have_text(XSS)
    assert page.locator("img").count() == 0
    served.api.post(f"/jobs/{job['id']}/cancel")


def test_a_bad_token_shows_one_message_and_a_worker_token_is_refused(
    served: Served, tab: Tab
) -> None:
    tab.allowed.append(REFUSED)
    tab.open("not-a-token-of-this-server-0123456789")
    message = tab.page.locator("#login-error")
    expect(message).to_have_text("This token was refused: it is unknown or revoked.")
    expect(tab.page.locator("#view")).to_be_empty()
    expect(tab.page.locator("nav")).to_be_hidden()
    tab.shoot("bad-token")
    tab.page.fill("#login input[name=token]", served.tokens[Role.WORKER])
    tab.page.click("#login button[type=submit]")
    expect(message).to_have_text("This is a worker token: the dashboard needs a client token.")
    tab.page.fill("#login input[name=token]", served.tokens[Role.CLIENT])
    tab.page.click("#login button[type=submit]")
    expect(tab.page.locator("#jobs table")).to_be_visible()
    expect(message).to_be_hidden()
    expect(tab.page.locator("nav")).to_be_visible()


def test_a_server_without_auth_asks_for_no_token(tab: Tab, tmp_path: Path) -> None:
    port = free_port()
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'open.db'}", no_auth=True, port=port)
    server = uvicorn.Server(uvicorn.Config(create_app(settings), port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, "the server without auth", timeout=30)
        tab.base_url = f"http://127.0.0.1:{port}"
        tab.open(None)
        expect(tab.page.locator("#jobs table")).to_contain_text("No jobs yet")
        expect(tab.page.locator("#login")).to_be_hidden()
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_a_killed_workers_row_goes_stale(served: Served, tab: Tab) -> None:
    """Last: it kills the module's worker."""
    (worker,) = [
        w for w in served.get("/workers")["data"] if w["name"].endswith(f"-{served.worker.pid}")
    ]
    tab.open(served.tokens[Role.CLIENT])
    tab.show("#/workers")
    row = tab.page.locator(f"#workers tr[data-worker-id='{worker['id']}']")
    expect(row).to_have_class("alive", timeout=10_000)
    tab.shoot("workers")
    served.worker.kill()
    served.worker.wait()
    expect(row).to_have_class("stale", timeout=15_000)
    tab.shoot("workers-stale")


def test_a_jobs_finalists_show_with_their_intervals(served: Served, tab: Tab) -> None:
    # a job tuned on this machine, into the served log, times its finalists again at the end
    workload = get_workload("matmul", {"M": 32, "N": 32, "K": 32})
    target = host_target()
    measurer = LocalMeasurer(target, MeasureConfig(repeat=2, min_repeat_ms=2))
    options = TuneOptions(trials=4, batch_size=4, seed=5, finalists=3, rounds=6)
    with TuningLog(served.db_url) as log:
        try:
            report = tune(workload, target, log, measurer, options)
        finally:
            measurer.close()
    # a job of `tune` belongs to no client: an admin reads it
    admin = {"Authorization": f"Bearer {served.tokens[Role.ADMIN]}"}
    job = served.api.get(f"/jobs/{report.job_id}", headers=admin)
    assert job.status_code == 200, job.text
    served_finalists = job.json()["finalists"]
    assert len(served_finalists) == len(report.finalists) >= 2
    tab.open(served.tokens[Role.ADMIN])
    tab.show(f"#/jobs/{report.job_id}")
    rows = tab.page.locator("#job .finalists tbody tr")
    expect(rows).to_have_count(len(served_finalists))
    winner = served_finalists[0]
    expect(rows.first).to_contain_text(
        "untuned" if winner["untuned"] else winner["program_hash"][:12]
    )
    expect(rows.first).to_contain_text(f"({round(winner['confidence'] * 100)}%)")
    tab.shoot("finalists")
