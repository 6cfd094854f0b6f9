"""The search engine of the tuning service: drives every unfinished job through the work queue.

An engine claims jobs in the log (a claim lapses unless renewed, so a job whose engine died is
taken over), rebuilds each job's search from the log, keeps its candidates queued for the workers
and teaches the search the measurements that come back. Engines hold no state that the log does
not: a restarted engine continues every job where the log says it stands.

The one thing an engine keeps is a cache: the search session of a job that finished stays open
(`OpenSessions`) for the next job of the same workload, target and strategy, which continues it,
caught up on the log, instead of rebuilding it (a model job's task rounds are such jobs). Without
it, as after a restart, the next job rebuilds its search from the log.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence

from autosched.background import BackgroundLoop
from autosched.costmodel.base import CostModel
from autosched.errors import ServiceUnavailable
from autosched.finals.retiming import Finals
from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.records import JobProgress, JobStatus
from autosched.search.base import Proposal
from autosched.sessions import OpenSession, OpenSessions, open_search, session_key

logger = logging.getLogger(__name__)

CostModelFactory = Callable[[JobProgress], CostModel]
"""The cost model a job's search starts from, for engines handed one instead of the log's."""


class JobDriver:
    """The search session of one job: proposes into the queue and learns from what workers report.

    Args:
        log: the tuning log.
        jobs: the log's jobs.
        job: the job to drive.
        cost_model: the model its search starts from; by default the one the job started from
            (a job taken over keeps its version), else its target family's latest shared model.
        kept: a session an earlier job of the same workload, target and strategy left open, to
            continue instead of building one (``cost_model`` is then not used).
    """

    def __init__(
        self,
        log: TuningLog,
        jobs: JobStore,
        job: JobProgress,
        cost_model: CostModel | None = None,
        kept: OpenSession | None = None,
    ) -> None:
        self.job_id = job.id
        self.session_key = session_key(job)
        self._jobs = jobs
        self._finals = Finals(log)
        self._has_final = job.final is not None
        self._batch = job.batch_size
        # whether the job ended with nothing of it left with the workers: its session can go on
        self.finished = False
        self._search = open_search(log, job, kept, cost_model=cost_model)
        self._session = self._search.session
        seen = jobs.measured_since(job.id, 0)
        self._last_measurement = seen[-1].measurement_id if seen else 0
        if self._session.needs_baseline:
            baseline = self._session.baseline
            jobs.enqueue(job.id, [(baseline.trace_json, baseline.program_hash, None)])

    def open_session(self) -> OpenSession:
        """The job's session, to keep open for the next job once this one `finished`."""
        return self._search.open_session()

    def advance(self) -> bool:
        """Learn from new measurements and keep the queue fed; False once the job has ended.

        A job's search ends once its trials are measured, or once its design space is exhausted
        and nothing of it is left with the workers (`JobSearch.over`), its baseline measured in
        either case; the job ends then, or, where it has a final, once that final has ended.
        """
        self._learn()
        budget = self._jobs.budget(self.job_id)
        if budget.status.final:
            return False
        settled = budget.outstanding == 0 and not budget.baseline_outstanding
        over = self._search.over(budget.measured, budget.outstanding)
        if over and not budget.baseline_outstanding:
            if self._has_final and not self._final_ended(settled):
                return True
            reason = self._search.stop_reason(budget.measured)
            self._jobs.end_job(self.job_id, JobStatus.FINISHED, reason)
            self.finished = budget.outstanding == 0
            return False
        remaining = self._search.remaining(budget.measured, budget.outstanding)
        # Keep up to two batches queued: workers measure one while the next is ready.
        if remaining > 0 and budget.outstanding < self._batch:
            self._session.propose(min(remaining, self._batch), admit=self._enqueue)
        return True

    def _final_ended(self, settled: bool) -> bool:
        """Whether the job's final has ended; it is planned (and queued for a worker) once
        nothing of the job is left with the workers."""
        state = self._finals.plan(self.job_id) if settled else None
        return state is not None and state.ended

    def _enqueue(self, proposals: Sequence[Proposal]) -> list[str]:
        return self._jobs.enqueue(
            self.job_id, [(p.trace_json, p.program_hash, p.predicted_score) for p in proposals]
        )

    def _learn(self) -> None:
        measured = self._jobs.measured_since(self.job_id, self._last_measurement)
        if measured:
            self._last_measurement = measured[-1].measurement_id
            self._session.learn((m.record.program_hash, m.record.result) for m in measured)


class FinalDriver:
    """A job of no trials with a final (a model task's final, after its last round): nothing to
    search, only its final to plan and wait for."""

    finished = False  # it leaves no search session open

    def __init__(self, log: TuningLog, jobs: JobStore, job: JobProgress) -> None:
        self.job_id = job.id
        self._jobs = jobs
        self._finals = Finals(log)

    def advance(self) -> bool:
        """Plan the job's final and end the job once the final has ended; False once it has."""
        if self._jobs.budget(self.job_id).status.final:
            return False
        state = self._finals.plan(self.job_id)
        if state is not None and not state.ended:
            return True
        self._jobs.end_job(self.job_id, JobStatus.FINISHED)
        return False


class Engine(BackgroundLoop):
    """Drives all unfinished jobs of a tuning log; run it in a thread with `start`/`stop`.

    Args:
        log: the tuning log whose jobs to serve.
        engine_id: this engine's name in job claims (default: a random one).
        claim_secs: how long a claim holds; the engine renews it every ``poll_secs``.
        poll_secs: pause between rounds when there was nothing to do.
        cost_models: the cost model each job's search starts from (default: the log's shared
            models, see `JobDriver`).
        open_sessions: how many finished jobs' search sessions are kept open for the next job
            of their workload, target and strategy (0: none).
    """

    def __init__(
        self,
        log: TuningLog,
        *,
        engine_id: str | None = None,
        claim_secs: float = 30.0,
        poll_secs: float = 0.25,
        cost_models: CostModelFactory | None = None,
        open_sessions: int = 16,
    ) -> None:
        self._log = log
        self._jobs = JobStore(log)
        self._cost_models = cost_models
        self.engine_id = self.name = engine_id or f"engine-{uuid.uuid4().hex[:12]}"
        self._claim_secs = claim_secs
        self._poll_secs = poll_secs
        self._drivers: dict[int, JobDriver | FinalDriver] = {}
        self._sessions = OpenSessions(open_sessions)

    def step(self) -> None:
        """One round: renew claims, take up new jobs, advance every job held."""
        held = self._jobs.claim_jobs(self.engine_id, self._claim_secs)
        for job_id in set(self._drivers) - set(held):
            del self._drivers[job_id]
        for job_id in held:
            driver = self._drivers.get(job_id)
            try:
                if driver is None:
                    driver = self._drivers[job_id] = self._driver(job_id)
                if not driver.advance():
                    del self._drivers[job_id]
                    if isinstance(driver, JobDriver) and driver.finished:
                        self._sessions.keep(driver.session_key, driver.open_session())
            except ServiceUnavailable:  # the log is gone for now: not the job's fault
                raise
            except Exception:  # one broken job must not stop the others
                logger.exception("job %d failed; it is marked failed", job_id)
                self._drivers.pop(job_id, None)
                self._jobs.end_job(job_id, JobStatus.FAILED)

    def _driver(self, job_id: int) -> JobDriver | FinalDriver:
        job = self._jobs.job(job_id)
        if job.trials == 0 and job.final is not None:
            return FinalDriver(self._log, self._jobs, job)
        kept = self._sessions.take(session_key(job))
        if kept is not None:
            return JobDriver(self._log, self._jobs, job, kept=kept)
        cost_model = None if self._cost_models is None else self._cost_models(job)
        return JobDriver(self._log, self._jobs, job, cost_model)

    def run(self, stop: threading.Event) -> None:
        """Run rounds until ``stop`` is set, waiting out outages of the log's database; after one,
        every job's search is rebuilt from the log, as after a restart."""
        self.run_rounds(stop, self.step, self._poll_secs, on_outage=self._rebuild)

    def _rebuild(self) -> None:
        """Forget every search, to rebuild each from the log."""
        self._drivers.clear()
        self._sessions = OpenSessions(self._sessions.capacity)
