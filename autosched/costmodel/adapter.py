"""The bridge that lets MetaSchedule's evolutionary search consult a `CostModel`.

The search asks for predictions of the programs it evolves; our tuning loop reports measurements
through ``update``. Until the model has seen enough successful measurements it answers with
seeded random scores, as MetaSchedule's own models do.

MetaSchedule reads a score as a predicted fraction of the best throughput: it keeps the
best-scored programs, draws parents in proportion to their scores, and counts a negative score
as zero. A ranking model's scores only order programs, and are of any sign: a shared ranking
model scored 98 to 100% of the sampled programs of a convolution at or below zero, which leaves
the evolution drawing every parent from the few above it (from the first program when none is).
So the search hears the model's scores mapped linearly onto [0, 1] over the first population
scored after each fit (its worst at 0, its best at 1), a map fixed until the next fit so that
later generations compare with it; a program scored below that population's worst gets a small
positive score.
"""

from __future__ import annotations

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule import TuneContext
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

from autosched.costmodel.base import CostModel
from autosched.costmodel.features import candidate_features

MIN_TRAINING_SAMPLES = 16
# A shared model is fine-tuned only from this many measurements of the job's workload: on fewer,
# leave-workload-out scores got worse than the shared model's own (see benchmarks/README.md).
MIN_FINE_TUNE_SAMPLES = 64
RETRAIN_GROWTH = 0.2
# What the search hears for a program scored below the worst of the population the scale was
# set on: a parent still, if rarely drawn.
FLOOR = 1e-3


def median_secs(result: RunnerResult) -> float | None:
    """A runner result's median time, or None when it failed."""
    if result.error_msg is not None or not result.run_secs:
        return None
    return float(np.median([float(sample) for sample in result.run_secs]))


@derived_object
class SearchCostModel(PyCostModel):
    """Serves one workload's search from a (possibly shared) cost model.

    Args:
        model: the model to train and consult.
        group: the workload key under which this search's measurements are filed.
        seed: seeds the random scores given before the model is trained.
    """

    def __init__(self, model: CostModel, group: str, seed: int = 0) -> None:
        super().__init__()
        self.model = model
        self.group = group
        self._rng = np.random.default_rng(seed)
        self._scale: tuple[float, float] | None = None  # the worst and best score mapped to 0, 1

    def update(
        self,
        context: TuneContext,
        candidates: list[MeasureCandidate],
        results: list[RunnerResult],
    ) -> None:
        """Add measurements; fit once there are enough (more for fine-tuning a shared model),
        then refit whenever the data grew by a fifth since the last fit."""
        if not candidates:
            return
        features = candidate_features(context, candidates)
        self.model.add(self.group, features, [median_secs(result) for result in results])
        grown = self.model.num_samples - self.model.trained_on
        enough = MIN_FINE_TUNE_SAMPLES if self.model.has_base else MIN_TRAINING_SAMPLES
        if self.model.num_samples >= enough and (
            self.model.trained_on == 0 or grown >= RETRAIN_GROWTH * self.model.trained_on
        ):
            self.model.fit()
            self._scale = None

    def scores(self, context: TuneContext, candidates: list[MeasureCandidate]) -> np.ndarray:
        """The model's own scores of ``candidates`` (higher for faster), as the log records them.

        Raises:
            RuntimeError: the model is not trained.
        """
        return self.model.predict(candidate_features(context, candidates))

    def predict(self, context: TuneContext, candidates: list[MeasureCandidate]) -> np.ndarray:
        """Scores for MetaSchedule: positive, 0 to 1 over the first population scored since the
        last fit, beyond 1 for programs the model ranks above all of that population."""
        if not self.model.trained:
            return self._rng.uniform(size=len(candidates))
        scores = self.scores(context, candidates)
        if not len(scores):
            return scores
        if self._scale is None:
            self._scale = (float(scores.min()), float(scores.max()))
        worst, best = self._scale
        width = best - worst if best > worst else 1.0
        return np.maximum((scores - worst) / width, FLOOR)
