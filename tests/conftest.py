"""Shared fixtures: ``db_url`` runs a test once on SQLite and once on PostgreSQL; ``log`` is the
tuning log on it; ``cli`` runs the command line in the test's process. Plain helpers live in
``helpers.py``. The files whose tests take longest are handed to the suite's workers first.

Where bubblewrap cannot sandbox measuring processes here, the suite runs the service unsandboxed
(``AUTOSCHED_UNSAFE_NO_SANDBOX``), says so in its header, and the sandbox's own tests skip.

The PostgreSQL variant gets a fresh database per test on the server at ``$AUTOSCHED_TEST_PG``
(default ``postgresql+psycopg://root@127.0.0.1:5432/test``) and is skipped if that is unreachable.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import Cli, CliResult
from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from autosched.cli.main import main
from autosched.log import TuningLog
from autosched.measure import sandbox

PG_ADMIN_URL = os.environ.get("AUTOSCHED_TEST_PG", "postgresql+psycopg://root@127.0.0.1:5432/test")

_WORKER_CPUS = os.sched_getaffinity(0)
"""The CPUs this test process may run on, read before any TVM program ran in it."""

LONGEST_FILES = (
    "test_service_e2e.py",
    "test_conformance.py",
    "test_cli.py",
    "test_model_tuning.py",
    "test_quickstart.py",
    "test_budget.py",
    "test_shared_model.py",
    "test_winograd.py",
    "test_bench_corpus.py",
    "test_runtime.py",
    "test_model_service.py",
)
"""The files whose tests take a minute or more in all, longest first. The workers take whole
files (``--dist loadfile``) in collection order; xdist would reorder them by their number of
tests, which puts files of a few long tests last, where one worker runs on alone."""


def pytest_configure(config: pytest.Config) -> None:
    if not sandbox.current().contained:
        os.environ[sandbox.UNSAFE_VARIABLE] = "1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first, in ``LONGEST_FILES``'s order; then the others, those of the most
    tests first (xdist's order, which ``--no-loadscope-reorder`` turns off)."""
    rank = {name: position for position, name in enumerate(LONGEST_FILES)}
    tests_in = Counter(item.path for item in items)
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), -tests_in[item.path]))


def pytest_report_header(config: pytest.Config) -> str:
    if sandbox.current().contained:
        return f"sandbox: bubblewrap, measuring processes run as uid {sandbox.current().uid}"
    return "sandbox: NONE (install bubblewrap): the service runs unsandboxed, its tests skip"


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[Engine]:
    """An AUTOCOMMIT engine on the PostgreSQL test server, for creating and dropping databases."""
    engine = create_engine(
        PG_ADMIN_URL,
        isolation_level="AUTOCOMMIT",
        poolclass=NullPool,
        connect_args={"connect_timeout": 5},
    )
    try:
        with engine.connect():
            pass
    except OperationalError as exc:
        engine.dispose()
        reason = " ".join(str(exc.orig).split())
        pytest.skip(f"PostgreSQL test server {PG_ADMIN_URL} is unreachable: {reason}")
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database: a SQLite file in ``tmp_path`` or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'autosched.db'}"
        return
    admin: Engine = request.getfixturevalue("pg_admin")
    name = f"autosched_test_{uuid.uuid4().hex[:16]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def log(db_url: str) -> Iterator[TuningLog]:
    """The tuning log on ``db_url``, closed after the test."""
    with TuningLog(db_url) as opened:
        yield opened


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Cli:
    """Runs `autosched ARGS` in this process, in ``cwd`` (default ``tmp_path``), with no
    ``AUTOSCHED_*`` variable set; returns its exit code and output. Tests of what a real process
    does (signals, a server) spawn one with ``helpers.autosched`` instead."""
    for name in [name for name in os.environ if name.startswith("AUTOSCHED_")]:
        if name != sandbox.UNSAFE_VARIABLE:
            monkeypatch.delenv(name)

    def run(*args: str, cwd: Path = tmp_path) -> CliResult:
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "argv", ["autosched", *args])
        capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            main()
        out, err = capsys.readouterr()
        return CliResult(int(exited.value.code or 0), out, err)

    return run


@pytest.fixture(autouse=True)
def _on_every_cpu() -> None:
    """Each test starts on every CPU of this process: TVM's pool pins the thread that ran a
    parallel program to one CPU, and every process a later test starts from that thread (a
    tuning, a server, a worker) would inherit the pin and run on one CPU, its TVM pool cut to one
    thread."""
    os.sched_setaffinity(0, _WORKER_CPUS)


@pytest.fixture(autouse=True)
def _children_import_test_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measuring child processes can unpickle requests defined in tests/ (see tests/faults.py)."""
    tests_dir = str(Path(__file__).parent)
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", tests_dir if not path else f"{tests_dir}{os.pathsep}{path}")
