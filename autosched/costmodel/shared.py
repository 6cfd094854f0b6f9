"""The shared cost model of a target family: trained on the whole tuning log, versioned in it, and
the starting point of every new job's search on that family.

A version is trained on every measurement of the family (all workloads, all jobs) and stored with
its leave-workload-out scores. A new version is worth training once the family's log grew by
``RETRAIN_MIN_NEW`` measurements and a fifth since the latest one; `retrain_if_grown` checks that,
off the search's hot path (after a local run, or in the service's background).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autosched.costmodel.dataset import EXTRACTOR, load_dataset
from autosched.costmodel.evaluation import DEFAULT_FIRST, Evaluation, fit, leave_workload_out
from autosched.costmodel.xgb import DEFAULT_OBJECTIVE, XGBCostModel
from autosched.errors import UserError
from autosched.log import TuningLog
from autosched.log.costmodels import CostModelStore, ModelInfo
from autosched.target import target_family

RETRAIN_MIN_NEW = 64
RETRAIN_GROWTH = 0.2


@dataclass(frozen=True)
class Trained:
    """A new version and what training it took."""

    model: ModelInfo
    secs: float


def train_shared(
    log: TuningLog,
    family: str,
    *,
    objective: str = DEFAULT_OBJECTIVE,
    seed: int = 0,
    evaluate: bool = True,
    on_progress: Callable[[int, int], None] | None = None,
) -> Trained:
    """Train and store a new version of the family's model on every measurement in the log.

    ``evaluate`` also scores it leave-workload-out (one extra fit per workload of the family).

    Raises:
        UserError: the log has no successful measurement of the family.
    """
    started = time.perf_counter()
    store = CostModelStore(log)
    data = load_dataset(store, family, on_progress=on_progress)
    if not np.isfinite(data.latencies).any():
        known = ", ".join(store.families()) or "none"
        raise UserError(
            f"the tuning log has no successful measurements for {family} to train on "
            f"(families in the log: {known})"
        )
    model = fit(data, objective=objective, seed=seed)
    scores = None
    if evaluate and len(np.unique(data.workload_ids())) >= 2:
        scores = leave_workload_out(
            data, objective=objective, first=DEFAULT_FIRST, seed=seed
        ).summary()
    info = store.add(
        family=family,
        objective=objective,
        features=EXTRACTOR,
        booster=model.booster_bytes(),
        trained_on=len(data),
        workloads=len(np.unique(data.workload_ids())),
        last_measurement_id=data.last_measurement_id,
        scores=scores,
    )
    return Trained(info, time.perf_counter() - started)


def evaluate_family(
    log: TuningLog,
    family: str,
    *,
    objective: str = DEFAULT_OBJECTIVE,
    first: int = DEFAULT_FIRST,
    seed: int = 0,
    on_progress: Callable[[int, int], None] | None = None,
) -> Evaluation:
    """The family's leave-workload-out evaluation.

    Raises:
        UserError: the family has fewer than two workloads with successful measurements.
    """
    data = load_dataset(CostModelStore(log), family, on_progress=on_progress)
    ok_workloads = np.unique(data.workload_ids()[np.isfinite(data.latencies)])
    if len(ok_workloads) < 2:
        raise UserError(
            f"leave-workload-out needs measurements of two workloads or more for {family}; "
            f"the log has {len(ok_workloads)}"
        )
    return leave_workload_out(data, objective=objective, first=first, seed=seed)


def starting_model(
    log: TuningLog,
    target: dict,
    *,
    seed: int,
    warm: bool = True,
    model_id: int | None = None,
) -> tuple[XGBCostModel, ModelInfo | None]:
    """The cost model a job's search starts from, and the stored version it loads.

    That is version ``model_id`` if given (a job resumed elsewhere keeps its version), else the
    latest version of the target's family; a fresh model when ``warm`` is false, the family has
    no version yet, or the version reads another feature definition than this one.
    """
    store = CostModelStore(log)
    if model_id is not None:
        version: ModelInfo | None = store.get(model_id)
    else:
        version = store.latest(target_family(target), EXTRACTOR) if warm else None
    if version is None or version.features != EXTRACTOR:
        return XGBCostModel(seed=seed), None
    booster = store.booster(version.id)
    return XGBCostModel.pretrained(booster, version.objective, seed=seed), version


def retrain_if_grown(log: TuningLog, family: str) -> Trained | None:
    """Train a new version when the family's measurements grew enough since the latest one."""
    store = CostModelStore(log)
    latest = store.latest(family, EXTRACTOR)
    after = latest.last_measurement_id if latest else 0
    new = store.count_measurements(family, after=after)
    trained_on = latest.trained_on if latest else 0
    if new < max(RETRAIN_MIN_NEW, RETRAIN_GROWTH * trained_on):
        return None
    objective = latest.objective if latest else DEFAULT_OBJECTIVE
    try:
        return train_shared(log, family, objective=objective, evaluate=False)
    except UserError:  # nothing successful to learn from yet
        return None
