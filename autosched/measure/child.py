"""Isolated measuring processes: one child process that serves requests with a time limit each.

A child that runs past its limit is killed; one that dies (segfault, abort, out of memory) is
noticed; either way the next request gets a fresh process. Children are also recycled after a fixed
number of requests so that leaks (loaded libraries, allocator growth) never accumulate.

Each child is forked by this process's fork server (``forkserver.py``), which has TVM loaded, and
runs in the sandbox (``sandbox.py``), in a scratch directory of its own, removed with it, under the
resource limits of ``serving.py``. Its replies are JSON (``replies.py``), never unpickled here.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
from multiprocessing.connection import Connection
from typing import Any

from autosched.measure import replies, sandbox
from autosched.measure.forkserver import ForkedChild, ForkServerLost, fork_server
from autosched.measure.serving import Request, ResourceLimits

STARTUP_TIMEOUT_SECS = 120.0


class ChildTimeout(Exception):
    """The child ran past the request's time limit and was killed."""


class ChildDied(Exception):
    """The child process died while serving a request."""


class RequestFailed(Exception):
    """The request raised inside the child; the message is the child's error text."""


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "was lost with its fork server"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


class ChildProcess:
    """A child process that serves one request at a time, replaced whenever it is lost.

    `start` asks for the process without waiting for it, so several children start at once while
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
        self._process: ForkedChild | None = None
        self._conn: Connection | None = None
        self._ready = False
        self._served = 0

    def start(self) -> None:
        """Spawn the child unless one is alive; does not wait for it to be ready."""
        if self._process is not None and self._alive(self._process):
            return
        self._kill()
        self._scratch = str(sandbox.scratch_dir("autosched-child-"))
        parent_socket, child_socket = socket.socketpair()
        with parent_socket, child_socket:
            self._process = fork_server().spawn(
                child_socket, self._scratch, sandbox.child_environment(self._env), self._limits
            )
            self._conn = Connection(parent_socket.detach())
        self._ready, self._served = False, 0

    @staticmethod
    def _alive(process: ForkedChild) -> bool:
        try:
            return process.poll() is None
        except ForkServerLost:
            return False

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
            status, value = replies.decode(
                conn.recv_bytes(replies.MAX_REPLY_BYTES), replies.result_type(request)
            )
        except (EOFError, ConnectionResetError, OSError):
            exitcode = self._kill()
            raise ChildDied(f"the measuring process {_describe_exit(exitcode)}") from None
        except replies.BadReply as error:
            self._kill()
            raise ChildDied(str(error)) from None
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
        with contextlib.suppress(subprocess.TimeoutExpired, ForkServerLost):
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
            self._conn.recv_bytes(replies.MAX_REPLY_BYTES)
        except (EOFError, ConnectionResetError, OSError):
            exitcode = self._kill()
            raise ChildDied(f"the measuring process {_describe_exit(exitcode)} at start") from None
        self._ready = True
        return self._conn

    def _kill(self) -> int | None:
        """Make sure the child is gone; returns its exit code (negative: killed by that signal;
        None: its fork server died with it)."""
        exitcode = None
        if self._process is not None:
            with contextlib.suppress(ForkServerLost):
                self._process.kill()
                exitcode = self._process.wait()
        if self._conn is not None:
            self._conn.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
        self._process, self._conn, self._ready, self._scratch = None, None, False, None
        return exitcode
