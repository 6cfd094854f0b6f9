"""The XGBoost cost model: learns which candidates of a workload run fastest.

Training data are grouped by workload: a candidate's label is its group's best latency over its
own latency, 1.0 for the fastest and towards 0 for slow or failed ones, so groups of different
sizes and speeds share one model. Two objectives learn from those labels: ``throughput`` regresses
them, ``pairwise`` learns only their order within each group (XGBoost's ``rank:pairwise``).

A model may start from a pretrained booster (a shared model of the target family): until it is
fitted it predicts with that booster, and fitting adds a few boosting rounds on its own data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import xgboost as xgb

from autosched.costmodel.features import FEATURE_WIDTH

OBJECTIVES = {"throughput": "reg:squarederror", "pairwise": "rank:pairwise"}
DEFAULT_OBJECTIVE = "throughput"
_PARAMS = {
    "max_depth": 10,
    "eta": 0.2,
    "gamma": 0.0001,
    "min_child_weight": 0.0,
    "subsample": 1.0,
    "verbosity": 0,
}
_BOOST_ROUNDS = 120
# Rounds added to a pretrained booster: enough to learn the workload at hand, few enough that a
# handful of its measurements do not overwrite what the family's log taught.
_FINE_TUNE_ROUNDS = 30


@dataclass
class _Group:
    features: list[np.ndarray] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # +inf for failed candidates


class XGBCostModel:
    """A throughput model over pooled per-store features; a `CostModel`. It travels as its
    booster (`booster_bytes`, `pretrained`), which the log stores as a shared model version.

    Thread safety: none; one owner at a time.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        nthread: int | None = None,
        objective: str = DEFAULT_OBJECTIVE,
        base: xgb.Booster | None = None,
    ) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}; use one of {sorted(OBJECTIVES)}")
        self._seed = seed
        self._nthread = nthread
        self.objective = objective
        self._base = base
        self._groups: dict[str, _Group] = {}
        self._booster: xgb.Booster | None = None
        self._trained_on = 0

    @classmethod
    def pretrained(cls, booster: bytes, objective: str, *, seed: int = 0) -> XGBCostModel:
        """A model that starts from a serialised booster (see `booster_bytes`)."""
        base = xgb.Booster()
        base.load_model(bytearray(booster))
        return cls(seed=seed, objective=objective, base=base)

    def booster_bytes(self) -> bytes:
        """The fitted booster, serialised (UBJSON).

        Raises:
            RuntimeError: the model was never fitted.
        """
        if self._booster is None:
            raise RuntimeError("the cost model has not been fitted yet")
        return bytes(self._booster.save_raw("ubj"))

    @property
    def num_samples(self) -> int:
        """Measurements added so far, failed ones included."""
        return sum(len(group.latencies) for group in self._groups.values())

    @property
    def trained_on(self) -> int:
        """How many measurements the current model was fitted on; 0 when it was never fitted."""
        return self._trained_on

    @property
    def has_base(self) -> bool:
        """Whether it starts from a pretrained booster."""
        return self._base is not None

    @property
    def trained(self) -> bool:
        """Whether it can predict: it was fitted, or it starts from a pretrained booster."""
        return self._booster is not None or self._base is not None

    def add(self, group: str, features: np.ndarray, latencies: Sequence[float | None]) -> None:
        """Add measurements of candidates of one workload; a None latency marks a failed one."""
        if features.shape != (len(latencies), FEATURE_WIDTH):
            raise ValueError(f"expected features of shape ({len(latencies)}, {FEATURE_WIDTH})")
        data = self._groups.setdefault(group, _Group())
        data.features.extend(features)
        data.latencies.extend(np.inf if x is None else float(x) for x in latencies)

    def fit(self) -> None:
        """Fit the model on every measurement added (on top of the pretrained booster, if any);
        does nothing while none succeeded."""
        xs, ys, groups = self._training_set()
        if not np.any(ys > 0):
            return
        params = {**_PARAMS, "objective": OBJECTIVES[self.objective], "seed": self._seed}
        if self._nthread is not None:
            params["nthread"] = self._nthread
        data = xgb.DMatrix(xs, label=ys, qid=groups if self.objective == "pairwise" else None)
        if self._base is None:
            self._booster = xgb.train(params, data, _BOOST_ROUNDS)
        else:
            self._booster = xgb.train(params, data, _FINE_TUNE_ROUNDS, xgb_model=self._base)
        self._trained_on = len(ys)

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Predicted normalised throughput per row (higher is faster).

        Raises:
            RuntimeError: the model was never fitted.
        """
        booster = self._booster or self._base
        if booster is None:
            raise RuntimeError("the cost model has not been fitted yet")
        return booster.predict(xgb.DMatrix(features)).astype(np.float64)

    def _training_set(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Features, labels and group numbers of every measurement, group after group."""
        xs: list[np.ndarray] = []
        ys: list[np.ndarray] = []
        groups: list[np.ndarray] = []
        for index, data in enumerate(self._groups.values()):
            latencies = np.asarray(data.latencies, dtype=np.float64)
            ys.append(throughput_labels(latencies))
            xs.append(np.asarray(data.features, dtype=np.float32).reshape(-1, FEATURE_WIDTH))
            groups.append(np.full(len(latencies), index))
        if not xs:
            return np.zeros((0, FEATURE_WIDTH), dtype=np.float32), np.zeros(0), np.zeros(0)
        return np.concatenate(xs), np.concatenate(ys), np.concatenate(groups)


def throughput_labels(latencies: np.ndarray) -> np.ndarray:
    """Each latency as a fraction of its group's best throughput; +inf (failed) gives 0."""
    best = latencies.min() if len(latencies) else np.inf
    if not np.isfinite(best):
        return np.zeros_like(latencies)
    return best / latencies
