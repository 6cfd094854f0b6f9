"""Stopping long-running commands cleanly: SIGINT and SIGTERM request a stop at a safe point."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event, what: str) -> Iterator[None]:
    """While inside, SIGINT or SIGTERM sets ``stop``; a second one raises KeyboardInterrupt.

    ``what`` says on standard error what stopping means, e.g. "the batch in flight is dropped".
    """

    def request_stop(signum: int, _frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        print(f"{signal.Signals(signum).name}: stopping; {what}", file=sys.stderr)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
