"""MetaSchedule's evolutionary search over its post-order-apply design space, driven as ask/tell.

The search starts from the best schedules already in the tuning log and from a cost model trained
on everything measured before, so tuning a workload again continues where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import psutil
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule import TuneContext
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import MemoryDatabase, TuningRecord
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.s_tir.meta_schedule.schedule_rule import MultiLevelTiling, ScheduleRule
from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch as MSEvolutionarySearch
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
from tvm.s_tir.meta_schedule.space_generator import PostOrderApply, SpaceGenerator
from tvm.tirx import FloatImm

from autosched.costmodel import SearchCostModel
from autosched.errors import UserError
from autosched.intrinsics import use_tensor_intrinsics
from autosched.records import MeasureResult, RecordView
from autosched.schedule import apply_trace, program_hash, trace_to_json
from autosched.search.base import Proposal
from autosched.target import to_tvm_target
from autosched.workload import Workload

# Trials the underlying strategy may hand out in all; our loop stops on its own budget first.
_STRATEGY_TRIAL_CAP = 1 << 30
# MetaSchedule's population size, meant for budgets of hundreds of trials and more; smaller
# budgets evolve a population of eight times their trials (at least 64), which costs less per batch.
POPULATION_SIZE = 512


def population_for(trials: int) -> int:
    """The population to evolve for a budget of ``trials`` measurements."""
    return min(POPULATION_SIZE, max(64, 8 * trials))


def _runner_result(result: MeasureResult) -> RunnerResult:
    if not result.ok:
        return RunnerResult(run_secs=None, error_msg=result.error_msg or str(result.error_kind))
    return RunnerResult(run_secs=[FloatImm("float32", s) for s in result.samples], error_msg=None)


def _unfused_cpu_space() -> SpaceGenerator:
    """The CPU post-order-apply space whose multi-level tiling does not fuse the consumer."""
    rules = [
        MultiLevelTiling(structure="SSRSRS", max_innermost_factor=64)
        if isinstance(rule, MultiLevelTiling)
        else rule
        for rule in ScheduleRule.create("llvm")
    ]
    return PostOrderApply(sch_rules=rules, postprocs="llvm", mutator_probs="llvm")


def _seed_state(seed: int | None) -> int:
    """MetaSchedule's rand_state: -1 draws a random seed; valid seeds lie in [1, 2^31 - 1]."""
    return -1 if seed is None else seed % (2**31 - 2) + 1


class EvolutionarySearch:
    """Ask/tell evolutionary search for one workload on one target.

    Args:
        workload: what to schedule.
        target: the target's JSON form.
        cost_model: guides the search; it is updated with every result told.
        batch_size: candidates per `propose`.
        seed: makes the proposals reproducible on one machine (None: random).
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
        use_tensor_intrinsics(target)
        self._context, spaces = self._design_spaces(
            lambda space: TuneContext(
                mod=workload.mod,
                target=to_tvm_target(target),
                space_generator=space,
                search_strategy=MSEvolutionarySearch(population_size=population_size),
                task_name=workload.name,
                rand_state=_seed_state(seed),
                num_threads=psutil.cpu_count(logical=False) or 1,
            ),
            str(target.get("kind")),
        )
        self._database = MemoryDatabase()
        self._database_workload = self._database.commit_workload(workload.mod)
        self._args_info = ArgInfo.from_prim_func(workload.func)
        self._target = self._context.target
        self._learn_history(history)
        self._context.pre_tuning(
            max_trials=_STRATEGY_TRIAL_CAP,
            num_trials_per_iter=batch_size,
            design_spaces=spaces,
            database=self._database,
            cost_model=cost_model,
        )

    def _design_spaces(
        self, make_context: Callable[[SpaceGenerator | str], TuneContext], kind: str
    ) -> tuple[TuneContext, list[Schedule]]:
        """A tuning context and its design spaces: MetaSchedule's post-order-apply space, or, for
        a CPU program whose epilogue its multi-level tiling cannot fuse, the same space without
        that fusion (the epilogue is then scheduled on its own).

        Raises:
            UserError: MetaSchedule's schedule rules cannot schedule this program for the target.
        """
        spaces: list[SpaceGenerator | str] = ["post-order-apply"]
        if kind == "llvm":
            spaces.append(_unfused_cpu_space())
        reason = ""
        for space in spaces:
            context = make_context(space)
            try:
                return context, context.generate_design_space()
            except Exception as error:  # TVM raises its own error types, with pages of IR
                reason = next((line for line in str(error).splitlines() if line.strip()), "")
        raise UserError(
            f"MetaSchedule cannot build a design space for {self._workload.name} on this "
            f"target: {reason.strip()}"
        )

    def propose(self) -> list[Proposal]:
        candidates = self._context.generate_measure_candidates() or []
        scores: Sequence[float | None] = [None] * len(candidates)
        if candidates and self._cost_model.model.trained:
            scores = [float(s) for s in self._cost_model.predict(self._context, candidates)]
        return [
            Proposal(
                trace_json=trace_to_json(candidate.sch.trace),
                program_hash=program_hash(candidate.sch.mod),
                predicted_score=score,
                handle=candidate,
            )
            for candidate, score in zip(candidates, scores, strict=True)
        ]

    def tell(self, proposals: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
        candidates = [proposal.handle for proposal in proposals]
        runner_results = [_runner_result(result) for result in results]
        self._cost_model.update(self._context, candidates, runner_results)
        for candidate, runner_result in zip(candidates, runner_results, strict=True):
            self._remember(candidate.sch, runner_result)
        self._context.notify_runner_results(candidates, runner_results)

    def _remember(self, sch: Schedule, result: RunnerResult) -> None:
        if result.run_secs:
            record = TuningRecord(
                sch.trace, self._database_workload, result.run_secs, self._target, self._args_info
            )
            self._database.commit_tuning_record(record)

    def _learn_history(self, history: Sequence[RecordView]) -> None:
        """Replay recorded candidates: successful ones join the database, all train the model."""
        candidates: list[MeasureCandidate] = []
        results: list[RunnerResult] = []
        for record in history:
            try:
                sch = apply_trace(self._workload.mod, record.trace_json)
            except Exception:  # a record from another TVM version may no longer replay
                continue
            ok = record.error_kind is None and bool(record.samples)
            result = RunnerResult(
                run_secs=[FloatImm("float32", s) for s in record.samples] if ok else None,
                error_msg=None if ok else (record.error_msg or "failed"),
            )
            candidates.append(MeasureCandidate(sch, self._args_info))
            results.append(result)
            self._remember(sch, result)
        self._cost_model.update(self._context, candidates, results)
