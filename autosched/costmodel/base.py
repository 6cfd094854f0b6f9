"""The cost model interface: what a search consults and teaches, whatever learns behind it.

`XGBCostModel` is the implementation autosched trains and shares; a caller of `autosched.tuner.tune`
or of the service engine may hand in any object with this shape instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from autosched.costmodel.features import StoreFeatures


class CostModel(Protocol):
    """Learns from measured candidates of workloads and predicts which candidates run fastest.

    Features are one matrix per candidate, a row of ``PER_STORE_WIDTH`` numbers per buffer store
    (``autosched.costmodel.features``); measurements are filed by group (a workload key), and
    predictions are comparable within a group (higher is faster).

    Thread safety: none; one search owns a model at a time.
    """

    @property
    def num_samples(self) -> int:
        """Measurements added so far, failed ones included."""
        ...

    @property
    def trained_on(self) -> int:
        """How many measurements the model was last fitted on; 0 when it never was."""
        ...

    @property
    def has_base(self) -> bool:
        """Whether it starts from a pretrained model, which it only fine-tunes."""
        ...

    @property
    def trained(self) -> bool:
        """Whether `predict` may be called."""
        ...

    def add(self, group: str, features: StoreFeatures, latencies: Sequence[float | None]) -> None:
        """Add measurements of candidates of one group; a None latency marks a failed one."""
        ...

    def fit(self) -> None:
        """Fit on everything added so far."""
        ...

    def predict(self, features: StoreFeatures) -> np.ndarray:
        """A score per candidate, higher for faster ones. Raises RuntimeError if not `trained`."""
        ...
