"""Long-running loops (the search engine, a worker daemon) that run in a thread beside a server."""

from __future__ import annotations

import threading


class BackgroundLoop:
    """Something with a ``run(stop)`` loop that can also run in a background thread.

    Subclasses implement `run`, which must return soon after ``stop`` is set.
    """

    name = "background-loop"

    def run(self, stop: threading.Event) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Run `run` in a daemon thread."""
        self._stop_event = threading.Event()
        self._thread = threading.Thread(
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
