"""The HTTP connections `autosched serve` holds: uvicorn's h11 protocol with a deadline on each
request's head. uvicorn closes an idle connection only after a response (its keep-alive timer),
and stops that timer at the first byte a client sends, so a client that sends half a request line
held its connection, and a file descriptor of the server, for ever.
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

KEEP_ALIVE_SECS = 5
"""How long a connection may stay idle after a response before the server closes it."""


class HeaderDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose client has not sent a whole request
    head (its request line and headers) within ``header_timeout_secs`` of connecting or of the
    previous response. A request whose head has arrived is not timed here: its body is read as
    the route asks for it."""

    header_timeout_secs: float = 10.0
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self._deadline = self.loop.call_later(self.header_timeout_secs, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        """Close the connection if its client is still to send a request's head."""
        self._deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def with_header_deadline(secs: float) -> type[HeaderDeadlineProtocol]:
    """The protocol class for uvicorn's ``http`` option, its deadline ``secs``."""
    return type("HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"header_timeout_secs": secs})
