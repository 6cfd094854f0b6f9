"""The search strategies by name, built the same way for the local tuning loop and the service.

``evolutionary`` (the default) is MetaSchedule's evolutionary search guided by the cost model;
``tpe`` is Optuna's TPE over the design space's decisions, its study kept in the tuning log's
database; ``random`` draws every decision at random, the baseline.
"""

from __future__ import annotations

from collections.abc import Sequence

from autosched.costmodel import SearchCostModel, XGBCostModel
from autosched.errors import UserError
from autosched.records import RecordView
from autosched.search.base import SearchStrategy
from autosched.search.evolutionary import EvolutionarySearch, population_for
from autosched.search.random import RandomSearch
from autosched.search.tpe import TPESearch
from autosched.target import target_key
from autosched.workload import Workload

STRATEGIES = ("evolutionary", "tpe", "random")


def study_name(workload: Workload, target: dict) -> str:
    """The Optuna study of a workload and target: every TPE job on them continues it."""
    return f"autosched:{workload.name}:{workload.key[:12]}:{target_key(target)[:12]}"


def make_strategy(
    name: str,
    workload: Workload,
    target: dict,
    *,
    cost_model: XGBCostModel,
    trials: int,
    batch_size: int,
    seed: int | None,
    history: Sequence[RecordView],
    study_storage: str | None,
) -> SearchStrategy:
    """The strategy ``name`` for a job of ``trials`` measurements.

    ``cost_model`` guides the evolutionary search, which files the workload's measurements in it
    (the others do not consult one); TPE keeps its study at the SQLAlchemy URL ``study_storage``
    (None: in memory).

    Raises:
        UserError: an unknown strategy name, or a design space MetaSchedule cannot build.
    """
    if name == "evolutionary":
        return EvolutionarySearch(
            workload,
            target,
            SearchCostModel(cost_model, workload.key, seed or 0),
            batch_size=batch_size,
            seed=seed,
            history=history,
            population_size=population_for(trials),
        )
    if name == "tpe":
        return TPESearch(
            workload,
            target,
            batch_size=batch_size,
            seed=seed,
            history=history,
            storage=study_storage,
            study_name=study_name(workload, target),
        )
    if name == "random":
        return RandomSearch(workload, target, batch_size=batch_size, seed=seed, history=history)
    raise UserError(f"unknown search strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
