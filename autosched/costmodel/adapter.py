"""The bridge that lets MetaSchedule's evolutionary search consult a `CostModel`.

The search asks for predictions of the programs it evolves; our tuning loop reports measurements
through ``update``. Until the model has seen enough successful measurements it answers with
seeded random scores, as MetaSchedule's own models do.
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

    def predict(self, context: TuneContext, candidates: list[MeasureCandidate]) -> np.ndarray:
        if not self.model.trained:
            return self._rng.uniform(size=len(candidates))
        return self.model.predict(candidate_features(context, candidates))
