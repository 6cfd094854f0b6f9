"""The tuning loop on one machine: propose, measure, check, record and learn, to the budget.

Every batch is committed to the tuning log in one transaction, so an interrupted run loses at most
the batch in flight, and a later run on the same workload and target continues from the log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autosched.costmodel.shared import starting_model
from autosched.errors import Cancelled
from autosched.log import JobStatus, TuningLog
from autosched.log.costmodels import ModelInfo
from autosched.log.subjects import ensure_subject
from autosched.measure import CorrectnessGate, Measurer
from autosched.measure.replay import check_not_source
from autosched.records import CandidateResult, MeasureResult, WorkloadRef
from autosched.schedule import BASELINE_TRACE, program_hash
from autosched.search import Proposal
from autosched.search.strategies import make_strategy
from autosched.target import canonical_target, device_fingerprint
from autosched.workload import Workload

# Consecutive batches without a single new program after which the space counts as exhausted.
_STALE_BATCHES = 3


@dataclass(frozen=True)
class TuneOptions:
    """How to tune: the budget, the batch, the seed, the strategy, and whether the search starts
    from the target family's shared cost model (``warm``) or from a fresh one."""

    trials: int = 64
    batch_size: int = 64
    seed: int | None = None
    strategy: str = "evolutionary"
    warm: bool = True


@dataclass(frozen=True)
class Progress:
    trials_done: int
    trials_total: int
    failed: int
    best_latency_secs: float | None


@dataclass(frozen=True)
class TuneReport:
    """What `autosched tune` prints at the end."""

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
) -> TuneReport:
    """Tune ``workload`` for ``target`` with ``options.trials`` new measurements.

    Candidates already measured for this workload and target (same program hash) are not measured
    again. A replay simulator's results cannot be recorded into the log it replays (UserError).
    Once ``stop`` is set the run raises Cancelled at the next safe point, before the next
    batch is recorded; the job is then marked interrupted, or failed on any other exception.
    """
    check_not_source(measurer, log)
    stop = stop or threading.Event()
    started = time.perf_counter()
    target = canonical_target(target)
    ref = workload.ref
    stored_workload, stored_target = ensure_subject(log, workload, target)
    workload_id, target_id = stored_workload.id, stored_target.id
    device_id = log.ensure_device(device_fingerprint(target))
    cost_model, started_from = starting_model(
        log, target, seed=options.seed or 0, warm=options.warm
    )
    job_id = log.start_job(
        workload_id=workload_id,
        target_id=target_id,
        trials=options.trials,
        batch_size=options.batch_size,
        strategy=options.strategy,
        seed=options.seed,
        cost_model_id=None if started_from is None else started_from.id,
    )
    history = log.records(workload_id, target_id)
    known = {record.program_hash: record.result for record in history}
    best = log.best(workload_id, target_id)
    gate = CorrectnessGate(measurer, ref, best.median_secs if best else None, options.seed or 0)

    def record(proposals: Sequence[Proposal], results: list[MeasureResult]) -> None:
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

    try:
        baseline = _baseline(workload, ref, measurer, known, record)
        search = make_strategy(
            options.strategy,
            workload,
            target,
            cost_model=cost_model,
            trials=options.trials,
            batch_size=options.batch_size,
            seed=options.seed,
            history=history,
            study_storage=log.engine_url,
        )
        done = failed = stale = 0
        while done < options.trials and stale < _STALE_BATCHES:
            proposals = search.propose()
            if not proposals:
                break
            fresh = _unmeasured(proposals, known)[: options.trials - done]
            results = measurer.measure(ref, [p.trace_json for p in fresh])
            if stop.is_set():
                raise Cancelled("tuning was stopped")
            record(fresh, results)
            known.update((p.program_hash, r) for p, r in zip(fresh, results, strict=True))
            done += len(fresh)
            failed += sum(not result.ok for result in results)
            stale = 0 if fresh else stale + 1
            if on_progress is not None:
                on_progress(Progress(done, options.trials, failed, gate.best))
            # The last batch may have been cut to the budget: tell what was measured.
            told = [p for p in proposals if p.program_hash in known]
            search.tell(told, [known[p.program_hash] for p in told])
    except (Cancelled, KeyboardInterrupt):
        log.end_job(job_id, JobStatus.INTERRUPTED)
        raise
    except Exception:
        log.end_job(job_id, JobStatus.FAILED)
        raise
    log.end_job(job_id, JobStatus.FINISHED)
    return TuneReport(
        workload_key=workload.key,
        workload_name=workload.name,
        target=target,
        job_id=job_id,
        trials=done,
        failed=failed,
        best_latency_secs=gate.best,
        baseline_latency_secs=baseline,
        flops=workload.flops,
        wall_secs=time.perf_counter() - started,
        cost_model=started_from,
    )


def _baseline(
    workload: Workload,
    ref: WorkloadRef,
    measurer: Measurer,
    known: dict[str, MeasureResult],
    record: Callable[[Sequence[Proposal], list[MeasureResult]], None],
) -> float | None:
    """The untuned program's median latency, measured once per workload and target and logged."""
    proposal = Proposal(BASELINE_TRACE, program_hash(workload.mod), None, None)
    if proposal.program_hash not in known:
        results = measurer.measure(ref, [BASELINE_TRACE])
        record([proposal], results)
        known[proposal.program_hash] = results[0]
    return known[proposal.program_hash].median


def _unmeasured(proposals: Sequence[Proposal], known: dict[str, MeasureResult]) -> list[Proposal]:
    """Proposals whose program was never measured, each program once."""
    seen: set[str] = set()
    fresh = []
    for proposal in proposals:
        if proposal.program_hash not in known and proposal.program_hash not in seen:
            seen.add(proposal.program_hash)
            fresh.append(proposal)
    return fresh
