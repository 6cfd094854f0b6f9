"""Tuning a whole model on this machine: its tasks tuned round by round as the task scheduler
splits the budget (``autosched.model.scheduler``), each round one `autosched.tuner.tune` job of
its workload in the log that continues the search session of the task's last round; tasks the
log already tuned enough are reused, not tuned again; after the last round each tuned task's
fastest candidates timed again side by side, the re-timed winner its best; then the model
compiled with every task's best schedule, its outputs checked against the framework's and the
whole model timed as the loader runs it (``autosched.model.latency``); only a model whose
outputs match is recorded as tuned, with its tasks and its latency.

A task MetaSchedule cannot schedule (its search fails, or nothing it measured ran correctly), or
whose schedule TVM cannot build into the model, keeps TVM's default schedule, and the report
names it with the reason.

The reuse rule (`plan_tasks`), the outcome of each task (`task_outcomes`) and the record of a
tuned model (`record_tuned_model`) are also what the service's model jobs use.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import tvm
from tvm.s_tir.analysis import estimate_tir_flops

from autosched.errors import Cancelled
from autosched.finals.ranking import Finalist, side_by_side
from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.subjects import ensure_subject, ensure_target
from autosched.log.tuned_models import ModelTaskEntry, TunedModelStore
from autosched.machine.roofline import load_calibration
from autosched.measure import Measurer
from autosched.model import ROUND_TRIALS
from autosched.model.compile import (
    OutputCheck,
    TaskSchedule,
    best_schedules,
    check_outputs,
    compile_schedules,
)
from autosched.model.isolated import ImportedModel
from autosched.model.latency import LatencyNotTimed, ModelLatency, time_model
from autosched.model.load import Model
from autosched.model.scheduler import TaskScheduler
from autosched.model.tasks import ModelTask
from autosched.records import BASELINE_TRACE, compiled_schedule, weighted_latency
from autosched.search.registry import DEFAULT_STRATEGY
from autosched.sessions import OpenSessions
from autosched.target import canonical_target, target_key
from autosched.tuner import TuneOptions, TuneReport, retime_finalists, tune


@dataclass(frozen=True)
class ModelTuneOptions:
    """The model's trial budget, split across its tasks in rounds of at most ``batch_size``; the
    search's seed, strategy and whether it starts from the shared cost model (``warm``); how many
    of each task's fastest candidates are timed again after its last round (``finalists``; 0:
    none), in how many ``rounds``."""

    trials: int = 64
    batch_size: int = ROUND_TRIALS
    seed: int | None = None
    strategy: str = DEFAULT_STRATEGY
    warm: bool = True
    finalists: int = TuneOptions.finalists
    rounds: int = TuneOptions.rounds

    def task_options(self, trials: int, finalists: int = 0) -> TuneOptions:
        """The options of one job of a task: a round of ``trials``, or (0 trials) the timing
        again of its ``finalists``."""
        return TuneOptions(
            trials=trials,
            batch_size=self.batch_size,
            seed=self.seed,
            strategy=self.strategy,
            warm=self.warm,
            finalists=finalists,
            rounds=self.rounds,
        )


@dataclass(frozen=True)
class TaskOutcome:
    """What became of one task: the trials it was given this run, the records of the log it
    reused instead (0: tuned here), its best and untuned latencies (re-timed side by side when
    its final timed both, else the log's single measurements), why it keeps the default
    schedule if it does, and how many of its candidates its final timed again (0: none)."""

    name: str
    workload_key: str | None
    weight: int
    trials: int
    reused_records: int
    best_secs: float | None
    baseline_secs: float | None
    default_schedule: str | None
    finalists: int = 0
    untuned_best: bool = False  # the untuned program beat every tuned candidate
    failed: int = 0  # of its trials this run

    @property
    def schedule(self) -> str:
        """What the task compiles with (``autosched.records.compiled_schedule``)."""
        return compiled_schedule(self.default_schedule, self.untuned_best)

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "workload_key": self.workload_key,
            "weight": self.weight,
            "trials": self.trials,
            "reused_records": self.reused_records,
            "best_latency_us": _us(self.best_secs),
            "untuned_latency_us": _us(self.baseline_secs),
            "default_schedule": self.default_schedule,
            "schedule": self.schedule,
            "finalists": self.finalists,
            "failed": self.failed,
        }


@dataclass(frozen=True)
class ModelTuneReport:
    """What `autosched tune MODEL_FILE` prints: per task, the model's estimated end-to-end
    latency (the sum of weight x latency over its tasks) tuned and untuned, and its latency timed
    whole (``latency``: None where it was not, as for a model job built on the server)."""

    model: str
    target: dict
    tasks: tuple[TaskOutcome, ...]
    check: OutputCheck
    wall_secs: float
    latency: ModelLatency | None = None
    latency_problem: str | None = None  # why it was not timed whole, where it was not

    @property
    def trials(self) -> int:
        return sum(task.trials for task in self.tasks)

    @property
    def reused_records(self) -> int:
        return sum(task.reused_records for task in self.tasks)

    @property
    def nothing_worked(self) -> bool:
        """Whether it measured trials and every one of them, of every task, failed."""
        return self.trials > 0 and sum(task.failed for task in self.tasks) == self.trials

    @property
    def estimated(self) -> list[TaskOutcome]:
        """The tasks the end-to-end estimates sum over: those whose untuned latency is known."""
        return [task for task in self.tasks if task.baseline_secs is not None]

    @property
    def tuned_secs(self) -> float:
        return weighted_latency(
            [(t.weight, t.best_secs or t.baseline_secs) for t in self.estimated]
        )

    @property
    def untuned_secs(self) -> float:
        return weighted_latency([(t.weight, t.baseline_secs) for t in self.estimated])

    def as_json(self) -> dict[str, object]:
        return {
            "model": self.model,
            "target": self.target,
            "trials": self.trials,
            "reused_records": self.reused_records,
            "estimated_latency_us": _us(self.tuned_secs),
            "estimated_untuned_latency_us": _us(self.untuned_secs),
            "estimated_over_tasks": len(self.estimated),
            "measured": None if self.latency is None else self.latency.as_json(),
            "measured_problem": self.latency_problem,
            "tasks": [task.as_json() for task in self.tasks],
            "check": self.check.as_json(),
            "wall_secs": self.wall_secs,
        }


CANNOT_SCHEDULE = "MetaSchedule cannot schedule it"
"""The start of the reason a task keeps the default schedule when its search failed."""


RoundCallback = Callable[[str, int, int], None]
"""Called before each round: the task's name, its trials this round, the budget left; and with
0 trials and 0 left, before the task's fastest candidates are timed again."""


def round_step(task: str, trials: int, remaining: int) -> str:
    """What a round about to start does, in a line for a user watching a long run."""
    if trials:
        return f"tuning {task}: {trials} trial{'s' if trials > 1 else ''} ({remaining} left)"
    return f"timing the fastest of {task} again"


def tune_model(
    model: Model,
    tasks: Sequence[ModelTask],
    target: dict,
    log: TuningLog,
    measurer: Measurer,
    options: ModelTuneOptions,
    on_round: RoundCallback | None = None,
    stop: threading.Event | None = None,
) -> ModelTuneReport:
    """Tune ``model``'s ``tasks`` for ``target`` with ``options.trials`` new measurements in
    all, then compile the model with their best schedules, check its outputs and, when they
    match, time it whole and record the model with its tasks and latency in the log.

    Tasks the log tuned enough already are reused (see `plan_tasks`). Each round is its own job
    in the log, so an interrupted run keeps every completed round; a task's search session stays
    open between its rounds, so each round continues its population and cost model. A round
    keeps its fastest single shot; once the budget is spent, the ``options.finalists`` fastest
    candidates of each task tuned here are timed again, side by side, in a job of their own
    (`autosched.tuner.retime_finalists`), and the re-timed winner becomes the task's best.

    Raises:
        OutputMismatch: the compiled model's outputs differ from the framework's.
        Cancelled: ``stop`` was set.
    """
    started = time.perf_counter()
    target = canonical_target(target)
    stored_target = ensure_target(log, target)
    plan = plan_tasks(log, tasks, target, options.trials)
    failed = dict(plan.failed)
    failures: dict[int, _Failures] = {}
    sessions = OpenSessions(capacity=max(1, len(plan.tunable)))
    floors = task_floors([tasks[i] for i in plan.tunable], target)
    scheduler = TaskScheduler(
        [tasks[i].weight for i in plan.tunable], options.trials, options.batch_size, floors
    )
    while (planned := scheduler.next_round()) is not None:
        index = plan.tunable[planned.index]
        workload = tasks[index].workload
        assert workload is not None  # plan_tasks leaves tasks without a workload out
        if on_round is not None:
            on_round(tasks[index].name, planned.trials, scheduler.remaining)
        if stop is not None and stop.is_set():
            raise Cancelled("tuning was stopped")
        try:
            report = tune(
                workload,
                target,
                log,
                measurer,
                options.task_options(planned.trials),
                stop=stop,
                sessions=sessions,
            )
        except (Cancelled, KeyboardInterrupt):
            raise
        except Exception as error:  # MetaSchedule cannot search this task: default schedule
            failed[index] = f"{CANNOT_SCHEDULE}: {_first_line(error)}"
            scheduler.finish(planned.index)
            continue
        scheduler.record(planned.index, report.trials, report.best_latency_secs)
        failures[index] = failures.get(index, _Failures()).add(report)
        if report.stop_reason is not None:
            scheduler.finish(planned.index)
    for index, tally in failures.items():
        if tally.trials and tally.failed == tally.trials and index not in failed:
            failed[index] = f"every trial failed: {tally.cause}"
    allocation = dict(zip(plan.tunable, scheduler.allocation, strict=True))
    tuned = [i for i in plan.tunable if allocation[i] and i not in failed]
    retimed = _retime_tasks(tasks, tuned, target, log, measurer, options, on_round, stop)
    schedules, outcomes = task_outcomes(
        log, tasks, target, failed=failed, allocation=allocation, reused=plan.reused
    )
    outcomes = tuple(
        replace(
            _with_final(outcome, retimed[i]) if i in retimed else outcome,
            failed=failures[i].failed if i in failures else 0,
        )
        for i, outcome in enumerate(outcomes)
    )
    executable, built = compile_schedules(model, schedules, target)
    outcomes = tuple(
        replace(outcome, best_secs=None, default_schedule=kept.reason, untuned_best=False)
        if kept.record is None and schedule.record is not None
        else outcome
        for outcome, schedule, kept in zip(outcomes, schedules, built, strict=True)
    )
    check = check_outputs(model, executable, target)
    latency, problem = None, None
    try:
        latency = time_model(model, executable, schedules, target, check)
    except LatencyNotTimed as error:
        problem = str(error)
    report = ModelTuneReport(
        model.name, target, outcomes, check, time.perf_counter() - started, latency, problem
    )
    record_tuned_model(log, model, stored_target.id, report)
    return report


@dataclass(frozen=True)
class _Failures:
    """A task's trials of this run, how many failed, and the most frequent failure of its latest
    round that had one."""

    trials: int = 0
    failed: int = 0
    cause: str | None = None

    def add(self, report: TuneReport) -> _Failures:
        cause = report.failure_cause or self.cause
        return _Failures(self.trials + report.trials, self.failed + report.failed, cause)


def _retime_tasks(
    tasks: Sequence[ModelTask],
    indices: Sequence[int],
    target: dict,
    log: TuningLog,
    measurer: Measurer,
    options: ModelTuneOptions,
    on_round: RoundCallback | None,
    stop: threading.Event | None,
) -> dict[int, list[Finalist]]:
    """Time the fastest candidates of the tasks at ``indices`` again; returns the finalists of
    each task re-timed, by index."""
    retimed: dict[int, list[Finalist]] = {}
    if options.finalists < 1:  # one: the fastest tuned candidate against the untuned program
        return retimed
    for index in indices:
        workload = tasks[index].workload
        assert workload is not None  # only tasks with a workload are tuned
        if on_round is not None:
            on_round(tasks[index].name, 0, 0)
        if stop is not None and stop.is_set():
            raise Cancelled("tuning was stopped")
        retimed[index] = retime_finalists(
            workload, target, log, measurer, options.task_options(0, options.finalists)
        )
    return retimed


def _with_final(outcome: TaskOutcome, finalists: Sequence[Finalist]) -> TaskOutcome:
    """``outcome`` after its task's final: its best and untuned latencies the re-timed medians
    of the winner and of the untuned program, where the final timed both."""
    timings = side_by_side(finalists, BASELINE_TRACE)
    if timings is None:
        return replace(outcome, finalists=len(finalists))
    best, untuned = timings
    return replace(outcome, finalists=len(finalists), best_secs=best, baseline_secs=untuned)


@dataclass(frozen=True)
class TaskPlan:
    """What the reuse rule decided for each task of a model, by its index: the records of the
    log it reuses (``reused``), why it keeps TVM's default schedule (``failed``: its workload is
    not admitted), or that it is tuned (``tunable``, in task order)."""

    reused: dict[int, int]
    failed: dict[int, str]
    tunable: list[int]


def task_floors(tasks: Sequence[ModelTask], target: dict) -> list[float]:
    """Each task's least latency in seconds on ``target``'s machine: its floating-point
    arithmetic (TVM's count) at the peak of the target's stored calibration (`autosched
    calibrate`); 0 where the target was never calibrated or the task computes in integers."""
    calibration = load_calibration(target)
    if calibration is None:
        return [0.0] * len(tasks)
    floors = []
    for task in tasks:
        workload, flops = task.workload, 0.0
        if workload is not None and workload.float_arithmetic:
            flops = estimate_tir_flops(tvm.IRModule({"main": workload.func}))
        floors.append(flops / (calibration.peak_gflops * 1e9))
    return floors


def plan_tasks(log: TuningLog, tasks: Sequence[ModelTask], target: dict, trials: int) -> TaskPlan:
    """Apply the reuse rule to ``tasks`` on ``target`` for a budget of ``trials``: a task the log
    holds a verified best record of, with at least an even share of the budget in records (from
    this model or another) or a design space that a job measured out, is reused, not tuned
    again. Stores the tasks' workloads and the target in the log."""
    share = math.ceil(trials / max(1, len(tasks)))
    stored_target = ensure_target(log, target)
    jobs = JobStore(log)
    plan = TaskPlan({}, {}, [])
    for index, task in enumerate(tasks):
        if task.workload is None:
            plan.failed[index] = task.problem or "not admitted"
            continue
        stored, _ = ensure_subject(log, task.workload, target)
        if log.best(stored.id, stored_target.id) is not None:
            count = log.count_records(stored.id, stored_target.id)
            if count >= share or jobs.space_exhausted(stored.id, stored_target.id):
                plan.reused[index] = count
                continue
        plan.tunable.append(index)
    return plan


def task_outcomes(
    log: TuningLog,
    tasks: Sequence[ModelTask],
    target: dict,
    *,
    failed: Mapping[int, str],
    allocation: Mapping[int, int],
    reused: Mapping[int, int],
) -> tuple[list[TaskSchedule], tuple[TaskOutcome, ...]]:
    """The schedule each task compiles with (its best record in the log; a task in ``failed``
    without one keeps the default schedule with that reason) and what became of it: the trials
    it was given (``allocation``), the records it reused, its best and untuned latencies."""
    stored_target = log.find_target(target_key(canonical_target(target)))
    schedules = [
        replace(schedule, reason=failed.get(i, schedule.reason))
        if schedule.record is None
        else schedule
        for i, schedule in enumerate(best_schedules(log, tasks, target))
    ]
    outcomes = []
    for i, (task, schedule) in enumerate(zip(tasks, schedules, strict=True)):
        stored = None if task.key is None else log.find_workload(task.key)
        baseline = (
            None
            if stored is None or stored_target is None
            else baseline_secs(log, stored.id, stored_target.id)
        )
        outcomes.append(_outcome(task, schedule, allocation.get(i, 0), reused.get(i, 0), baseline))
    return schedules, tuple(outcomes)


def record_tuned_model(
    log: TuningLog, model: Model | ImportedModel, target_id: int, report: ModelTuneReport
) -> None:
    """Record ``model`` (imported here, or by a child) as tuned for the target, with its
    tasks and its latency where it was timed whole, once its outputs matched."""
    latency = report.latency
    TunedModelStore(log).record(
        key=model.key,
        name=model.name,
        format=model.format.value,
        inputs=[spec.as_json() for spec in model.inputs],
        target_id=target_id,
        estimated_secs=report.tuned_secs,
        untuned_secs=report.untuned_secs,
        reference=report.check.reference,
        max_abs_error=report.check.max_abs_error,
        tasks=[
            ModelTaskEntry(task.name, task.workload_key, task.weight, task.default_schedule)
            for task in report.tasks
        ],
        measured=None
        if latency is None
        else (latency.median_secs, latency.low_secs, latency.high_secs),
    )


def _outcome(
    task: ModelTask,
    schedule: TaskSchedule,
    trials: int,
    reused_records: int,
    baseline_secs: float | None,
) -> TaskOutcome:
    record = schedule.record
    return TaskOutcome(
        name=task.name,
        workload_key=task.key,
        weight=task.weight,
        trials=trials,
        reused_records=reused_records,
        best_secs=None if record is None else record.median_secs,
        baseline_secs=baseline_secs,
        default_schedule=schedule.reason,
        untuned_best=record is not None and record.trace_json == BASELINE_TRACE,
    )


def baseline_secs(log: TuningLog, workload_id: int, target_id: int) -> float | None:
    """The untuned program's latency as the log measured it."""
    for record in log.records(workload_id, target_id, ok_only=True):
        if record.trace_json == BASELINE_TRACE:
            return record.median_secs
    return None


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0][:200] if lines else type(error).__name__


def _us(secs: float | None) -> float | None:
    return None if secs is None else secs * 1e6
