"""What runs inside a measuring child: its resource limits and its loop serving requests.

A child sets its limits itself: its address space, the CPU time of each request (renewed before
every request, so a request that spins is killed by the kernel even if the parent missed it), and
its open files. Failures of a request are data for the parent: its error text goes back. Requests
come pickled from the parent; replies go back as JSON (``replies.py``).
"""

from __future__ import annotations

import resource
import signal
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol

from autosched.measure import replies

_ERROR_TEXT_LIMIT = 2000


class Request(Protocol):
    """A picklable unit of work for a child process."""

    def execute(self) -> Any: ...


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

    conn.send_bytes(replies.encode("ready", None))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        _cpu_budget(limits.cpu_secs_per_request)
        try:
            reply = replies.encode("ok", request.execute())
        except Exception as error:  # every failure of a candidate is data for the parent
            reply = replies.encode("error", error_text(error))
        conn.send_bytes(reply)
