"""The search-efficiency benchmark: how many trials and seconds each way of searching needs.

Arms, each run per workload and seed into its own throw-away log (so no run sees another's
measurements):

* ``cold``: evolutionary search from a fresh cost model;
* ``warm``: evolutionary search from a shared cost model trained on the source log's other
  workloads (never on the workload being searched);
* ``neighbours``: as ``warm``, and first measuring the fastest schedules of the nearest shapes of
  the same operator in the source log, replayed onto this shape (``autosched.neighbours``);
* ``tpe``: Optuna's TPE over the design space's decisions;
* ``random``: random decisions, the baseline.

Candidates are built and timed on this machine, or, with a replay source, answered by the replay
simulator (recorded measurements, else a throughput model's guess), which the report labels.
Every run records best latency against trials and wall seconds; the summary gives the median and
spread over seeds, and the trials each arm needs to reach 90% and 95% of the best latency any run
found and to reach cold search's final best.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from autosched.bench.plotting import pyplot
from autosched.costmodel import XGBCostModel
from autosched.costmodel.dataset import load_dataset
from autosched.costmodel.evaluation import fit
from autosched.costmodel.predict import LatencyPredictor
from autosched.costmodel.xgb import DEFAULT_OBJECTIVE
from autosched.errors import UserError
from autosched.log import TuningLog
from autosched.log.costmodels import CostModelStore
from autosched.measure import LocalMeasurer, Measurer
from autosched.neighbours import NeighbourSeeds, neighbour_seeds
from autosched.replay import ReplayMeasurer
from autosched.search.registry import DEFAULT_STRATEGY, STRATEGY_NAMES
from autosched.search.space import design_space
from autosched.target import target_family
from autosched.tuner import Progress, TuneOptions, tune
from autosched.workload import Workload

# Cold and warm search run the default strategy from a fresh and from a pretrained cost model; every
# other strategy of the registry is an arm of its own.
_STRATEGY = {
    "cold": DEFAULT_STRATEGY,
    "warm": DEFAULT_STRATEGY,
    "neighbours": DEFAULT_STRATEGY,
    **{name: name for name in STRATEGY_NAMES if name != DEFAULT_STRATEGY},
}
ARMS = tuple(_STRATEGY)


@dataclass(frozen=True)
class Point:
    """The best verified latency after ``trials`` measurements and ``secs`` of wall time."""

    trials: int
    secs: float
    best_secs: float | None


@dataclass(frozen=True)
class Run:
    """One arm on one workload with one seed."""

    arm: str
    seed: int
    curve: list[Point]
    wall_secs: float
    simulated: dict[str, int] | None = None  # replay counts, when the replay simulator answered

    @property
    def best_secs(self) -> float | None:
        return self.curve[-1].best_secs if self.curve else None

    def trials_to_reach(self, latency: float) -> int | None:
        """The first trial count whose best is at most ``latency``; None if never."""
        for point in self.curve:
            if point.best_secs is not None and point.best_secs <= latency * (1 + 1e-9):
                return point.trials
        return None


@dataclass(frozen=True)
class ArmSummary:
    arm: str
    median_best_us: float | None
    min_best_us: float | None
    max_best_us: float | None
    median_wall_secs: float
    trials_to_90: int | None  # median over seeds; None when most seeds never got there
    trials_to_95: int | None
    trials_to_cold_best: int | None


@dataclass(frozen=True)
class WorkloadResult:
    workload: str
    params: dict[str, object]
    trials: int
    best_us: float | None  # the best latency any run found
    runs: list[Run] = field(default_factory=list)
    arms: list[ArmSummary] = field(default_factory=list)
    note: str | None = None

    def as_json(self) -> dict[str, object]:
        return {
            "workload": self.workload,
            "params": self.params,
            "trials": self.trials,
            "best_us": self.best_us,
            "note": self.note,
            "arms": [asdict(arm) for arm in self.arms],
            "runs": [
                {
                    "arm": run.arm,
                    "seed": run.seed,
                    "wall_secs": run.wall_secs,
                    "simulated": run.simulated,
                    "curve": [
                        [p.trials, p.secs, None if p.best_secs is None else p.best_secs * 1e6]
                        for p in run.curve
                    ],
                }
                for run in self.runs
            ],
        }


def bench_search(
    workloads: Sequence[Workload],
    target: dict,
    *,
    trials: int,
    seeds: int,
    batch_size: int,
    arms: Sequence[str] = ARMS,
    source: TuningLog | None = None,
    replay: bool = False,
    on_run: Callable[[str, Run], None] | None = None,
) -> list[WorkloadResult]:
    """Run every arm on every workload with seeds 0 .. seeds-1 (see the module docstring).

    ``source`` is the log the warm arm's model learns from (its other workloads) and, with
    ``replay``, the log the replay simulator answers from.

    Raises:
        UserError: an unknown arm; warm or replay without a source.
    """
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        raise UserError(f"unknown arm {unknown[0]!r}; choose among {', '.join(ARMS)}")
    if source is None and ("warm" in arms or "neighbours" in arms or replay):
        raise UserError(
            "the warm and neighbours arms and --replay need a source log (--db) to learn from"
        )
    family = target_family(target)
    results = []
    for workload in workloads:
        runs: list[Run] = []
        note = None
        warm_model = None
        if "warm" in arms or "neighbours" in arms:
            assert source is not None
            warm_model = _model_without(source, family, workload)
            if warm_model is None:
                note = "no other workload in the source log: the warm arms were skipped"
        starts = None
        if "neighbours" in arms and warm_model is not None:
            assert source is not None
            starts = neighbour_seeds(
                source, workload, target, partial(design_space, workload, target, seed=0)
            )
        predictor = None
        if replay:
            assert source is not None
            guesser = _model_without(source, family, None, objective="throughput")
            predictor = LatencyPredictor(guesser, source, target)
        for arm in arms:
            if arm in ("warm", "neighbours") and warm_model is None:
                continue
            for seed in range(seeds):
                measurer: Measurer = (
                    ReplayMeasurer(source, target, predict=predictor)
                    if replay and source is not None
                    else LocalMeasurer(target)
                )
                try:
                    run = _run(
                        workload,
                        target,
                        arm,
                        seed,
                        trials,
                        batch_size,
                        measurer,
                        warm_model,
                        starts if arm == "neighbours" else None,
                    )
                finally:
                    measurer.close()
                runs.append(run)
                if on_run is not None:
                    on_run(workload.name, run)
        results.append(_summarise(workload, trials, runs, note))
    return results


def _model_without(
    source: TuningLog,
    family: str,
    workload: Workload | None,
    objective: str = DEFAULT_OBJECTIVE,
) -> XGBCostModel | None:
    """A shared model of ``objective`` trained on the source's measurements of ``family`` except
    ``workload``'s."""
    data = load_dataset(CostModelStore(source), family)
    if workload is not None:
        stored = source.find_workload(workload.key)
        if stored is not None:
            data = data.select(data.workload_ids() != stored.id)
    if not np.isfinite(data.latencies).any():
        if workload is None:
            raise UserError(f"the source log has no successful measurements for {family}")
        return None
    return fit(data, objective=objective, seed=0)


def _run(
    workload: Workload,
    target: dict,
    arm: str,
    seed: int,
    trials: int,
    batch_size: int,
    measurer: Measurer,
    warm_model: XGBCostModel | None,
    starts: NeighbourSeeds | None,
) -> Run:
    curve: list[Point] = []
    with (
        tempfile.TemporaryDirectory(prefix="autosched-bench-search-") as work,
        TuningLog(f"sqlite:///{Path(work) / 'run.db'}") as log,
    ):
        cost_model = None
        if arm in ("warm", "neighbours") and warm_model is not None:
            cost_model = XGBCostModel.pretrained(
                warm_model.booster_bytes(), warm_model.objective, seed=seed
            )
        options = TuneOptions(
            trials=trials,
            batch_size=batch_size,
            seed=seed,
            strategy=_STRATEGY[arm],
            warm=arm in ("warm", "neighbours"),
            finalists=0,  # the curves compare single measurements, as the search saw them
        )
        started = time.perf_counter()

        def on_progress(progress: Progress) -> None:
            curve.append(
                Point(
                    progress.trials_done,
                    time.perf_counter() - started,
                    progress.best_latency_secs,
                )
            )

        report = tune(
            workload,
            target,
            log,
            measurer,
            options,
            on_progress,
            cost_model=cost_model,
            start_from=starts if starts is not None else NeighbourSeeds([], None),
        )
    simulated = asdict(measurer.counts) if isinstance(measurer, ReplayMeasurer) else None
    return Run(arm, seed, curve, report.wall_secs, simulated)


def _summarise(
    workload: Workload, trials: int, runs: list[Run], note: str | None
) -> WorkloadResult:
    bests = [run.best_secs for run in runs if run.best_secs is not None]
    best = min(bests) if bests else None
    cold = [run.best_secs for run in runs if run.arm == "cold" and run.best_secs is not None]
    cold_best = statistics.median(cold) if cold else None
    arms = []
    for arm in ARMS:
        arm_runs = [run for run in runs if run.arm == arm]
        if not arm_runs:
            continue
        finals = [run.best_secs * 1e6 for run in arm_runs if run.best_secs is not None]

        def reach(latency: float | None, runs_of_arm: list[Run] = arm_runs) -> int | None:
            if latency is None:
                return None
            return _median_reach([run.trials_to_reach(latency) for run in runs_of_arm])

        arms.append(
            ArmSummary(
                arm=arm,
                median_best_us=statistics.median(finals) if finals else None,
                min_best_us=min(finals) if finals else None,
                max_best_us=max(finals) if finals else None,
                median_wall_secs=statistics.median(run.wall_secs for run in arm_runs),
                trials_to_90=reach(None if best is None else best / 0.90),
                trials_to_95=reach(None if best is None else best / 0.95),
                trials_to_cold_best=reach(cold_best),
            )
        )
    return WorkloadResult(
        workload=workload.name,
        params=dict(workload.params),
        trials=trials,
        best_us=None if best is None else best * 1e6,
        runs=runs,
        arms=arms,
        note=note,
    )


def _median_reach(reached: list[int | None]) -> int | None:
    """The median trial count over seeds, a seed that never got there counting as infinite;
    None when the median itself is infinite."""
    values = sorted(np.inf if value is None else value for value in reached)
    median = float(np.median(values))
    return None if not np.isfinite(median) else int(np.ceil(median))


def plot_results(results: Sequence[WorkloadResult], path: Path) -> None:
    """A PNG: per workload, the median best latency of each arm against trials and against wall
    seconds, with the spread over seeds shaded."""
    plt = pyplot()
    figure, axes = plt.subplots(len(results), 2, figsize=(12, 4 * len(results)), squeeze=False)
    for row, result in enumerate(results):
        by_trials, by_secs = axes[row]
        for arm in ARMS:
            arm_runs = [run for run in result.runs if run.arm == arm and run.curve]
            if not arm_runs:
                continue
            steps = sorted({point.trials for run in arm_runs for point in run.curve})
            grid = np.array([[_best_at(run, trial) for trial in steps] for run in arm_runs])
            median = np.nanmedian(grid, axis=0)
            (line,) = by_trials.plot(steps, median, label=arm)
            by_trials.fill_between(
                steps, np.nanmin(grid, axis=0), np.nanmax(grid, axis=0), alpha=0.2,
                color=line.get_color(),
            )  # fmt: skip
            for index, run in enumerate(arm_runs):
                by_secs.plot(
                    [p.secs for p in run.curve],
                    [np.nan if p.best_secs is None else p.best_secs * 1e6 for p in run.curve],
                    color=line.get_color(),
                    label=arm if index == 0 else None,
                )
        title = f"{result.workload} " + " ".join(f"{k}={v}" for k, v in result.params.items())
        by_trials.set_title(title)
        by_trials.set_xlabel("trials")
        by_secs.set_xlabel("wall seconds")
        for axis in (by_trials, by_secs):
            axis.set_ylabel("best latency (us)")
            axis.set_yscale("log")
            axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _best_at(run: Run, trials: int) -> float:
    """The run's best latency in microseconds after ``trials`` measurements (nan before any)."""
    best = np.nan
    for point in run.curve:
        if point.trials > trials:
            break
        if point.best_secs is not None:
            best = point.best_secs * 1e6
    return best
