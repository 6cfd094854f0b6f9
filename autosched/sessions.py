"""Search sessions kept open between the jobs of a run that tune one workload on one target
with one strategy (a model's task rounds): the next job continues the last one's population,
cost model and design space instead of rebuilding them from the log, caught up on what was
measured elsewhere in between (`SearchSession.catch_up`). `autosched tune` and the service's
engine keep them.
"""

from __future__ import annotations

from dataclasses import dataclass

from autosched.log.costmodels import ModelInfo
from autosched.search.session import SearchSession


@dataclass(frozen=True)
class OpenSession:
    """A search session kept open between jobs, with the shared cost model version its search
    started from (None: a fresh model), which each job that continues it records."""

    session: SearchSession
    started_from: ModelInfo | None


SessionKey = tuple[str, str, str]
"""What an open session is kept under: the workload's key, the target's key, the strategy."""


class OpenSessions:
    """The search sessions a run keeps open between its jobs, by `SessionKey`, at most
    ``capacity`` of them (the least recently used is closed first).

    A job takes the session out and keeps it again when it ends normally: a job that fails or
    is stopped leaves none, so the next job starts from the log.
    """

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._sessions: dict[SessionKey, OpenSession] = {}

    def take(self, key: SessionKey) -> OpenSession | None:
        """Take out the open session under ``key``, if any."""
        return self._sessions.pop(key, None)

    def keep(self, key: SessionKey, session: OpenSession) -> None:
        """Keep ``session`` open under ``key`` for the next job, as the most recently used."""
        self._sessions.pop(key, None)
        self._sessions[key] = session
        while len(self._sessions) > self.capacity:
            del self._sessions[next(iter(self._sessions))]

    def __len__(self) -> int:
        return len(self._sessions)
