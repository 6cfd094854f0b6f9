"""How well a cost model ranks the candidates of a workload it was not trained on.

Leave-workload-out: each workload of a family is held out in turn; a shared model is trained on
the others and scored on the held-out workload's candidates. Two references show the value of
transfer: a per-job model trained only on the held-out workload's first measurements (what a cold
search knows after its first batches), and the shared model fine-tuned on those same
measurements (what a warm search knows then). All three are scored on the remaining measurements.

Scores, as TenSet reports them: pairwise rank accuracy (the fraction of pairs of successful
candidates with different latencies that the model orders correctly), and top-k peak score (the
best throughput among the model's k favourite candidates over the best throughput there is).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from autosched.costmodel.dataset import Dataset
from autosched.costmodel.xgb import XGBCostModel

# The held-out workload's measurements a per-job model learns from: its first batches.
DEFAULT_FIRST = 64
# Fewer successful test rows than this make no score worth reporting: a workload measured less
# (a design space of two programs) is not held out, though it trains the others' models.
_MIN_TEST_ROWS = 16


@dataclass(frozen=True)
class Scores:
    pairwise: float
    top1: float
    top5: float


@dataclass(frozen=True)
class HeldOut:
    """The scores on one held-out workload; the references are None when it has too few rows."""

    workload: str
    rows: int
    shared: Scores
    per_job: Scores | None
    fine_tuned: Scores | None


@dataclass(frozen=True)
class Evaluation:
    objective: str
    first: int
    held_out: list[HeldOut]

    def mean(self, model: str) -> Scores | None:
        """The mean scores of ``model`` (``shared``, ``per_job`` or ``fine_tuned``)."""
        scores = [getattr(item, model) for item in self.held_out]
        scores = [s for s in scores if s is not None]
        if not scores:
            return None
        return Scores(
            *(float(np.mean([getattr(s, name) for s in scores])) for name in Scores.__annotations__)
        )

    def summary(self) -> dict[str, object]:
        """Mean scores per model, as the log stores them with a model version."""
        return {
            "method": "leave-workload-out",
            "objective": self.objective,
            "first": self.first,
            "workloads": len(self.held_out),
            **{
                model: None if (mean := self.mean(model)) is None else asdict(mean)
                for model in ("shared", "per_job", "fine_tuned")
            },
        }

    def as_json(self) -> dict[str, object]:
        return {
            **self.summary(),
            "held_out": [
                {
                    "workload": item.workload,
                    "rows": item.rows,
                    **{
                        model: None if (s := getattr(item, model)) is None else asdict(s)
                        for model in ("shared", "per_job", "fine_tuned")
                    },
                }
                for item in self.held_out
            ],
        }


def pairwise_accuracy(predicted: np.ndarray, latencies: np.ndarray) -> float:
    """The fraction of pairs of successful candidates, with different latencies, in the right
    order (higher prediction for the lower latency); 0.5 when there is no such pair."""
    ok = np.isfinite(latencies)
    predicted, latencies = predicted[ok], latencies[ok]
    faster = latencies[:, None] < latencies[None, :]
    if not faster.any():
        return 0.5
    return float((predicted[:, None] > predicted[None, :])[faster].mean())


def top_k_score(predicted: np.ndarray, latencies: np.ndarray, k: int) -> float:
    """The best throughput among the k highest predictions over the best throughput of all."""
    best = latencies.min()
    if not np.isfinite(best):
        return 0.0
    chosen = np.argsort(-predicted, kind="stable")[:k]
    return float(best / latencies[chosen].min())


def scores(predicted: np.ndarray, latencies: np.ndarray) -> Scores:
    return Scores(
        pairwise=pairwise_accuracy(predicted, latencies),
        top1=top_k_score(predicted, latencies, 1),
        top5=top_k_score(predicted, latencies, 5),
    )


def fit(
    data: Dataset, *, objective: str, seed: int, base: XGBCostModel | None = None
) -> XGBCostModel:
    """A model fitted on ``data``, grouped by subject; on top of ``base``'s booster if given."""
    if base is None:
        model = XGBCostModel(seed=seed, objective=objective)
    else:
        model = XGBCostModel.pretrained(base.booster_bytes(), objective, seed=seed)
    for group in np.unique(data.groups):
        rows = data.groups == group
        model.add(str(group), data.features[rows], list(data.latencies[rows]))
    model.fit()
    return model


def leave_workload_out(
    data: Dataset, *, objective: str, first: int = DEFAULT_FIRST, seed: int = 0
) -> Evaluation:
    """Hold out each workload in turn (see the module docstring)."""
    workload_ids = data.workload_ids()
    held_out: list[HeldOut] = []
    for workload_id in np.unique(workload_ids):
        held = workload_ids == workload_id
        train = data.select(~held)
        if not np.isfinite(train.latencies).any():
            continue
        if np.isfinite(data.latencies[held]).sum() < _MIN_TEST_ROWS:
            continue
        shared = fit(train, objective=objective, seed=seed)
        test = data.select(held)
        order = np.argsort(test.measurement_ids, kind="stable")
        early = np.zeros(len(test), dtype=bool)
        early[order[:first]] = True
        rest = test.select(~early)
        per_job = fine_tuned = None
        if np.isfinite(rest.latencies).sum() >= _MIN_TEST_ROWS and first > 0:
            known = test.select(early)
            local = fit(known, objective=objective, seed=seed)
            tuned = fit(known, objective=objective, seed=seed, base=shared)
            if local.trained:
                per_job = scores(local.predict(rest.features), rest.latencies)
            if tuned.trained:
                fine_tuned = scores(tuned.predict(rest.features), rest.latencies)
        else:
            rest = test
        held_out.append(
            HeldOut(
                workload=data.labels.get(int(workload_id), str(workload_id)),
                rows=len(rest),
                shared=scores(shared.predict(rest.features), rest.latencies),
                per_job=per_job,
                fine_tuned=fine_tuned,
            )
        )
    return Evaluation(objective=objective, first=first, held_out=held_out)
