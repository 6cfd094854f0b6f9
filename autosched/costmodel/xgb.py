"""The XGBoost cost model: learns which candidates of a workload run fastest, with save and load.

Training data are grouped by workload (its portable key): a candidate's label is its group's best
latency over its own latency, 1.0 for the fastest and towards 0 for slow or failed ones, so groups
of different sizes and speeds share one model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xgboost as xgb

from autosched.costmodel.features import FEATURE_WIDTH

_PARAMS = {
    "objective": "reg:squarederror",
    "max_depth": 10,
    "eta": 0.2,
    "gamma": 0.0001,
    "min_child_weight": 0.0,
    "subsample": 1.0,
    "verbosity": 0,
}
_BOOST_ROUNDS = 120
_MODEL_FILE = "model.ubj"
_DATA_FILE = "data.npz"
_META_FILE = "meta.json"


@dataclass
class _Group:
    features: list[np.ndarray] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # +inf for failed candidates


class XGBCostModel:
    """A throughput model over pooled per-store features.

    Thread safety: none; one owner at a time.
    """

    def __init__(self, *, seed: int = 0, nthread: int | None = None) -> None:
        self._seed = seed
        self._nthread = nthread
        self._groups: dict[str, _Group] = {}
        self._booster: xgb.Booster | None = None
        self._trained_on = 0

    @property
    def num_samples(self) -> int:
        """Measurements added so far, failed ones included."""
        return sum(len(group.latencies) for group in self._groups.values())

    @property
    def trained_on(self) -> int:
        """How many measurements the current model was fitted on; 0 when it was never fitted."""
        return self._trained_on

    @property
    def trained(self) -> bool:
        return self._booster is not None

    def add(self, group: str, features: np.ndarray, latencies: Sequence[float | None]) -> None:
        """Add measurements of candidates of one workload; a None latency marks a failed one."""
        if features.shape != (len(latencies), FEATURE_WIDTH):
            raise ValueError(f"expected features of shape ({len(latencies)}, {FEATURE_WIDTH})")
        data = self._groups.setdefault(group, _Group())
        data.features.extend(features)
        data.latencies.extend(np.inf if x is None else float(x) for x in latencies)

    def fit(self) -> None:
        """Fit the model on every measurement added; does nothing while none succeeded."""
        xs, ys = self._training_set()
        if not np.any(ys > 0):
            return
        params = {**_PARAMS, "seed": self._seed}
        if self._nthread is not None:
            params["nthread"] = self._nthread
        self._booster = xgb.train(params, xgb.DMatrix(xs, label=ys), _BOOST_ROUNDS)
        self._trained_on = len(ys)

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Predicted normalised throughput per row (higher is faster).

        Raises:
            RuntimeError: the model was never fitted.
        """
        if self._booster is None:
            raise RuntimeError("the cost model has not been fitted yet")
        return self._booster.predict(xgb.DMatrix(features)).astype(np.float64)

    def save(self, path: Path) -> None:
        """Write the model and its training data into the directory ``path``."""
        path.mkdir(parents=True, exist_ok=True)
        if self._booster is not None:
            self._booster.save_model(path / _MODEL_FILE)
        arrays: dict[str, np.ndarray] = {}
        for index, data in enumerate(self._groups.values()):
            arrays[f"x{index}"] = np.asarray(data.features, dtype=np.float32).reshape(
                -1, FEATURE_WIDTH
            )
            arrays[f"y{index}"] = np.asarray(data.latencies, dtype=np.float64)
        np.savez_compressed(path / _DATA_FILE, **arrays)
        meta = {"groups": list(self._groups), "seed": self._seed, "trained_on": self._trained_on}
        (path / _META_FILE).write_text(json.dumps(meta))

    @classmethod
    def load(cls, path: Path) -> XGBCostModel:
        """Read a model written by `save`."""
        meta = json.loads((path / _META_FILE).read_text())
        model = cls(seed=meta["seed"])
        with np.load(path / _DATA_FILE) as arrays:
            for index, group in enumerate(meta["groups"]):
                latencies = arrays[f"y{index}"]
                model._groups[group] = _Group(list(arrays[f"x{index}"]), latencies.tolist())
        if (path / _MODEL_FILE).exists():
            model._booster = xgb.Booster(model_file=str(path / _MODEL_FILE))
            model._trained_on = meta["trained_on"]
        return model

    def _training_set(self) -> tuple[np.ndarray, np.ndarray]:
        xs: list[np.ndarray] = []
        ys: list[np.ndarray] = []
        for data in self._groups.values():
            latencies = np.asarray(data.latencies, dtype=np.float64)
            best = latencies.min()
            ys.append(best / latencies if np.isfinite(best) else np.zeros_like(latencies))
            xs.append(np.asarray(data.features, dtype=np.float32).reshape(-1, FEATURE_WIDTH))
        if not xs:
            return np.zeros((0, FEATURE_WIDTH), dtype=np.float32), np.zeros(0)
        return np.concatenate(xs), np.concatenate(ys)
