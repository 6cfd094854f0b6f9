"""The design space of a workload on a target, and schedules sampled from it by choosing decisions.

Every strategy searches the same space: MetaSchedule's post-order-apply design spaces (or, for a CPU
program whose epilogue its tiling cannot fuse, the same space without that fusion), on CPUs with
one sketch more for a global pooling (`autosched.search.global_pooling`). A sample replays
one design-space trace with each sampling decision picked by a `Chooser` among its valid choices,
then runs the space's postprocessors. How decisions become choices is decided here and only here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psutil
from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule import TuneContext
from tvm.s_tir.meta_schedule.postproc import Postproc
from tvm.s_tir.meta_schedule.schedule_rule import AddRFactor, MultiLevelTiling, ScheduleRule
from tvm.s_tir.meta_schedule.search_strategy import SearchStrategy as MSSearchStrategy
from tvm.s_tir.meta_schedule.space_generator import PostOrderApply, SpaceGenerator
from tvm.s_tir.schedule import Instruction, Trace
from tvm.tirx import IntImm

from autosched.errors import UserError
from autosched.intrinsics import use_tensor_intrinsics
from autosched.search.global_pooling import GlobalPooling
from autosched.target import to_tvm_target
from autosched.workload import Workload

Chooser = Callable[[str, Sequence[int]], int]
"""Picks one of ``choices`` for the decision called ``name``; a name always comes with the same
choices, so a chooser may learn per name (Optuna requires it)."""

# Samples a strategy may draw per candidate it wants, before it settles for fewer: samples can be
# invalid (a postprocessor refuses them) or repeat programs already measured.
ATTEMPTS_PER_CANDIDATE = 4


def _seed_state(seed: int | None) -> int:
    """MetaSchedule's rand_state: -1 draws a random seed; valid seeds lie in [1, 2^31 - 1]."""
    return -1 if seed is None else seed % (2**31 - 2) + 1


def _unfused_cpu_space() -> SpaceGenerator:
    """The CPU post-order-apply space whose multi-level tiling does not fuse the consumer."""
    rules = [
        MultiLevelTiling(structure="SSRSRS", max_innermost_factor=64)
        if isinstance(rule, MultiLevelTiling)
        else rule
        for rule in ScheduleRule.create("llvm")
    ]
    return PostOrderApply(sch_rules=rules, postprocs="llvm", mutator_probs="llvm")


def _with_global_pooling(generator: SpaceGenerator) -> SpaceGenerator:
    """``generator``'s rules, initialized for its target, with `GlobalPooling` before `rfactor`;
    the same postprocessors and mutators."""
    rules: list[ScheduleRule] = []
    for rule in generator.sch_rules:
        if isinstance(rule, AddRFactor):
            rules.append(GlobalPooling())
        rules.append(rule)
    return PostOrderApply(
        sch_rules=rules,
        postprocs=list(generator.postprocs),
        mutator_probs=dict(generator.mutator_probs.items()),
    )


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def _pick(choose: Chooser, name: str, choices: Sequence[int]) -> int:
    """The only choice, or the chooser's pick among several."""
    if len(choices) == 1:
        return choices[0]
    return int(choose(name, list(choices)))


class _DecisionProvider:
    """Chooses the decision of each instruction while a design-space trace replays onto ``sch``.

    Parameter names are ``{prefix}.i{index}.{what}``, ``index`` being the instruction's position in
    the trace; ``what`` names everything its choices depend on, so a name's choices never change:

    - SampleCategorical: ``cat``, the index of a candidate of nonzero probability.
    - SamplePerfectTile / SamplePartitionedTile: the factors one at a time, innermost first, each
      among the divisors of what is left to split: ``f{k}.{left}`` for factor ``k``; a partitioned
      tile adds ``.{owed}``, the part of its inner factor the factors from ``k`` inwards still owe.
      Factor 0 takes what is left. A perfect tile's innermost factor is at most its
      max_innermost_factor; a partitioned tile's factors from partition_pos inwards multiply to a
      multiple of innerpart_factor. Loops of unknown extent keep the design space's decision.
    - SampleComputeLocation: ``loc[{choices}]``, a location index TVM accepts as it stands (-2
      inline, -1 root, else a loop): found by asking TVM, on a copy of the schedule, to sample
      each index from the deepest down, since it moves an index it refuses to the next one it
      accepts below.

    Other instructions keep their design-space decision. Without a chooser (``choose`` None)
    each decision takes the choice nearest to the one the trace recorded (a tile factor nearest
    in ratio), so a trace tuned for another shape follows its own decisions where they fit. A
    loop longer or shorter here than where the trace was recorded takes the difference at its
    outermost factor, or with ``grow_at`` at that factor (counted from the outermost; the
    innermost where a tile has fewer): its recorded value times the ratio of the extents. An
    error of the chooser is kept in ``error``: TVM reports exceptions of a callback as its own
    errors.
    """

    def __init__(
        self, sch: Schedule, prefix: str, choose: Chooser | None, grow_at: int = 0
    ) -> None:
        self._sch = sch
        self._prefix = prefix
        self._choose = choose
        self._grow_at = grow_at
        self._index = -1
        self.error: Exception | None = None

    def __call__(
        self, inst: Instruction, inputs: list[Any], attrs: list[Any], decision: Any
    ) -> Any:
        self._index += 1
        name = f"{self._prefix}.i{self._index}"
        try:
            kind = inst.kind.name
            if kind == "SampleCategorical":
                return self._categorical(name, attrs[1], decision)
            if kind == "SamplePerfectTile":
                return self._tile(name, inputs[0], decision, int(attrs[0]), int(attrs[1]), 0, 1)
            if kind == "SamplePartitionedTile":
                n, position, factor = (int(attr) for attr in attrs)
                return self._tile(name, inputs[0], decision, n, -1, position, factor)
            if kind == "SampleComputeLocation":
                choices = self._compute_locations(inputs[0])
                located = f"{name}.loc[{','.join(map(str, choices))}]"
                return self._pick(located, choices, _recorded(decision))
            return decision
        except Exception as error:
            self.error = error
            raise

    def _pick(self, name: str, choices: Sequence[int], recorded: float | None) -> int:
        if self._choose is not None:
            return _pick(self._choose, name, choices)
        if recorded is None:
            return choices[0]
        if recorded > 0 and all(choice > 0 for choice in choices):  # tile factors: by ratio
            return min(choices, key=lambda choice: abs(math.log(choice / recorded)))
        return min(choices, key=lambda choice: abs(choice - recorded))

    def _categorical(self, name: str, probs: Sequence[Any], decision: Any) -> int:
        choices = [i for i, p in enumerate(probs) if float(p) > 0]
        return self._pick(f"{name}.cat", choices, _recorded(decision))

    def _tile(
        self,
        name: str,
        loop: Any,
        decision: Any,
        n: int,
        max_innermost: int,
        position: int,
        inner_factor: int,
    ) -> Any:
        extent = self._sch.get(loop).extent
        if not isinstance(extent, IntImm) or extent.value % inner_factor:
            return decision
        left = int(extent.value)
        factors = [1] * n
        owed = inner_factor  # what the factors from k inwards still owe to inner_factor
        recorded_factors: list[float] | None = None
        if decision is not None:
            recorded_factors = [float(_recorded(factor) or 1) for factor in decision]
            recorded_factors[min(self._grow_at, n - 1)] *= left / math.prod(recorded_factors)
        for k in range(n - 1, 0, -1):
            choices = _divisors(left)
            if k == n - 1 and max_innermost > 0:
                choices = [d for d in choices if d <= max_innermost]
            if k == position:
                choices = [d for d in choices if d % owed == 0]
            elif k > position:
                choices = [d for d in choices if (left // d) % (owed // math.gcd(owed, d)) == 0]
            suffix = f".{owed}" if owed > 1 else ""
            recorded = None if recorded_factors is None else recorded_factors[k]
            factors[k] = self._pick(f"{name}.f{k}.{left}{suffix}", choices, recorded)
            left //= factors[k]
            owed //= math.gcd(owed, factors[k])
        factors[0] = left
        return factors

    def _compute_locations(self, block: Any) -> list[int]:
        probe = self._sch.copy()
        consumers = probe.get_consumers(block)
        index = len(probe.get_loops(consumers[0])) - 1 if consumers else -1
        found: list[int] = []
        while index >= -2:
            probe.sample_compute_location(block, decision=index)
            accepted = int(probe.trace.get_decision(probe.trace.insts[-1]))
            if accepted > index:  # below the lowest index TVM accepts: it moved up to -1
                break
            found.append(accepted)
            index = accepted - 1
        return found[::-1]


def _recorded(decision: Any) -> int | None:
    """A decision the trace recorded, as an int (None where it recorded none)."""
    return None if decision is None else int(decision)


def replay_with_choices(
    trace: Trace, mod: IRModule, choose: Chooser | None, prefix: str, grow_at: int = 0
) -> Schedule | None:
    """Replay ``trace``, without its postprocessing, onto a fresh schedule of ``mod``, each sampling
    decision chosen by ``choose`` (names begin with ``prefix``), or without one the valid choice
    nearest to the decision the trace recorded, a tile of another extent than recorded growing
    or shrinking at factor ``grow_at`` (``_DecisionProvider``); None if TVM refuses the result.

    Errors of ``choose`` propagate. Every decision comes from ``choose``; the schedule's fixed seed
    keeps anything else sampled reproducible.
    """
    sch = Schedule(mod, seed=1, debug_mask=0, error_render_level="none")
    provider = _DecisionProvider(sch, prefix, choose, grow_at)
    try:
        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
    except Exception:  # TVM raises its own error types, and its own for errors of callbacks
        if provider.error is not None:
            raise provider.error from None
        return None
    return sch


@dataclass(frozen=True)
class DesignSpace:
    """MetaSchedule's design spaces of one workload on one target, in a tuning context.

    ``schedules`` are the design spaces (schedules with sampled decisions); ``postprocs`` finish
    every sample, as MetaSchedule's own search finishes its candidates.
    """

    mod: IRModule
    context: TuneContext
    schedules: list[Schedule]
    postprocs: list[Postproc]

    def sample(self, choose: Chooser) -> Schedule | None:
        """A finished schedule with every decision picked by ``choose``: first the design space
        (``space``, if there are several), then the decisions of its trace (``s{space}.i...``);
        None when its decisions do not apply or a postprocessor refuses the result."""
        space = _pick(choose, "space", range(len(self.schedules)))
        sch = replay_with_choices(self.schedules[space].trace, self.mod, choose, f"s{space}")
        if sch is None:
            return None
        return self._finish(sch)

    def follow(self, trace: Trace, grow_at: int = 0) -> Schedule | None:
        """``trace``, tuned for another shape of this operator, replayed onto this workload with
        each decision the valid choice nearest to its own, a loop of another extent taking the
        difference at tile factor ``grow_at`` (0, the outermost: the same inner tiles, more or
        fewer of them), then finished by the postprocessors; None when its instructions do not
        apply here or a postprocessor refuses the result."""
        sch = replay_with_choices(trace, self.mod, None, "follow", grow_at)
        return None if sch is None else self._finish(sch)

    def _finish(self, sch: Schedule) -> Schedule | None:
        sch.enter_postproc()
        if not all(postproc.apply(sch) for postproc in self.postprocs):
            return None
        return sch


def _tune_context(
    workload: Workload,
    target: dict,
    space: SpaceGenerator | str,
    search_strategy: MSSearchStrategy | None,
    seed: int | None,
) -> TuneContext:
    return TuneContext(
        mod=workload.mod,
        target=to_tvm_target(target),
        space_generator=space,
        search_strategy=search_strategy,
        task_name=workload.name,
        rand_state=_seed_state(seed),
        num_threads=psutil.cpu_count(logical=False) or 1,
    )


def design_space(
    workload: Workload,
    target: dict,
    *,
    seed: int | None,
    search_strategy: MSSearchStrategy | None = None,
) -> DesignSpace:
    """The design space of ``workload`` on ``target``: MetaSchedule's post-order-apply space, or,
    for a CPU program whose epilogue its multi-level tiling cannot fuse, the same space without
    that fusion (the epilogue is then scheduled on its own); on a CPU, with `GlobalPooling`'s
    sketch beside MetaSchedule's own.

    Its tuning context carries ``search_strategy`` (for MetaSchedule's own search) and ``seed``.
    Registers the target's tensor intrinsics first.

    Raises:
        UserError: MetaSchedule's schedule rules cannot schedule this program for the target.
    """
    use_tensor_intrinsics(target)
    generators: list[SpaceGenerator | str] = ["post-order-apply"]
    if target.get("kind") == "llvm":
        generators.append(_unfused_cpu_space())
    reason = ""
    for generator in generators:
        if target.get("kind") == "llvm":  # the target's default rules, read from a bare context
            defaults = _tune_context(workload, target, generator, None, seed).space_generator
            assert defaults is not None
            generator = _with_global_pooling(defaults)
        context = _tune_context(workload, target, generator, search_strategy, seed)
        try:
            schedules = context.generate_design_space()
        except Exception as error:  # TVM raises its own error types, with pages of IR
            reason = next((line for line in str(error).splitlines() if line.strip()), "")
            continue
        assert context.space_generator is not None
        postprocs = list(context.space_generator.postprocs)
        return DesignSpace(workload.mod, context, schedules, postprocs)
    raise UserError(
        f"MetaSchedule cannot build a design space for {workload.name} on this target: "
        f"{reason.strip()}"
    )
