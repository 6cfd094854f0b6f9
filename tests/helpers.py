"""Helpers shared by the tests: a free loopback port, waiting for a condition, running the
`autosched` command line in a process of its own (``conftest.cli`` runs it in-process), the
service served in one, threads released at once, process pool children started as autosched's
processes are, this machine's target on one core, a job (of `autosched tune` or of the service),
a measurement and a cost model stored in a tuning log, and the operators a Relax module calls."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.synchronize import Barrier as BarrierType
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np
import psutil
import pytest
import tvm
from tvm import relax

from autosched.log import TuningLog
from autosched.log.costmodels import CostModelStore
from autosched.log.jobs import JobStore
from autosched.records import MeasureResult
from autosched.search.registry import SearchJob
from autosched.search.session import SearchSession
from autosched.target import host_target, parse_target, to_tvm_target
from autosched.torch_guard import keep_torch_out
from autosched.workload import Workload

T = TypeVar("T")

# Tests whose subject is storage, the queue or the service's fault handling run on both databases
# (the ``db_url`` fixture); those whose subject is search or measurement need one.
on_sqlite = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
on_postgresql = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


@dataclass
class CliResult:
    """How a command of the `autosched` CLI ended, and what it printed."""

    code: int
    out: str
    err: str


Cli = Callable[..., CliResult]
"""The ``cli`` fixture: ``cli(*args, cwd=...)`` runs a command in the test's process."""


def one_core_target() -> dict:
    """This machine's target with one core, for a test that asks tuning to beat the untuned program.

    The suite runs a test file on every core; a candidate timed on two threads shares a core with
    another file's builds and can lose to the single-threaded untuned program by preemption (its
    threads wait on each other at every barrier), whatever its schedule.
    """
    return {**host_target(), "num-cores": 1}


def start_job(
    log: TuningLog,
    workload_id: int,
    target_id: int,
    trials: int,
    *,
    batch_size: int | None = None,
    strategy: str = "random",
    seed: int | None = 0,
) -> int:
    """A job of ``trials`` candidates started on ``log`` as `autosched tune` starts one, measuring
    ``batch_size`` a batch (all of them at once by default); returns its id."""
    return JobStore(log).start_job(
        workload_id=workload_id,
        target_id=target_id,
        trials=trials,
        batch_size=trials if batch_size is None else batch_size,
        strategy=strategy,
        seed=seed,
    )


def submit_job(
    jobs: JobStore,
    workload: Workload,
    target: dict,
    trials: int,
    *,
    batch_size: int | None = None,
    strategy: str = "evolutionary",
    seed: int | None = 0,
    **options: Any,
) -> int:
    """A service job of ``trials`` candidates queued on ``jobs`` as a client submits one,
    measuring ``batch_size`` a batch (all of them at once by default); ``options`` are the rest of
    `JobStore.submit`'s (finalists, rounds, owner). Returns its id."""
    batch_size = trials if batch_size is None else batch_size
    search = {"trials": trials, "batch_size": batch_size, "strategy": strategy, "seed": seed}
    return jobs.submit(workload, target, **search, **options)


def timed(secs: float) -> MeasureResult:
    """A measurement of two samples of ``secs`` each, taken now."""
    now = datetime.now(UTC)
    return MeasureResult(samples=(secs, secs), started_at=now, finished_at=now)


def add_cost_model(
    log: TuningLog, family: str, scores: dict[str, Any] | None, *, workloads: int = 3
) -> None:
    """A made-up version of ``family``'s shared cost model, trained on 100 rows of ``workloads``
    workloads and scored ``scores``: what is listed of a model, its booster no model."""
    CostModelStore(log).add(
        family=family,
        objective="pairwise",
        features="per-store-164",
        booster=b"not a model",
        trained_on=100,
        workloads=workloads,
        last_measurement_id=0,
        scores=scores,
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def host_pid(pid: int) -> int:
    """The pid, as this process sees it, of a descendant known inside its sandbox's PID namespace
    as ``pid`` (a measuring process, a fork server); ``pid`` itself where none is."""
    for process in psutil.Process().children(recursive=True):
        try:
            with open(f"/proc/{process.pid}/status") as status:
                numbers = next(line for line in status if line.startswith("NSpid:")).split()
        except (FileNotFoundError, StopIteration):
            continue
        if int(numbers[-1]) == pid:
            return process.pid
    return pid


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 300) -> None:
    """Poll ``condition`` until it holds; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def autosched(
    *args: str, cwd: Path, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m autosched ARGS` in ``cwd``; with ``check``, a non-zero exit fails the test."""
    result = subprocess.run(
        [sys.executable, "-m", "autosched", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"autosched {' '.join(args)} failed:\n{result.stderr}")
    return result


@contextmanager
def served(tmp_path: Path, port: int, *, capture: bool = False) -> Iterator[subprocess.Popen[str]]:
    """`autosched serve --no-auth` on ``port`` over a new SQLite log in ``tmp_path``, given once
    it answers /healthz (AssertionError where it dies first or takes over 120 s), killed on leaving
    where it still runs. With ``capture`` its output can be read from its stdout."""
    env = {**os.environ, "AUTOSCHED_DB": f"sqlite:///{tmp_path / 'served.db'}"}
    process = subprocess.Popen(
        [sys.executable, "-m", "autosched", "serve", "--no-auth", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
        stderr=subprocess.STDOUT if capture else subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, process.stdout.read() if process.stdout else "no serve"
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "serve did not answer within 120 s"
                time.sleep(0.2)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def start_like_autosched(barrier: BarrierType) -> None:
    """A process pool's initializer: keep PyTorch out of the child, as autosched's entry points
    do (TVM would import it: seconds per process), then wait for the other children."""
    keep_torch_out()
    barrier.wait(30)


def run_at_once(count: int, task: Callable[[], T]) -> list[T]:
    """Run ``task`` in ``count`` threads released together."""
    barrier = threading.Barrier(count)

    def synchronized() -> T:
        barrier.wait()
        return task()

    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(synchronized) for _ in range(count)]
        return [future.result() for future in futures]


def relax_calls(mod: tvm.IRModule) -> list[relax.Call]:
    """The operator calls of ``mod``'s ``main``, in post order (an argument before its call)."""
    calls: list[relax.Call] = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            calls.append(expr)

    relax.analysis.post_order_visit(mod["main"], visit)
    return calls


def relax_ops(mod: tvm.IRModule) -> list[str]:
    """The names of the operators ``mod``'s ``main`` calls, in post order, ``relax.`` left off."""
    return [call.op.name.removeprefix("relax.") for call in relax_calls(mod)]


def run_relax(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    """``mod``'s ``main`` of one input and one output, compiled for this CPU and run on ``x``."""
    executable = tvm.compile(mod, target=to_tvm_target(parse_target(None)))
    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def count_session_starts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, SearchJob]]:
    """The search sessions started from now on (``autosched.sessions`` starts them), each as its
    strategy and job, in order; the sessions start as they would."""
    from autosched import sessions
    from autosched.search.session import start_session

    started: list[tuple[str, SearchJob]] = []

    def counting_start(strategy: str, job: SearchJob) -> SearchSession:
        started.append((strategy, job))
        return start_session(strategy, job)

    monkeypatch.setattr(sessions, "start_session", counting_start)
    return started
