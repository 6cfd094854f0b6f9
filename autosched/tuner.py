"""The tuning loop on one machine: a search session whose batches a Measurer builds and times
here, each checked, recorded and learnt from, until the budget is spent.

Every batch is committed to the tuning log in one transaction, so an interrupted run loses at most
the batch in flight, and a later run on the same workload and target continues from the log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from autosched.costmodel.base import CostModel
from autosched.errors import Cancelled
from autosched.finals.checks import check_in_rank_order
from autosched.finals.ranking import (
    FINALISTS,
    ROUNDS,
    Entrant,
    Finalist,
    contenders,
    entrants_of,
    side_by_side,
)
from autosched.finals.timings import FinalistStore
from autosched.log import TuningLog
from autosched.log.costmodels import ModelInfo
from autosched.log.jobs import JobStore
from autosched.log.subjects import ensure_subject
from autosched.measure import CorrectnessGate, Measurer, Retimer
from autosched.neighbours import NeighbourSeeds
from autosched.records import BASELINE_TRACE, CandidateResult, JobStatus
from autosched.replay import check_not_source
from autosched.search.base import Proposal
from autosched.search.registry import DEFAULT_STRATEGY
from autosched.search.session import SearchSession
from autosched.sessions import OpenSessions, open_search, session_key
from autosched.target import canonical_target, device_fingerprint
from autosched.workload import Workload


@dataclass(frozen=True)
class TuneOptions:
    """How to tune: the budget, the batch, the seed, the strategy, whether the search starts
    from the target family's shared cost model (``warm``) or from a fresh one, and how many of
    the fastest candidates are timed again at the end (``finalists``; 0: none), in how many
    ``rounds``."""

    trials: int = 64
    batch_size: int = 64
    seed: int | None = None
    strategy: str = DEFAULT_STRATEGY
    warm: bool = True
    finalists: int = FINALISTS
    rounds: int = ROUNDS


@dataclass(frozen=True)
class Progress:
    """Where a run stands after a round: new measurements stored (the baseline apart), of which
    failed, and the best verified latency so far."""

    trials_done: int
    trials_total: int
    failed: int
    best_latency_secs: float | None


@dataclass(frozen=True)
class TuneReport:
    """What `autosched tune` prints at the end. After a final that re-timed the untuned program
    with the finalists, the best and untuned latencies are their re-timed medians, side by side;
    otherwise single measurements of the search."""

    workload_key: str
    workload_name: str
    target: dict
    job_id: int
    trials: int
    failed: int
    best_latency_secs: float | None
    baseline_latency_secs: float | None
    flops: float | None
    wall_secs: float
    cost_model: ModelInfo | None = None
    stop_reason: str | None = None  # why it measured fewer than its trials
    finalists: tuple[Finalist, ...] = ()  # re-timed at the end, the winner first
    # where a target the log never measured took its first candidates from (nearest hardware)
    seeded_from: str | None = None
    failure_cause: str | None = None  # the most frequent failure of its measurements, in a line

    @property
    def nothing_worked(self) -> bool:
        """Whether it measured trials and every one of them failed."""
        return self.trials > 0 and self.failed == self.trials

    @property
    def gflops(self) -> float | None:
        if self.flops is None or not self.best_latency_secs:
            return None
        return self.flops / self.best_latency_secs / 1e9

    @property
    def speedup(self) -> float | None:
        if not self.baseline_latency_secs or not self.best_latency_secs:
            return None
        return self.baseline_latency_secs / self.best_latency_secs

    def as_json(self) -> dict[str, object]:
        def us(secs: float | None) -> float | None:
            return None if secs is None else secs * 1e6

        return {
            "workload_key": self.workload_key,
            "workload": self.workload_name,
            "target": self.target,
            "job_id": self.job_id,
            "trials": self.trials,
            "failed": self.failed,
            "best_latency_us": us(self.best_latency_secs),
            "gflops": self.gflops,
            "baseline_latency_us": us(self.baseline_latency_secs),
            "speedup": self.speedup,
            "wall_secs": self.wall_secs,
            "stop_reason": self.stop_reason,
            "finalists": [finalist.as_json() for finalist in self.finalists],
            "seeded_from": self.seeded_from,
            "failure_cause": self.failure_cause,
            "cost_model": None
            if self.cost_model is None
            else {
                "id": self.cost_model.id,
                "family": self.cost_model.family,
                "version": self.cost_model.version,
            },
        }


def tune(
    workload: Workload,
    target: dict,
    log: TuningLog,
    measurer: Measurer,
    options: TuneOptions,
    on_progress: Callable[[Progress], None] | None = None,
    stop: threading.Event | None = None,
    cost_model: CostModel | None = None,
    start_from: NeighbourSeeds | None = None,
    sessions: OpenSessions | None = None,
) -> TuneReport:
    """Tune ``workload`` for ``target`` with ``options.trials`` new measurements.

    Candidates already measured for this workload and target (same program hash) are not measured
    again. The search is guided by ``cost_model`` if given, else by the target family's latest
    shared model in the log (a fresh one when ``options.warm`` is false or there is none). A
    replay simulator's results cannot be recorded into the log it replays (UserError). Once
    ``stop`` is set the run raises Cancelled at the next safe point, before the next batch is
    recorded; the job is then marked interrupted, or failed on any other exception.

    A workload the log never measured on this target starts from records of the hardware nearest
    this machine or of the nearest tuned shapes (``autosched.sessions.open_search``), or from
    ``start_from`` where given (records of another log).

    With ``sessions``, the search continues the session an earlier job of this run left open
    for the workload, target and strategy (caught up on the log), and is left open there for
    the next; a job that fails or is stopped closes it.
    """
    check_not_source(measurer, log)
    stop = stop or threading.Event()
    started = time.perf_counter()
    target = canonical_target(target)
    ref = workload.ref
    stored_workload, stored_target = ensure_subject(log, workload, target)
    workload_id, target_id = stored_workload.id, stored_target.id
    device_id = log.ensure_device(device_fingerprint(target))
    jobs = JobStore(log)
    job_id = jobs.start_job(
        workload_id=workload_id,
        target_id=target_id,
        trials=options.trials,
        batch_size=options.batch_size,
        strategy=options.strategy,
        seed=options.seed,
    )
    best = log.best(workload_id, target_id)
    gate = CorrectnessGate(measurer, ref, best.median_secs if best else None, options.seed or 0)

    def measure(session: SearchSession, proposals: Sequence[Proposal]) -> None:
        results = measurer.measure(ref, [p.trace_json for p in proposals])
        if stop.is_set():
            raise Cancelled("tuning was stopped")
        verified = gate.check([p.trace_json for p in proposals], results)
        log.record_batch(
            job_id,
            [
                CandidateResult(
                    trace_json=p.trace_json,
                    program_hash=p.program_hash,
                    result=result,
                    predicted_score=p.predicted_score,
                    verified=ok,
                    device_id=device_id,
                )
                for p, result, ok in zip(proposals, results, verified, strict=True)
            ],
        )
        session.learn((p.program_hash, r) for p, r in zip(proposals, results, strict=True))

    with _ending_on_error(jobs, job_id):
        job = jobs.job(job_id)
        search = open_search(
            log,
            job,
            None if sessions is None else sessions.take(session_key(job)),
            workload=workload,
            cost_model=cost_model,
            warm=options.warm,
            start_from=start_from,
            machines=[device_fingerprint(target)],
        )
        session = search.session
        if session.needs_baseline:
            measure(session, [session.baseline])
        progress = jobs.job(job_id)
        while not search.over(progress.trials_done):
            fresh = session.propose(min(options.batch_size, search.remaining(progress.trials_done)))
            if fresh:
                measure(session, fresh)
                progress = jobs.job(job_id)
            if on_progress is not None:
                on_progress(
                    Progress(progress.trials_done, options.trials, progress.failed, gate.best)
                )
        finalists = _retime_finalists(
            log, measurer, workload, (workload_id, target_id), job_id, device_id, options
        )
    stop_reason = search.stop_reason(progress.trials_done)
    jobs.end_job(job_id, JobStatus.FINISHED, stop_reason)
    if sessions is not None:
        sessions.keep(session_key(job), search.open_session())
    best, baseline = side_by_side(finalists, BASELINE_TRACE) or (
        finalists[0].first_median_secs if finalists else gate.best,
        session.baseline_latency,
    )
    return TuneReport(
        workload_key=workload.key,
        workload_name=workload.name,
        target=target,
        job_id=job_id,
        trials=progress.trials_done,
        failed=progress.failed,
        best_latency_secs=best,
        baseline_latency_secs=baseline,
        flops=workload.flops,
        wall_secs=time.perf_counter() - started,
        cost_model=search.started_from,
        stop_reason=stop_reason,
        finalists=tuple(finalists),
        seeded_from=search.seeded_from,
        failure_cause=log.failure_cause(job_id),
    )


def retime_finalists(
    workload: Workload,
    target: dict,
    log: TuningLog,
    measurer: Measurer,
    options: TuneOptions,
) -> list[Finalist]:
    """Time the ``options.finalists`` fastest candidates of ``workload`` on ``target`` again, as
    a job of its own that measures nothing new (a model's task after its last round: its rounds
    keep the fastest single shot), and make the re-timed winner the best record. Returns the
    finalists, the winner first; none with fewer than two candidates to compare.
    """
    target = canonical_target(target)
    stored_workload, stored_target = ensure_subject(log, workload, target)
    subject = (stored_workload.id, stored_target.id)
    device_id = log.ensure_device(device_fingerprint(target))
    jobs = JobStore(log)
    job_id = jobs.start_job(
        workload_id=stored_workload.id,
        target_id=stored_target.id,
        trials=0,
        batch_size=options.batch_size,
        strategy=options.strategy,
        seed=options.seed,
    )
    with _ending_on_error(jobs, job_id):
        finalists = _retime_finalists(log, measurer, workload, subject, job_id, device_id, options)
    jobs.end_job(job_id, JobStatus.FINISHED)
    return finalists


@contextmanager
def _ending_on_error(jobs: JobStore, job_id: int) -> Iterator[None]:
    """End the job as interrupted (stopped) or failed (any other error) if the block raises."""
    try:
        yield
    except (Cancelled, KeyboardInterrupt):
        jobs.end_job(job_id, JobStatus.INTERRUPTED)
        raise
    except Exception:
        jobs.end_job(job_id, JobStatus.FAILED)
        raise


def _retime_finalists(
    log: TuningLog,
    measurer: Measurer,
    workload: Workload,
    subject: tuple[int, int],
    job_id: int,
    device_id: int,
    options: TuneOptions,
) -> list[Finalist]:
    """Time the ``options.finalists`` fastest tuned candidates of the workload and target again,
    side by side with the untuned program (those `enters_final` lets in), and make the one with
    the lowest re-timed median whose output is correct the best record
    (``autosched.finals.ranking``); none where the measurer cannot re-time (a replay of a log).

    The finalists never verified are checked in their ranking until one passes
    (``autosched.finals.checks``): one that fails is left out, one that passes has its
    measurement marked verified, as every best record's is.
    """
    if options.finalists < 1 or not isinstance(measurer, Retimer):
        return []
    records = entrants_of(*contenders(log.records(*subject)), options.finalists)
    if len(records) < 2:
        return []
    samples = measurer.retime(workload.ref, [r.trace_json for r in records], options.rounds)
    finalists, outcomes = check_in_rank_order(
        measurer,
        workload.ref,
        [Entrant(r.program_hash, r.trace_json, r.median_secs or 0.0) for r in records],
        samples,
        {record.program_hash for record in records if record.verified},
        options.seed or 0,
    )
    if len(finalists) < 2:
        return []
    checked = [program_hash for program_hash, passed in outcomes.items() if passed]
    FinalistStore(log).record(job_id, *subject, device_id, finalists, checked)
    return finalists
