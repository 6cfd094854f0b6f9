"""MetaSchedule's evolutionary search over its post-order-apply design space, driven as ask/tell.

The search starts from the best schedules already in the tuning log and from a cost model trained
on everything measured before, so tuning a workload again continues where it stopped. Every
measurement of the job joins the population's database and the cost model as it arrives, the
search's own candidates and the programs it observes (seeds, samples of the design space) alike;
timings from elsewhere (other hardware, other shapes) never enter either.

MetaSchedule's search never proposes a program twice, but it knows only the programs it proposed
itself: the best measured programs seed its population, and those it did not propose (recorded
history, seeds, samples) can come back as proposals. They are dropped here, and the search evolves
another round when they left the batch short.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import MemoryDatabase, TuningRecord
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch as MSEvolutionarySearch
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
from tvm.tirx import FloatImm

from autosched.costmodel import SearchCostModel
from autosched.records import MeasureResult, RecordView
from autosched.schedule import apply_trace, program_hash, trace_to_json
from autosched.search.base import Proposal
from autosched.search.space import design_space
from autosched.workload import Workload

# Trials the underlying strategy may hand out in all; our loop stops on its own budget first.
_STRATEGY_TRIAL_CAP = 1 << 30
# MetaSchedule's population size, meant for budgets of hundreds of trials and more; smaller
# budgets evolve a population of eight times their trials (at least 64), which costs less per batch.
POPULATION_SIZE = 512
# Rounds of evolution one batch may take: MetaSchedule proposes each program measured before at
# most once (it then counts it as its own), so a short batch is rare and one more round fills it.
_ROUNDS_PER_BATCH = 3


def population_for(trials: int) -> int:
    """The population to evolve for a budget of ``trials`` measurements."""
    return min(POPULATION_SIZE, max(64, 8 * trials))


def _runner_result(result: MeasureResult) -> RunnerResult:
    if not result.ok:
        return RunnerResult(run_secs=None, error_msg=result.error_msg or str(result.error_kind))
    return RunnerResult(run_secs=[FloatImm("float32", s) for s in result.samples], error_msg=None)


class EvolutionarySearch:
    """Ask/tell evolutionary search for one workload on one target.

    Args:
        workload: what to schedule.
        target: the target's JSON form.
        cost_model: guides the search; it is updated with every result told.
        batch_size: candidates per `propose`.
        seed: seeds the search (None: random). MetaSchedule evolves on one thread per physical
            core, so with more than one core two runs of one seed may still differ.
        population_size: schedules evolved per generation.
        history: recorded measurements of this workload and target: the best of them seed the
            population and all of them train the cost model.
    """

    def __init__(
        self,
        workload: Workload,
        target: dict,
        cost_model: SearchCostModel,
        *,
        batch_size: int,
        seed: int | None,
        history: Sequence[RecordView] = (),
        population_size: int = POPULATION_SIZE,
    ) -> None:
        self._workload = workload
        self._cost_model = cost_model
        self._batch_size = batch_size
        self._measured: set[str] = set()  # program hashes of every measurement learnt or told
        space = design_space(
            workload,
            target,
            seed=seed,
            search_strategy=MSEvolutionarySearch(population_size=population_size),
        )
        self._context = space.context
        self._database = MemoryDatabase()
        self._database_workload = self._database.commit_workload(workload.mod)
        self._args_info = ArgInfo.from_prim_func(workload.func)
        self._target = self._context.target
        self._learn((r.program_hash, r.trace_json, r.result) for r in history)
        self._context.pre_tuning(
            max_trials=_STRATEGY_TRIAL_CAP,
            num_trials_per_iter=batch_size,
            design_spaces=space.schedules,
            database=self._database,
            cost_model=cost_model,
        )

    def propose(self) -> list[Proposal]:
        fresh: dict[str, MeasureCandidate] = {}
        for _ in range(_ROUNDS_PER_BATCH):
            candidates = self._context.generate_measure_candidates() or []
            for candidate in candidates:
                digest = program_hash(candidate.sch.mod)
                if digest not in self._measured:
                    fresh.setdefault(digest, candidate)
            if not candidates or len(fresh) >= self._batch_size:
                break
        picked = list(fresh.items())[: self._batch_size]
        scores: Sequence[float | None] = [None] * len(picked)
        if picked and self._cost_model.model.trained:
            chosen = [candidate for _, candidate in picked]
            scores = [float(s) for s in self._cost_model.scores(self._context, chosen)]
        return [
            Proposal(
                trace_json=trace_to_json(candidate.sch.trace),
                program_hash=digest,
                predicted_score=score,
                handle=candidate,
            )
            for (digest, candidate), score in zip(picked, scores, strict=True)
        ]

    def tell(self, proposals: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
        candidates = [proposal.handle for proposal in proposals]
        runner_results = [_runner_result(result) for result in results]
        self._cost_model.update(self._context, candidates, runner_results)
        for candidate, runner_result in zip(candidates, runner_results, strict=True):
            self._remember(candidate.sch, runner_result)
        self._measured.update(proposal.program_hash for proposal in proposals)
        self._context.notify_runner_results(candidates, runner_results)

    def observe(self, proposals: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
        self._learn(
            (p.program_hash, p.trace_json, result)
            for p, result in zip(proposals, results, strict=True)
        )

    def _remember(self, sch: Schedule, result: RunnerResult) -> None:
        if result.run_secs:
            record = TuningRecord(
                sch.trace, self._database_workload, result.run_secs, self._target, self._args_info
            )
            self._database.commit_tuning_record(record)

    def _learn(self, measured: Iterable[tuple[str, str, MeasureResult]]) -> None:
        """Replay measured traces (program hash, trace, result): successful ones join the
        database, all train the cost model."""
        candidates: list[MeasureCandidate] = []
        results: list[RunnerResult] = []
        for digest, trace_json, result in measured:
            try:
                sch = apply_trace(self._workload.mod, trace_json)
            except Exception:  # a record from another TVM version may no longer replay
                continue
            candidates.append(MeasureCandidate(sch, self._args_info))
            results.append(_runner_result(result))
            self._remember(sch, results[-1])
            self._measured.add(digest)
        self._cost_model.update(self._context, candidates, results)
