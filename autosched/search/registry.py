"""The search strategies by name: the one list that the CLI, the API, the engine and the benchmarks
read, and the one way to build a strategy for a job.

``evolutionary`` (the default) is MetaSchedule's evolutionary search guided by the cost model;
``tpe`` is Optuna's TPE over the design space's decisions, its study kept in the tuning log's
database; ``random`` draws every decision at random, the baseline. Each strategy's module is
imported when it is built, so reading the names here costs no TVM import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autosched.errors import UserError
from autosched.search.base import SearchStrategy

if TYPE_CHECKING:
    from autosched.costmodel.base import CostModel
    from autosched.records import RecordView
    from autosched.workload import Workload


@dataclass(frozen=True)
class SearchJob:
    """What a strategy is built for: one workload on one target, with a budget of ``trials``.

    ``history`` holds the recorded measurements of the workload and target; ``cost_model`` guides
    the strategies that consult one; ``study_storage`` is the SQLAlchemy URL where TPE keeps its
    study (None: in memory). ``seeds`` are where a workload never measured on the target starts
    (``autosched.neighbours``): records of it on the nearest other hardware, or of the nearest
    tuned shapes of its operator replayed onto it; the session measures them first, and the strategy
    learns from those measurements, not from the timings recorded elsewhere.
    """

    workload: Workload
    target: dict
    trials: int
    batch_size: int
    seed: int | None
    history: Sequence[RecordView]
    cost_model: CostModel
    study_storage: str | None
    seeds: Sequence[RecordView] = ()


def _evolutionary(job: SearchJob) -> SearchStrategy:
    from autosched.costmodel.adapter import SearchCostModel
    from autosched.search.evolutionary import EvolutionarySearch, population_for

    return EvolutionarySearch(
        job.workload,
        job.target,
        SearchCostModel(job.cost_model, job.workload.key, job.seed or 0),
        batch_size=job.batch_size,
        seed=job.seed,
        history=job.history,
        population_size=population_for(job.trials),
    )


def _tpe(job: SearchJob) -> SearchStrategy:
    from autosched.search.tpe import TPESearch, study_name

    return TPESearch(
        job.workload,
        job.target,
        batch_size=job.batch_size,
        seed=job.seed,
        history=job.history,
        storage=job.study_storage,
        study_name=study_name(job.workload, job.target),
    )


def _random(job: SearchJob) -> SearchStrategy:
    from autosched.search.random import RandomSearch

    return RandomSearch(
        job.workload, job.target, batch_size=job.batch_size, seed=job.seed, history=job.history
    )


STRATEGIES: dict[str, Callable[[SearchJob], SearchStrategy]] = {
    "evolutionary": _evolutionary,
    "tpe": _tpe,
    "random": _random,
}
STRATEGY_NAMES: tuple[str, ...] = tuple(STRATEGIES)
DEFAULT_STRATEGY = "evolutionary"
STRATEGY_HELP = f"Search strategy: {', '.join(STRATEGY_NAMES)}."


def check_strategy(name: str) -> str:
    """``name`` if it names a strategy. Raises UserError otherwise."""
    if name not in STRATEGIES:
        raise UserError(
            f"unknown search strategy {name!r}; choose one of {', '.join(STRATEGY_NAMES)}"
        )
    return name


def make_strategy(name: str, job: SearchJob) -> SearchStrategy:
    """The strategy ``name`` for ``job``.

    Raises:
        UserError: an unknown strategy name, or a design space MetaSchedule cannot build.
    """
    return STRATEGIES[check_strategy(name)](job)
