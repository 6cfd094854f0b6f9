"""The fork server: one process per measuring parent that has loaded TVM once, and forks every
measuring child from itself.

Loading TVM takes about 1.5 s of CPU; a child forked from a process that has loaded it is ready in
milliseconds. So a measurer's builders and runner, a child replaced after a crash or a timeout,
and a child recycled after its quota of requests all start at once, instead of each loading TVM
again. The fork server never builds or runs anything itself (no thread pool, no CUDA context),
so forking it is safe.

Protocol, over a ``SOCK_SEQPACKET`` socket pair (one message per packet):

* parent -> server: ``{"cwd", "env", "limits"}`` with the child's end of its connection attached
  as a file descriptor: fork a child that serves requests on it.
* server -> parent: ``{"spawned": pid}`` with a pidfd of the child attached, in the order of the
  requests; ``{"exited": pid, "code": code}`` once the server has reaped it (``code`` as
  ``subprocess`` gives it: negative for the signal that killed it).

The server runs in the sandbox (``sandbox.py``), and its children with it. The parent signals and
watches a child through its pidfd, which names that process and no other
even after its pid is reused; the exit code comes from the server, the child's real parent. The
server ends when the parent does, killing the children it still has. Linux only (pidfds).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from collections import deque
from dataclasses import asdict
from multiprocessing.connection import Connection

from autosched.measure import sandbox
from autosched.measure.serving import ResourceLimits, serve

STARTUP_TIMEOUT_SECS = 120.0
_PACKET_BYTES = 1 << 20  # a spawn request carries the environment: far below this
_REAP_INTERVAL_SECS = 0.05


class ForkServerLost(Exception):
    """The fork server could not be started, or died."""


class ForkedChild:
    """A measuring child forked by the fork server: ``poll``, ``kill`` and ``wait`` as a
    ``subprocess.Popen``'s (exit codes negative for the signal that killed it), except that they
    raise ForkServerLost for a child whose server died before telling which process it forked,
    or how it exited."""

    def __init__(self, server: _ServerProcess) -> None:
        self._server = server
        self.pid: int | None = None
        self._pidfd: int | None = None
        self._lost = False  # the server died before telling which process it forked
        self._exited = False
        self.returncode: int | None = None  # None once exited: its server died before telling

    def _spawned(self, pid: int, pidfd: int) -> None:
        self.pid, self._pidfd = pid, pidfd

    def poll(self) -> int | None:
        """The exit code once the child has exited, else None."""
        return self.returncode if self._settled(0.0) else None

    def kill(self) -> None:
        """SIGKILL the child unless it has exited."""
        if self._exited:
            return
        self._resolve()
        assert self._pidfd is not None
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to exit and return its exit code.

        Raises:
            subprocess.TimeoutExpired: it is still running after ``timeout`` seconds.
        """
        if not self._settled(timeout):
            raise subprocess.TimeoutExpired(f"measuring child {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def _settled(self, timeout: float | None) -> bool:
        """Whether the child has exited, waiting up to ``timeout`` for it to.

        Raises:
            ForkServerLost: it exited, or may have, but its server died before saying how.
        """
        if not self._exited:
            self._resolve()
            assert self._pidfd is not None and self.pid is not None
            if not select.select([self._pidfd], [], [], timeout)[0]:
                return False
            self.returncode = self._server.exit_code(self.pid, STARTUP_TIMEOUT_SECS)
            self._exited = True
            self._close_pidfd()
        if self.returncode is None:
            raise ForkServerLost("the measuring process was lost with its fork server")
        return True

    def _resolve(self) -> None:
        """Learn which process the server forked.

        Raises:
            ForkServerLost: the server died before saying.
        """
        self._server.resolve(self, STARTUP_TIMEOUT_SECS)
        if self._lost:
            self._exited = True
            raise ForkServerLost("the fork server died before the measuring process started")

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def __del__(self) -> None:
        self._close_pidfd()


class _ServerProcess:
    """One fork server process, what it has yet to say (the children asked for, in order) and
    the exit codes it has said."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        parent_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with server_end:
            fd = str(server_end.fileno())
            self._process = subprocess.Popen(
                sandbox.current().server_command("autosched.measuring", fd),
                pass_fds=[server_end.fileno()],
                stdin=subprocess.DEVNULL,
                cwd=sandbox.scratch_root(),
                env=sandbox.child_environment({}),
            )
        self._control: socket.socket | None = parent_end
        self._pending: deque[ForkedChild] = deque()
        self._exits: dict[int, int] = {}

    @property
    def alive(self) -> bool:
        return self._control is not None and self._process.poll() is None

    def spawn(self, connection: socket.socket, request: bytes) -> ForkedChild:
        """Send a spawn request (raises OSError if the server is gone)."""
        child = ForkedChild(self)
        with self._lock:
            if self._control is None:
                raise OSError("the fork server is gone")
            socket.send_fds(self._control, [request], [connection.fileno()])
            self._pending.append(child)
        return child

    def resolve(self, child: ForkedChild, timeout: float) -> None:
        """Read the server's messages until it has said which process ``child`` is."""
        with self._lock:
            while child in self._pending:
                if not self._receive(timeout):
                    return

    def exit_code(self, pid: int, timeout: float) -> int | None:
        """The exit code of ``pid``, which has exited, once the server has reaped it; None if
        the server is gone."""
        with self._lock:
            while pid not in self._exits:
                if not self._receive(timeout):
                    return None
            return self._exits.pop(pid)

    def _receive(self, timeout: float) -> bool:
        """Take one message from the server; False (and the server lost) if it is gone or says
        nothing within ``timeout``."""
        control = self._control
        if control is None or not select.select([control], [], [], timeout)[0]:
            self.lose()
            return False
        try:
            packet, fds, _flags, _address = socket.recv_fds(control, _PACKET_BYTES, 1)
        except OSError:
            packet, fds = b"", []
        if not packet:
            self.lose()
            return False
        message = json.loads(packet)
        if "spawned" in message:
            self._pending.popleft()._spawned(int(message["spawned"]), fds[0])
        elif "exited" in message:
            self._exits[int(message["exited"])] = int(message["code"])
        return True

    def lose(self) -> None:
        """Stop the server if it still runs; the children it forked are on their own, and those
        it has not told of are lost."""
        while self._pending:
            self._pending.popleft()._lost = True
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()


class ForkServer:
    """The parent's handle on its fork server, started on first use and again whenever it has
    died. Thread safe: every measuring child of the process goes through one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._server: _ServerProcess | None = None

    def spawn(
        self, connection: socket.socket, cwd: str, env: dict[str, str], limits: ResourceLimits
    ) -> ForkedChild:
        """Ask for a child serving requests on ``connection`` (its end of the socket pair, which
        the caller closes afterwards), in ``cwd`` with environment ``env``, under ``limits``.
        Returns at once; the child's pid is known once the server has forked it."""
        request = json.dumps({"cwd": cwd, "env": env, "limits": asdict(limits)}).encode()
        with self._lock:
            for _ in range(2):
                if self._server is None or not self._server.alive:
                    if self._server is not None:
                        self._server.lose()
                    self._server = _ServerProcess()
                try:
                    return self._server.spawn(connection, request)
                except OSError:
                    self._server.lose()
            raise ForkServerLost("the fork server of measuring processes does not start")


_SERVER = ForkServer()


def fork_server() -> ForkServer:
    """This process's fork server."""
    return _SERVER


def run(control: socket.socket) -> None:
    """The fork server's main loop (``python -m autosched.measuring FD``): load what measuring
    needs, then fork a child per request and report each child's exit, until the parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when measuring stops
    import autosched.measure.program  # noqa: F401  (TVM, NumPy and the workloads, loaded once)
    from autosched.intrinsics import use_tensor_intrinsics

    # the CPU's tensor intrinsics (0.2 s of parsing TVMScript), which every build for it registers
    use_tensor_intrinsics({"kind": "llvm"})

    live: set[int] = set()
    try:
        while True:
            _reap(control, live)
            if not select.select([control], [], [], _REAP_INTERVAL_SECS)[0]:
                continue
            packet, fds, _flags, _address = socket.recv_fds(control, _PACKET_BYTES, 1)
            if not packet:
                return  # the parent is gone
            pid = os.fork()
            if pid == 0:
                _child(control, fds[0], json.loads(packet))
            os.close(fds[0])
            live.add(pid)
            pidfd = os.pidfd_open(pid)
            try:
                socket.send_fds(control, [json.dumps({"spawned": pid}).encode()], [pidfd])
            finally:
                os.close(pidfd)
    finally:
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _reap(control: socket.socket, live: set[int]) -> None:
    """Collect the children that exited (one wait per exit, not one per live child) and tell
    the parent how."""
    while live:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        live.discard(pid)
        message = {"exited": pid, "code": os.waitstatus_to_exitcode(status)}
        with contextlib.suppress(OSError):
            control.send(json.dumps(message).encode())


def _child(control: socket.socket, fd: int, request: dict) -> None:
    """The forked child: its own directory, environment and limits, then serve; never returns."""
    code = 0
    try:
        control.close()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # modules a request names (tests' fault injections) may live on the parent's path
        for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
            if entry and entry not in sys.path:
                sys.path.insert(0, entry)
        serve(Connection(fd), ResourceLimits(**request["limits"]))
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)
