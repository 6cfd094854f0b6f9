"""Long-running loops (the search engine, the model trainer, a worker daemon) that run in a thread
beside a server or alone, and wait out the outages of what they depend on."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from autosched.errors import ServiceUnavailable

logger = logging.getLogger(__name__)

MAX_BACKOFF_SECS = 30.0


class BackgroundLoop:
    """Something with a ``run(stop)`` loop that can also run in a background thread.

    Subclasses implement `run`, which must return soon after ``stop`` is set; `run_rounds` runs
    the usual loop of rounds for them.
    """

    name = "background-loop"

    def run(self, stop: threading.Event) -> None:
        raise NotImplementedError

    def run_rounds(
        self,
        stop: threading.Event,
        step: Callable[[], object],
        pause_secs: float,
        on_outage: Callable[[], None] | None = None,
    ) -> None:
        """Call ``step`` every ``pause_secs`` until ``stop`` is set.

        A round that finds its service unavailable (ServiceUnavailable, the tuning log's database
        included) is retried with exponential backoff, at least as late as the service asked;
        ``on_outage`` is called first (to drop state the outage may have left half-done). One
        line is logged when an outage starts and one when it ends, never one per retry.
        """
        backoff: float | None = None
        while not stop.is_set():
            try:
                step()
            except ServiceUnavailable as error:
                if backoff is None:
                    logger.warning("%s: %s; retrying until it is back", self.name, error)
                backoff = min(2 * backoff if backoff else pause_secs or 0.5, MAX_BACKOFF_SECS)
                if on_outage is not None:
                    on_outage()
                stop.wait(max(backoff, error.retry_after or 0.0))
                continue
            if backoff is not None:
                logger.warning("%s: available again", self.name)
                backoff = None
            stop.wait(pause_secs)

    @property
    def alive(self) -> bool:
        """Whether its background thread runs."""
        thread = getattr(self, "_thread", None)
        return thread is not None and thread.is_alive()

    def start(self) -> None:
        """Run `run` in a daemon thread."""
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = threading.Thread(
            target=self.run, args=(self._stop_event,), name=self.name, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to stop and wait until it has."""
        thread = getattr(self, "_thread", None)
        if thread is not None:
            self._stop_event.set()
            thread.join()
            self._thread = None
