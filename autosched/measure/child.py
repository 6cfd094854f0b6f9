"""Isolated measuring processes: one child process that serves requests with a time limit each.

A child that runs past its limit is killed; one that dies (segfault, abort, out of memory) is
noticed; either way the next request gets a fresh process. Children are also recycled after a fixed
number of requests so that leaks (loaded libraries, allocator growth) never accumulate.

Each child runs in a scratch directory of its own, removed with it, and under resource limits it
sets itself before loading TVM: its address space, the CPU time of each request (renewed before
every request, so a request that spins is killed by the kernel even if the parent missed it), and
its open files.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol

STARTUP_TIMEOUT_SECS = 120.0
_ERROR_TEXT_LIMIT = 2000


class Request(Protocol):
    """A picklable unit of work for a child process."""

    def execute(self) -> Any: ...


class ChildTimeout(Exception):
    """The child ran past the request's time limit and was killed."""


class ChildDied(Exception):
    """The child process died while serving a request."""


class RequestFailed(Exception):
    """The request raised inside the child; the message is the child's error text."""


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def error_text(error: BaseException) -> str:
    """An exception as stored text: its type and message, trimmed to a bounded length."""
    text = f"{type(error).__name__}: {error}".strip()
    return text if len(text) <= _ERROR_TEXT_LIMIT else text[: _ERROR_TEXT_LIMIT - 3] + "..."


@dataclass(frozen=True)
class ResourceLimits:
    """What a child may use: ``address_space_bytes`` of virtual memory (None: no limit, as CUDA
    needs, since its driver reserves vast address ranges), ``cpu_secs_per_request`` of CPU time
    per request, and ``open_files`` descriptors."""

    address_space_bytes: int | None = 16 << 30
    cpu_secs_per_request: int = 600
    open_files: int = 1024

    def to_argv(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_argv(cls, text: str) -> ResourceLimits:
        return cls(**json.loads(text))


def _lower_limit(kind: int, value: int) -> None:
    """Set the soft and hard limit ``kind`` to ``value``, never above the current hard limit."""
    _soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, value if hard == resource.RLIM_INFINITY else hard))


def _cpu_budget(secs: int) -> None:
    """Let the next request use ``secs`` more seconds of CPU time; past them, SIGXCPU ends the
    child."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = int(usage.ru_utime + usage.ru_stime) + 1
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = used + secs if hard == resource.RLIM_INFINITY else min(used + secs, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def serve(conn: Connection, limits: ResourceLimits) -> None:
    """The child's main loop: execute each request, send back ("ok", value) or ("error", text)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when measuring stops
    if limits.address_space_bytes is not None:
        _lower_limit(resource.RLIMIT_AS, limits.address_space_bytes)
    _lower_limit(resource.RLIMIT_NOFILE, limits.open_files)
    import tvm  # noqa: F401  (loaded before "ready" so that start-up is not charged to a request)

    conn.send(("ready", None))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        _cpu_budget(limits.cpu_secs_per_request)
        try:
            reply = ("ok", request.execute())
        except Exception as error:  # every failure of a candidate is data for the parent
            reply = ("error", error_text(error))
        conn.send(reply)


class ChildProcess:
    """A child process that serves one request at a time, replaced whenever it is lost.

    `start` spawns the process without waiting for it, so several children load TVM at once while
    the caller does other work; `call` waits until the child is ready. Not thread safe: use one
    ChildProcess per thread.
    """

    def __init__(
        self,
        *,
        env: dict[str, str] | None = None,
        max_requests: int = 64,
        limits: ResourceLimits | None = None,
    ) -> None:
        self._env = dict(env or {})
        self._max_requests = max_requests
        self._limits = limits or ResourceLimits()
        self._scratch: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._ready = False
        self._served = 0

    def start(self) -> None:
        """Spawn the child unless one is alive; does not wait for it to be ready."""
        if self._process is not None and self._process.poll() is None:
            return
        self._kill()
        self._scratch = tempfile.mkdtemp(prefix="autosched-child-")
        parent_socket, child_socket = socket.socketpair()
        with parent_socket, child_socket:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "autosched.measuring",
                    str(child_socket.fileno()),
                    self._limits.to_argv(),
                ],
                pass_fds=[child_socket.fileno()],
                env={**os.environ, **self._env},
                stdin=subprocess.DEVNULL,
                cwd=self._scratch,
            )
            self._conn = Connection(parent_socket.detach())
        self._ready, self._served = False, 0

    def call(self, request: Request, timeout_secs: float) -> Any:
        """Execute ``request`` in the child and return its value.

        Raises:
            ChildTimeout: no reply within ``timeout_secs``; the child was killed.
            ChildDied: the child died while executing the request (or could not start).
            RequestFailed: the request raised; the child lives on.
        """
        conn = self._ready_connection()
        conn.send(request)
        if not conn.poll(timeout_secs):
            self._kill()
            raise ChildTimeout(f"no result after {timeout_secs:g} s; the process was killed")
        try:
            status, value = conn.recv()
        except (EOFError, ConnectionResetError, OSError):
            exitcode = self._kill()
            raise ChildDied(f"the measuring process {_describe_exit(exitcode)}") from None
        self._served += 1
        if self._served >= self._max_requests:
            self.close()
            self.start()
        if status == "error":
            raise RequestFailed(value)
        return value

    def close(self) -> None:
        """Ask the child to exit; kill it if it does not."""
        if self._process is None or self._conn is None:
            return
        with contextlib.suppress(BrokenPipeError, OSError):
            self._conn.send(None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=5)
        self._kill()

    def _ready_connection(self) -> Connection:
        self.start()
        assert self._conn is not None
        if self._ready:
            return self._conn
        if not self._conn.poll(STARTUP_TIMEOUT_SECS):
            self._kill()
            raise ChildDied(f"the measuring process did not start in {STARTUP_TIMEOUT_SECS:g} s")
        try:
            self._conn.recv()
        except (EOFError, ConnectionResetError, OSError):
            exitcode = self._kill()
            raise ChildDied(f"the measuring process {_describe_exit(exitcode)} at start") from None
        self._ready = True
        return self._conn

    def _kill(self) -> int | None:
        """Make sure the child is gone; returns its exit code (negative: killed by that signal)."""
        exitcode = None
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            exitcode = self._process.wait()
        if self._conn is not None:
            self._conn.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
        self._process, self._conn, self._ready, self._scratch = None, None, False, None
        return exitcode
