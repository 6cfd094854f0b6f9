"""The search engine of the tuning service: drives every unfinished job through the work queue.

An engine claims jobs in the log (a claim lapses unless renewed, so a job whose engine died is
taken over), rebuilds each job's search from the log, keeps its candidates queued for the workers
and teaches the search the measurements that come back. Engines hold no state that the log does
not: a restarted engine continues every job where the log says it stands.
"""

from __future__ import annotations

import logging
import threading
import uuid

from autosched.background import BackgroundLoop
from autosched.costmodel.shared import starting_model
from autosched.log import JobStatus, TuningLog
from autosched.log.costmodels import CostModelStore
from autosched.log.queue import JobProgress, WorkQueue
from autosched.records import MeasureResult
from autosched.schedule import BASELINE_TRACE, program_hash
from autosched.search import Proposal
from autosched.search.strategies import make_strategy
from autosched.workload import resolve_workload

logger = logging.getLogger(__name__)

# Proposals in a row that bring nothing new before a job's design space counts as exhausted.
_STALE_PROPOSALS = 3


class JobDriver:
    """The search of one job: proposes into the queue and learns from what workers report."""

    def __init__(self, log: TuningLog, queue: WorkQueue, job: JobProgress) -> None:
        self.job_id = job.id
        self._log = log
        self._queue = queue
        self._batch = job.batch_size
        workload = resolve_workload(job.workload.ref)
        history = log.records(job.workload.id, job.target.id)
        self._known = {record.program_hash: record.result for record in history}
        seed = job.seed or 0
        models = CostModelStore(log)
        recorded = models.job_model(job.id)  # a job taken over keeps the version it started from
        cost_model, started_from = starting_model(
            log, job.target.target_json, seed=seed, model_id=recorded
        )
        if recorded is None and started_from is not None:
            models.set_job_model(job.id, started_from.id)
        self._search = make_strategy(
            job.strategy,
            workload,
            job.target.target_json,
            cost_model=cost_model,
            trials=job.trials,
            batch_size=job.batch_size,
            seed=job.seed,
            history=history,
            study_storage=log.engine_url,
        )
        seen = queue.measured_since(job.id, 0)
        self._last_measurement = seen[-1].measurement_id if seen else 0
        self._pending: dict[str, Proposal] = {}
        self._stale = 0
        baseline_hash = program_hash(workload.mod)
        if baseline_hash not in self._known:
            queue.enqueue(job.id, [(BASELINE_TRACE, baseline_hash, None)])

    def advance(self) -> bool:
        """Learn from new measurements and keep the queue fed; False once the job has ended."""
        self._learn()
        budget = self._queue.budget(self.job_id)
        if budget.status.final:
            return False
        if budget.measured >= budget.trials or (
            self._stale >= _STALE_PROPOSALS and budget.outstanding == 0
        ):
            self._log.end_job(self.job_id, JobStatus.FINISHED)
            return False
        remaining = budget.trials - budget.measured - budget.outstanding
        # Keep up to two batches queued: workers measure one while the next is ready.
        if remaining > 0 and budget.outstanding < self._batch:
            self._propose(min(remaining, self._batch))
        return True

    def _propose(self, limit: int) -> None:
        proposals = self._search.propose()
        known = [p for p in proposals if p.program_hash in self._known]
        if known:
            self._search.tell(known, [self._known[p.program_hash] for p in known])
        fresh = [p for p in proposals if p.program_hash not in self._known][:limit]
        queued = set(
            self._queue.enqueue(
                self.job_id, [(p.trace_json, p.program_hash, p.predicted_score) for p in fresh]
            )
        )
        self._pending.update((p.program_hash, p) for p in fresh if p.program_hash in queued)
        self._stale = 0 if queued else self._stale + 1

    def _learn(self) -> None:
        measured = self._queue.measured_since(self.job_id, self._last_measurement)
        if not measured:
            return
        self._last_measurement = measured[-1].measurement_id
        told: list[Proposal] = []
        results: list[MeasureResult] = []
        for item in measured:
            record = item.record
            self._known[record.program_hash] = record.result
            proposal = self._pending.pop(record.program_hash, None)
            if proposal is not None:
                told.append(proposal)
                results.append(record.result)
        if told:
            self._search.tell(told, results)


class Engine(BackgroundLoop):
    """Drives all unfinished jobs of a tuning log; run it in a thread with `start`/`stop`.

    Args:
        log: the tuning log (and work queue) to serve.
        engine_id: this engine's name in job claims (default: a random one).
        claim_secs: how long a claim holds; the engine renews it every ``poll_secs``.
        poll_secs: pause between rounds when there was nothing to do.
    """

    def __init__(
        self,
        log: TuningLog,
        queue: WorkQueue,
        *,
        engine_id: str | None = None,
        claim_secs: float = 30.0,
        poll_secs: float = 0.25,
    ) -> None:
        self._log = log
        self._queue = queue
        self.engine_id = self.name = engine_id or f"engine-{uuid.uuid4().hex[:12]}"
        self._claim_secs = claim_secs
        self._poll_secs = poll_secs
        self._drivers: dict[int, JobDriver] = {}

    def step(self) -> None:
        """One round: renew claims, take up new jobs, advance every job held."""
        held = self._queue.claim_jobs(self.engine_id, self._claim_secs)
        for job_id in set(self._drivers) - set(held):
            del self._drivers[job_id]
        for job_id in held:
            driver = self._drivers.get(job_id)
            try:
                if driver is None:
                    driver = self._drivers[job_id] = JobDriver(
                        self._log, self._queue, self._queue.job(job_id)
                    )
                if not driver.advance():
                    del self._drivers[job_id]
            except Exception:  # one broken job must not stop the others
                logger.exception("job %d failed; it is marked failed", job_id)
                self._drivers.pop(job_id, None)
                self._log.end_job(job_id, JobStatus.FAILED)

    def run(self, stop: threading.Event) -> None:
        """Run rounds until ``stop`` is set."""
        while not stop.is_set():
            self.step()
            stop.wait(self._poll_secs)
