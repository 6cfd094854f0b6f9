"""Where a tuning job's search starts, for `autosched tune` and the service's engine alike: a
search session built from the log (the starting cost model and records), or one kept open by an
earlier job, and the job's budget of trials against which the search stops.

Sessions are kept open between the jobs of a run that tune one workload on one target with one
strategy (a model's task rounds): the next job continues the last one's population, cost model
and design space instead of rebuilding them from the log, caught up on what was measured
elsewhere in between (`SearchSession.catch_up`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autosched.costmodel.base import CostModel
from autosched.costmodel.shared import starting_model
from autosched.log import TuningLog
from autosched.log.costmodels import CostModelStore, ModelInfo
from autosched.neighbours import NeighbourSeeds, starting_records
from autosched.records import JobProgress, RecordView
from autosched.search.registry import SearchJob
from autosched.search.session import SearchSession, start_session
from autosched.workload import Workload, resolve_workload


@dataclass(frozen=True)
class OpenSession:
    """A search session kept open between jobs, with the shared cost model version its search
    started from (None: a fresh model), which each job that continues it records."""

    session: SearchSession
    started_from: ModelInfo | None


SessionKey = tuple[str, str, str]
"""What an open session is kept under: the workload's key, the target's key, the strategy."""


def session_key(job: JobProgress) -> SessionKey:
    """What the search session of ``job`` is kept open under."""
    return (job.workload.key, job.target.key, job.strategy)


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


@dataclass(frozen=True)
class JobSearch:
    """One job's search: its session, the job's budget of ``trials``, the shared cost model
    version the session started from (None: a fresh model), and where its first candidates came
    from, in words (None: the log's own records of the workload, or a kept session).

    The job's measured and in-flight trials are counted in the log; given those counts, the
    search says how many trials are left to propose, whether it is over and why it stopped short.
    """

    session: SearchSession
    trials: int
    started_from: ModelInfo | None
    seeded_from: str | None = None

    def remaining(self, measured: int, outstanding: int = 0) -> int:
        """How many trials are left to propose: the budget less those measured and in flight."""
        return self.trials - measured - outstanding

    def over(self, measured: int, outstanding: int = 0) -> bool:
        """Whether the search is over: its trials are measured, or its design space is exhausted
        and nothing it proposed is still in flight."""
        return measured >= self.trials or (self.session.exhausted and outstanding == 0)

    def stop_reason(self, measured: int) -> str | None:
        """Why the search stopped short of its trials (None once they are measured)."""
        return None if measured >= self.trials else self.session.stop_reason

    def open_session(self) -> OpenSession:
        """The session, to keep open for the next job of its workload, target and strategy."""
        return OpenSession(self.session, self.started_from)


def _strategy_batch(job: JobProgress) -> int:
    """The batch a job's search strategy proposes toward: the job's batch size, but never more
    than its trials (a model's round of 4 trials in a job of batch size 64). MetaSchedule's
    evolution picks that many programs a round, and one short of them evolves again: asked for
    64 where 4 are measured, every round of a model's task cost two or three evolutions instead of
    one, and the printing of 64 to 192 programs to hash them."""
    return max(1, min(job.batch_size, job.trials))


def open_search(
    log: TuningLog,
    job: JobProgress,
    kept: OpenSession | None = None,
    *,
    workload: Workload | None = None,
    cost_model: CostModel | None = None,
    warm: bool = True,
    start_from: NeighbourSeeds | None = None,
    machines: Sequence[dict[str, Any]] | None = None,
) -> JobSearch:
    """The search of ``job``: ``kept`` (a session an earlier job left open) caught up on the
    log's records of the job's workload and target, else a session built from them.

    A session built starts from ``cost_model`` where given, else from the shared cost model
    version the job recorded (a job taken over keeps its version), else from the latest version
    of its target family (a fresh model when ``warm`` is false). The version a search starts
    from is recorded on the job. A workload the log never measured on the target starts from
    ``start_from`` where given (records of another log), else from the nearest hardware's
    records (``machines`` match at the device level; by default the machines of the workers
    registered for the target) or the nearest tuned shapes' (`starting_records`).

    Args:
        log: the tuning log.
        job: the job, as the log has it.
        kept: a session to continue instead of building one.
        workload: the job's workload (default: rebuilt from its reference, where a session
            is built).

    Raises:
        UserError: the workload cannot be rebuilt, an unknown strategy, or a design space
            MetaSchedule cannot build.
    """
    history = log.records(job.workload.id, job.target.id)
    if kept is not None:
        kept.session.catch_up(history)
        search = JobSearch(kept.session, job.trials, kept.started_from)
    else:
        if workload is None:
            workload = resolve_workload(job.workload.ref)
        target = job.target.target_json
        seeded_from: str | None = None
        seeds: list[RecordView] = []
        if start_from is not None:
            seeded_from, seeds = start_from.source, start_from.seeds
        elif not history:
            if machines is None:
                machines = log.machines(job.target.key)
            seeded_from, seeds = starting_records(log, workload, job.workload.id, target, machines)
        started_from = None
        if cost_model is None:
            cost_model, started_from = starting_model(
                log, target, seed=job.seed or 0, warm=warm, model_id=job.cost_model_id
            )
        session = start_session(
            job.strategy,
            SearchJob(
                workload=workload,
                target=target,
                trials=job.trials,
                batch_size=_strategy_batch(job),
                seed=job.seed,
                history=history,
                cost_model=cost_model,
                study_storage=log.engine_url,
                seeds=seeds,
            ),
        )
        search = JobSearch(session, job.trials, started_from, seeded_from)
    if job.cost_model_id is None and search.started_from is not None:
        CostModelStore(log).set_job_model(job.id, search.started_from.id)
    return search
