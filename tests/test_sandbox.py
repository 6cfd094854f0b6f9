"""The sandbox of measuring processes, attacked from inside as a program that got past admission
would: run a command, read secrets from the environment and files, write outside its directory,
open a socket, answer with a pickle; and a file named like the standard library where autosched
runs. Each attack runs in a real measuring child (``tests/attacks.py``)."""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from attacks import (
    Connect,
    LoadPlantedLibrary,
    PickleReply,
    ReadEnvironment,
    ReadFile,
    RunCommand,
    WriteFile,
)
from helpers import autosched

from autosched.measure import sandbox
from autosched.measure.child import ChildDied, ChildProcess

pytestmark = pytest.mark.slow

SECRET = "worker-token-that-must-not-leak-0123456789"
contained = pytest.mark.skipif(
    not sandbox.current().contained, reason="bubblewrap is not installed or does not start here"
)


@pytest.fixture
def child(monkeypatch: pytest.MonkeyPatch) -> Iterator[ChildProcess]:
    """A measuring child started while this process holds a worker's secrets."""
    monkeypatch.setenv("AUTOSCHED_WORKER_TOKEN", SECRET)
    monkeypatch.setenv("AUTOSCHED_DB", f"postgresql://autosched:{SECRET}@db/autosched")
    process = ChildProcess()
    try:
        yield process
    finally:
        process.close()


def test_a_measuring_process_sees_no_secret_of_its_parents_environment(child) -> None:
    seen = child.call(ReadEnvironment(), 30)
    assert SECRET not in seen
    assert "AUTOSCHED_DB" not in seen


@contained
def test_a_command_run_by_a_measured_program_holds_nothing_and_changes_nothing(
    child, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    output = child.call(RunCommand(f"env; id -u; echo x > {marker}; ls /root /home"), 30)
    assert SECRET not in output
    assert not marker.exists()


@contained
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the planted code is x86-64 assembly")
def test_code_planted_in_a_library_runs_as_it_loads_but_holds_no_secret(
    child, tmp_path: Path
) -> None:
    stolen = tmp_path / "stolen"
    command = (
        f"(env; cat /proc/[0-9]*/environ; ls /root) > seen.txt 2>&1; "
        f"echo $AUTOSCHED_WORKER_TOKEN > {stolen}"
    )
    seen = child.call(LoadPlantedLibrary(command), 120)
    assert "PATH=" in seen  # the command ran
    assert SECRET not in seen and "AUTOSCHED_DB" not in seen
    assert not stolen.exists()


@contained
def test_a_measured_program_cannot_read_the_hosts_files(child, tmp_path: Path) -> None:
    secret_file = tmp_path / "worker-token"
    secret_file.write_text(SECRET)
    for path in [secret_file, Path("/etc/shadow"), Path.cwd() / "pyproject.toml"]:
        assert child.call(ReadFile(str(path)), 30).startswith("refused"), path


@contained
def test_a_measured_program_writes_nowhere_but_its_scratch_directory(child, tmp_path: Path) -> None:
    outside = [tmp_path / "planted.py", Path(sandbox.__file__).with_name("planted.py")]
    for path in outside:
        child.call(WriteFile(str(path)), 30)
        assert not path.exists(), path
    assert child.call(WriteFile("planted.txt"), 30) == "written"  # its own directory


@contained
def test_a_measured_program_cannot_reach_the_network(child) -> None:
    accepted = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)
        port = listener.getsockname()[1]

        def accept() -> None:
            with contextlib.suppress(OSError):
                accepted.append(listener.accept())

        waiter = threading.Thread(target=accept)
        waiter.start()
        outcome = child.call(Connect("127.0.0.1", port), 30)
        waiter.join()
    assert outcome.startswith("refused")
    assert accepted == []


def test_a_measuring_process_that_answers_with_a_pickle_runs_nothing_here(
    child, tmp_path: Path
) -> None:
    marker = tmp_path / "parent-pwned"
    with pytest.raises(ChildDied, match="malformed reply"):
        child.call(PickleReply(f"touch {marker}"), 30)
    assert not marker.exists()


def test_a_file_named_like_the_standard_library_where_tune_runs_changes_nothing(
    tmp_path: Path,
) -> None:
    for name in ["bisect", "random", "json"]:
        (tmp_path / f"{name}.py").write_text("raise SystemExit('shadowed the standard library')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [str(Path(sys.executable).with_name("autosched")), "tune", "matmul", "--json"]
    command += ["-p", "M=32", "-p", "N=32", "-p", "K=32", "--trials", "2", "--finalists", "0"]
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
    )  # the console script, as a user runs it: its own directory first on the path
    assert result.returncode == 0, result.stderr
    assert '"failed": 0' in result.stdout


def test_a_worker_refuses_to_measure_without_a_sandbox_unless_told(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != sandbox.UNSAFE_VARIABLE}
    env["PATH"] = str(tmp_path)  # no bwrap on it
    refused = autosched("worker", "--server", "http://127.0.0.1:9", cwd=tmp_path, env=env,
                        check=False)  # fmt: skip
    assert refused.returncode == 2
    assert "needs a sandbox" in refused.stderr and "--unsafe-no-sandbox" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
