"""Slow clients against a real `autosched serve` on loopback: 300 connections that each send half a
request line, and one that does so after a first response on the same connection, hold nothing
for long; the server answers others meanwhile, and closes them once the header timeout
(``AUTOSCHED_HEADER_TIMEOUT_SECS``) has passed, not before."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from helpers import on_sqlite
from test_service_e2e import Service

pytestmark = pytest.mark.slow

HEADER_TIMEOUT_SECS = 3
SLOW_CLIENTS = 300


def _open(stack: ExitStack, port: int) -> socket.socket:
    sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
    sock.setblocking(False)
    return sock


def _closed_by_server(sockets: list[socket.socket], within_secs: float) -> set[socket.socket]:
    """The sockets the server closes (EOF or reset) within ``within_secs``."""
    closed: set[socket.socket] = set()
    deadline = time.monotonic() + within_secs
    while len(closed) < len(sockets) and (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([s for s in sockets if s not in closed], [], [], left)
        for sock in readable:
            try:
                if not sock.recv(4096):
                    closed.add(sock)
            except ConnectionResetError:
                closed.add(sock)
    return closed


@pytest.fixture
def service(db_url: str, tmp_path: Path) -> Iterator[Service]:
    running = Service(db_url, tmp_path)
    running.env["AUTOSCHED_HEADER_TIMEOUT_SECS"] = str(HEADER_TIMEOUT_SECS)
    try:
        running.start_server()
        yield running
    finally:
        running.stop()


@on_sqlite
def test_half_sent_requests_are_closed_after_the_header_timeout(service: Service) -> None:
    with ExitStack() as stack:
        sent_at = time.monotonic()
        slow = [_open(stack, service.port) for _ in range(SLOW_CLIENTS)]
        for sock in slow:
            sock.sendall(b"GET /healthz HT")
        # a client whose first request was answered, then sends half of its next one
        again = _open(stack, service.port)
        again.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        select.select([again], [], [], 10)
        assert again.recv(4096).startswith(b"HTTP/1.1 200")
        again.sendall(b"GET /heal")

        started = time.monotonic()
        answered = httpx.get(f"{service.url}/healthz", timeout=5)
        assert answered.status_code == 200
        assert time.monotonic() - started < 3

        waiting = [*slow, again]
        early = _closed_by_server(waiting, HEADER_TIMEOUT_SECS - 1 - (time.monotonic() - sent_at))
        assert not early, f"{len(early)} connections closed before the header timeout"
        closed = _closed_by_server(waiting, HEADER_TIMEOUT_SECS + 10)
        assert len(closed) == len(waiting), f"{len(waiting) - len(closed)} connections still open"
        assert again in closed
