"""The worker daemon: registers its target and device, then leases, measures and reports.

It pulls work, so it runs behind NAT and on small boards too. Candidates are built and timed with
the core's isolated measurement; results that would beat the best known latency are verified
before they are reported. A job's final (its fastest candidates timed again side by side) comes
as a lease of its own. While it measures it heartbeats, so its lease holds; when it loses the
service it retries with backoff and never crashes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from autosched.background import MAX_BACKOFF_SECS, BackgroundLoop
from autosched.errors import Cancelled, ServiceUnavailable
from autosched.finals.checks import check_in_rank_order
from autosched.finals.ranking import Entrant
from autosched.measure import CorrectnessGate, LocalMeasurer, MeasureConfig, Measurer, Retimer
from autosched.measure.child import ChildDied, ChildTimeout, RequestFailed
from autosched.records import (
    Lease,
    LeasedCandidate,
    LeasedFinal,
    ReportedResult,
    ReportOutcome,
    RetimedEntrant,
)
from autosched.target import device_fingerprint

logger = logging.getLogger(__name__)
T = TypeVar("T")

MIN_HEARTBEAT_SECS = 0.5


class WorkSource(Protocol):
    """Where a worker gets work: the service over HTTP, or the work queue itself in-process."""

    def register_worker(self, *, name: str, target: dict, fingerprint: dict) -> int: ...

    def heartbeat(self, worker_id: int) -> None: ...

    def lease(self, worker_id: int, n: int) -> Lease | None: ...

    def report(
        self, worker_id: int, lease_id: int, results: Sequence[ReportedResult]
    ) -> ReportOutcome: ...

    def report_final(
        self, worker_id: int, lease_id: int, retimed: Sequence[RetimedEntrant]
    ) -> bool: ...

    def release(self, worker_id: int, lease_id: int) -> int: ...


class WorkerDaemon(BackgroundLoop):
    """Measures candidates of ``target`` leased from ``source`` until stopped.

    Args:
        source: where the work comes from.
        target: the target JSON this machine measures for.
        batch: candidates per lease.
        config: the measurement protocol.
        measurer: measures the candidates; by default isolated processes on this machine
            (`LocalMeasurer` with ``config``), cancelled when the daemon is stopped.
        poll_secs: the longest pause between asks for work while none is queued.
    """

    def __init__(
        self,
        source: WorkSource,
        target: dict,
        *,
        batch: int = 8,
        config: MeasureConfig | None = None,
        measurer: Measurer | None = None,
        name: str | None = None,
        poll_secs: float = 1.0,
    ) -> None:
        self._source = source
        self._target = target
        self._batch = batch
        self._config = config or MeasureConfig()
        self._measurer = measurer
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self._poll_secs = poll_secs
        self.worker_id: int | None = None

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set; the lease in hand is then released, not lost."""
        fingerprint = device_fingerprint(self._target)
        worker_id = self._retry(
            lambda: self._source.register_worker(
                name=self.name, target=self._target, fingerprint=fingerprint
            ),
            stop,
        )
        if worker_id is None:
            return
        self.worker_id = worker_id
        logger.info("worker %s registered as %d", self.name, worker_id)
        measurer = self._measurer or LocalMeasurer(self._target, self._config, cancel=stop)
        idle_wait = self._poll_secs / 8
        try:
            while not stop.is_set():
                lease = self._retry(lambda: self._source.lease(worker_id, self._batch), stop)
                if lease is None:  # poll less often the longer there is no work
                    stop.wait(idle_wait)
                    idle_wait = min(2 * idle_wait, self._poll_secs)
                    continue
                idle_wait = self._poll_secs / 8
                self._serve(worker_id, lease, measurer)
        finally:
            if self._measurer is None:
                measurer.close()

    def _serve(self, worker_id: int, lease: Lease, measurer: Measurer) -> None:
        final = lease.final
        try:
            with self._heartbeats(worker_id, lease):
                if final is not None:
                    retimed = time_final(measurer, final)
                else:
                    results = measure_lease(measurer, lease.candidates)
        except Cancelled:
            self._retry(lambda: self._source.release(worker_id, lease.id), threading.Event(), 3)
            return
        if final is not None:
            taken = self._retry(
                lambda: self._source.report_final(worker_id, lease.id, retimed),
                threading.Event(),
                10,
            )
            logger.info(
                "final %d of job %d reported: taken %s", final.final_id, final.job_id, taken
            )
            return
        outcome = self._retry(
            lambda: self._source.report(worker_id, lease.id, results), threading.Event(), 10
        )
        logger.info("lease %d reported: %s", lease.id, outcome)

    @contextlib.contextmanager
    def _heartbeats(self, worker_id: int, lease: Lease) -> Iterator[None]:
        """Heartbeat while measuring: three times per lease period, so a late beat is harmless."""
        period = (lease.expires_at - datetime.now(UTC)).total_seconds()
        interval = max(MIN_HEARTBEAT_SECS, period / 3)
        done = threading.Event()

        def beat() -> None:
            while not done.wait(interval):
                with contextlib.suppress(ServiceUnavailable):
                    self._source.heartbeat(worker_id)

        thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _retry(
        self, call: Callable[[], T], stop: threading.Event, attempts: int | None = None
    ) -> T | None:
        """``call()`` until it reaches the service, backing off; None if stopped or out of tries."""
        backoff = 0.5
        tried = 0
        while not stop.is_set() and (attempts is None or tried < attempts):
            try:
                return call()
            except ServiceUnavailable as error:
                tried += 1
                wait = max(backoff, error.retry_after or 0.0)
                logger.warning("service unavailable (%s); retrying in %.1f s", error, wait)
                stop.wait(wait)
                backoff = min(backoff * 2, MAX_BACKOFF_SECS)
        return None


def measure_lease(
    measurer: Measurer, candidates: Sequence[LeasedCandidate]
) -> list[ReportedResult]:
    """Build, time and (where they would be the new best) verify a lease's candidates."""
    by_workload: dict[str, list[LeasedCandidate]] = {}
    for candidate in candidates:
        by_workload.setdefault(candidate.workload.key, []).append(candidate)
    reported = []
    for group in by_workload.values():
        workload = group[0].workload
        traces = [c.trace_json for c in group]
        results = measurer.measure(workload, traces)
        best = min((c.best_latency_secs for c in group if c.best_latency_secs), default=None)
        gate = CorrectnessGate(measurer, workload, best, seed=group[0].candidate_id)
        verified = gate.check(traces, results)
        reported.extend(
            ReportedResult(c.candidate_id, result, ok)
            for c, result, ok in zip(group, results, verified, strict=True)
        )
    return reported


def time_final(measurer: Measurer, final: LeasedFinal) -> list[RetimedEntrant]:
    """Time the entrants of a final again side by side (``Retimer.retime``), then check the
    output of those never verified in their ranking until one passes (as the server ranks them,
    ``autosched.finals.checks``): one whose output is wrong gets no samples, those ranked after
    the first correct one are not checked. A measurer that cannot time candidates again, or a
    round that fails, times none."""
    if not isinstance(measurer, Retimer):
        return [RetimedEntrant(e.candidate_id, (), False) for e in final.entrants]
    traces = [e.trace_json for e in final.entrants]
    try:
        samples = measurer.retime(final.workload, traces, final.rounds)
    except (ChildDied, ChildTimeout, RequestFailed) as error:  # the final fails, the worker lives
        logger.warning(
            "final %d of job %d: a round failed: %s", final.final_id, final.job_id, error
        )
        return [RetimedEntrant(e.candidate_id, (), False) for e in final.entrants]
    _finalists, outcomes = check_in_rank_order(
        measurer,
        final.workload,
        [Entrant(str(e.candidate_id), e.trace_json, 0.0) for e in final.entrants],
        samples,
        {str(e.candidate_id) for e in final.entrants if e.verified},
        final.seed,
    )
    checked = {int(name): passed for name, passed in outcomes.items()}
    return [
        RetimedEntrant(
            e.candidate_id,
            tuple(taken) if checked.get(e.candidate_id, True) else (),
            checked.get(e.candidate_id, False),
        )
        for e, taken in zip(final.entrants, samples, strict=True)
    ]
