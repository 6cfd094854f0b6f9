"""The portable log over the service: export and import are for admin tokens only (clients and
workers get 403), a refused upload is a one-line 422 that leaves nothing behind, and the best
schedule of a workload falls back to the nearest hardware on request, saying which level."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_fallback import ALDERLAKE, ELSEWHERE, ZNVER3_8, record, vadd
from test_portable import MACHINE_A, fill, snapshot

from autosched.log import TuningLog
from autosched.log.tokens import Role, TokenStore
from autosched.server.api.app import create_app
from autosched.server.settings import Settings
from autosched.target import target_key

EXPORT = "/api/v1/log/export"
IMPORT = "/api/v1/log/import"


@pytest.fixture
def served(db_url: str) -> Iterator[tuple[TestClient, dict[Role, dict[str, str]], TuningLog]]:
    """The app on ``db_url``, a bearer header of every role, and the app's log."""
    app = create_app(Settings(db_url=db_url))
    with TestClient(app) as http:
        store: TokenStore = app.state.stores.tokens
        headers = {
            role: {"Authorization": f"Bearer {store.create(role, role.value)}"} for role in Role
        }
        yield http, headers, app.state.stores.log


def test_only_admins_export_and_import_the_log(
    served: tuple[TestClient, dict[Role, dict[str, str]], TuningLog], tmp_path: Path
) -> None:
    http, headers, log = served
    fill(log, MACHINE_A, programs=range(3), base=1e-4)
    for role in (Role.CLIENT, Role.WORKER):
        assert http.get(EXPORT, headers=headers[role]).status_code == 403
        refused = http.post(IMPORT, headers=headers[role], content=b"x")
        assert refused.status_code == 403 and "cannot use this route" in refused.json()["detail"]
    assert http.get(EXPORT).status_code == 401
    exported = http.get(EXPORT, headers=headers[Role.ADMIN])
    assert exported.status_code == 200, exported.text
    assert exported.headers["content-type"] == "application/gzip"
    lines = [json.loads(line) for line in gzip.decompress(exported.content).splitlines()]
    assert lines[-1] == {
        "type": "end",
        "counts": {
            "workload": 1,
            "target": 1,
            "device": 1,
            "measurement": 3,
            "best": 1,
            "final": 0,
        },
    }
    merged = http.post(IMPORT, headers=headers[Role.ADMIN], content=exported.content)
    assert merged.status_code == 200, merged.text
    assert merged.json()["measurements"] == {"new": 0, "existing": 3}
    before = snapshot(log)
    broken = http.post(IMPORT, headers=headers[Role.ADMIN], content=exported.content[:200])
    assert broken.status_code == 422 and "the uploaded file: the file is corrupt" in broken.text
    assert snapshot(log) == before
    selected = http.get(EXPORT, headers=headers[Role.ADMIN], params={"workload": "nope"})
    assert selected.status_code == 422 and "nothing to export" in selected.json()["detail"]


def test_best_falls_back_to_the_nearest_hardware_on_request(
    served: tuple[TestClient, dict[Role, dict[str, str]], TuningLog],
) -> None:
    http, headers, log = served
    workload = vadd()
    record(log, workload, ZNVER3_8, ELSEWHERE, lanes=8, secs=4e-5)
    path = f"/api/v1/workloads/{workload.key}/best"
    asked = {"target": json.dumps(ALDERLAKE)}
    assert http.get(path, headers=headers[Role.CLIENT], params=asked).status_code == 404
    found = http.get(path, headers=headers[Role.CLIENT], params={**asked, "fallback": "true"})
    assert found.status_code == 200, found.text
    body = found.json()
    assert body["level"] == "isa" and body["target"]["key"] == target_key(ZNVER3_8)
    exact = {"target": target_key(ZNVER3_8), "fallback": "true"}
    assert http.get(path, headers=headers[Role.CLIENT], params=exact).json()["level"] == "exact"
