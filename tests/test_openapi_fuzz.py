"""Schemathesis fuzzes a served app against its own OpenAPI document, with a client and with a
worker token: no server error, and every answer (status, headers, body) as documented."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from helpers import free_port, wait_for

from autosched.log import TuningLog
from autosched.log.tokens import Role, TokenStore

pytestmark = pytest.mark.slow  # a server process and about two thousand requests

FUZZED_ROLES = (Role.CLIENT, Role.WORKER)

# Left out, with reasons: positive_data_acceptance, because TVM checks targets and programs past
# what any schema can say; allow_header_conformance, because Starlette's 405 names the methods
# of one route, not of every route on a path.
CHECKS = [
    "--checks",
    "all",
    "--exclude-checks",
    "positive_data_acceptance,allow_header_conformance",
    # Its body is a gzip file, which Schemathesis cannot generate; tests/test_log_api.py and
    # tests/test_portable.py send it corrupt, truncated, hostile and oversized files instead.
    "--exclude-path",
    "/api/v1/log/import",
]


def test_the_api_answers_fuzzed_requests_as_documented(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'fuzz.db'}"
    with TuningLog(db) as log:
        store = TokenStore(log)
        tokens = {role.value: store.create(role, f"fuzz {role.value}") for role in FUZZED_ROLES}
    for role in tokens:
        (tmp_path / role).mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "autosched", "serve", "--db", db, "--port", str(port)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    runs: dict[str, subprocess.Popen[str]] = {}
    try:
        wait_for(lambda: _answers(url), "the server to answer", timeout=120)
        # The two roles fuzz the one server at once: each run waits on answers most of its time.
        for role, token in tokens.items():
            runs[role] = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "st"),
                    "run",
                    f"{url}/openapi.json",
                    "-H",
                    f"Authorization: Bearer {token}",
                    *CHECKS,
                    "--max-examples",
                    "10",
                    "--seed",
                    "1",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=tmp_path / role,  # where it keeps its cache
            )
        for role, run in runs.items():
            output, _ = run.communicate(timeout=600)
            assert run.returncode == 0, (role, output[-4000:])
            assert " passed" in output and "failure" not in output.lower(), role
    finally:
        for run in runs.values():
            if run.poll() is None:
                run.kill()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
