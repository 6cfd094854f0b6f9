"""The XGBoost cost model: learns which candidates of a workload run fastest.

A candidate is scored as the sum of its buffer stores' scores: the booster sees one row per store
(``autosched.costmodel.features``) and learns, through objectives of our own, so that the sums
match the candidates' labels. A store that behaves alike in two programs is scored alike, however
many other stores either program has, which pooled features could not say.

Training data are grouped by workload: a candidate's label is its group's best latency over its
own latency, 1.0 for the fastest and towards 0 for slow or failed ones, so groups of different
sizes and speeds share one model. Two objectives learn from those labels: ``throughput`` regresses
them (squared error of the sums), ``pairwise`` learns only their order within each group (the
logistic loss of RankNet on pairs of candidates, each against `_PARTNERS` random partners of its
group in every boosting round, a pair weighted by how far apart its labels are: misordering a
fast candidate and a slow one costs more than two within the noise of each other).

A model may start from a pretrained booster (a shared model of the target family): until it is
fitted it predicts with that booster, and fitting adds a few boosting rounds on its own data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import xgboost as xgb

from autosched.costmodel.features import PER_STORE_WIDTH, StoreFeatures

OBJECTIVES = ("throughput", "pairwise")
# Ranking ranked better than regression on each of three logs (benchmarks/README.md); the replay
# simulator's latency guesses need ``throughput``, and ask for it.
DEFAULT_OBJECTIVE = "pairwise"
_PARAMS = {
    "max_depth": 10,
    "eta": 0.2,
    "gamma": 0.0001,
    "min_child_weight": 0.0,
    "subsample": 1.0,
    "verbosity": 0,
    "base_score": 0.0,  # a candidate's score is the sum of its stores' margins, nothing added
    "disable_default_eval_metric": 1,
}
_BOOST_ROUNDS = 120
# Rounds added to a pretrained booster: enough to learn the workload at hand, few enough that a
# handful of its measurements do not overwrite what the family's log taught.
_FINE_TUNE_ROUNDS = 30
# Random partners in its group that each candidate is ranked against, per boosting round.
_PARTNERS = 32


@dataclass
class _Group:
    features: list[np.ndarray] = field(default_factory=list)  # one matrix per candidate
    latencies: list[float] = field(default_factory=list)  # +inf for failed candidates


@dataclass(frozen=True)
class _TrainingSet:
    """Store rows, the candidate each row belongs to, and per candidate its label and group;
    groups are numbered 0, 1, ... and each one's candidates are contiguous."""

    rows: np.ndarray
    owners: np.ndarray
    labels: np.ndarray
    groups: np.ndarray


class XGBCostModel:
    """Scores a candidate as the sum of its stores' scores; a `CostModel`. It travels as its
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

    def add(self, group: str, features: StoreFeatures, latencies: Sequence[float | None]) -> None:
        """Add measurements of candidates of one workload; a None latency marks a failed one."""
        if len(features) != len(latencies):
            raise ValueError(f"{len(features)} feature matrices for {len(latencies)} latencies")
        matrices = [np.asarray(matrix, dtype=np.float32) for matrix in features]
        if any(m.ndim != 2 or m.shape[1] != PER_STORE_WIDTH for m in matrices):
            raise ValueError(f"expected per-store matrices of {PER_STORE_WIDTH} columns")
        data = self._groups.setdefault(group, _Group())
        data.features.extend(matrices)
        data.latencies.extend(np.inf if x is None else float(x) for x in latencies)

    def fit(self) -> None:
        """Fit the model on every measurement added (on top of the pretrained booster, if any);
        does nothing while none succeeded."""
        data = self._training_set()
        if not np.any(data.labels > 0):
            return
        params = {**_PARAMS, "seed": self._seed}
        if self._nthread is not None:
            params["nthread"] = self._nthread
        if self.objective == "throughput":
            objective = _squared_error_of_sums(data)
        else:
            objective = _ranknet_of_sums(data, np.random.default_rng(self._seed))
        rounds = _BOOST_ROUNDS if self._base is None else _FINE_TUNE_ROUNDS
        self._booster = xgb.train(
            params, xgb.DMatrix(data.rows), rounds, obj=objective, xgb_model=self._base
        )
        self._trained_on = len(data.labels)

    def predict(self, features: StoreFeatures) -> np.ndarray:
        """A score per candidate, higher for faster: the predicted fraction of its group's best
        throughput (``throughput``), or a score that only orders candidates (``pairwise``).

        Raises:
            RuntimeError: the model was never fitted.
        """
        booster = self._booster or self._base
        if booster is None:
            raise RuntimeError("the cost model has not been fitted yet")
        rows, owners = _stacked(features)
        margins = booster.predict(xgb.DMatrix(rows), output_margin=True)
        return np.bincount(owners, weights=margins, minlength=len(features))

    def _training_set(self) -> _TrainingSet:
        """Every measurement's store rows, label and group number, group after group."""
        matrices: list[np.ndarray] = []
        labels: list[np.ndarray] = []
        groups: list[np.ndarray] = []
        for index, data in enumerate(self._groups.values()):
            latencies = np.asarray(data.latencies, dtype=np.float64)
            matrices.extend(data.features)
            labels.append(throughput_labels(latencies))
            groups.append(np.full(len(latencies), index))
        rows, owners = _stacked(matrices)
        if not labels:
            return _TrainingSet(rows, owners, np.zeros(0), np.zeros(0, dtype=np.int64))
        return _TrainingSet(rows, owners, np.concatenate(labels), np.concatenate(groups))


_Objective = Callable[[np.ndarray, xgb.DMatrix], tuple[np.ndarray, np.ndarray]]
"""A custom XGBoost objective: gradient and hessian of the loss at each row's margin."""


def _stacked(matrices: StoreFeatures) -> tuple[np.ndarray, np.ndarray]:
    """All store rows in one matrix, and the index of the candidate each row belongs to."""
    if not len(matrices):
        return np.zeros((0, PER_STORE_WIDTH), dtype=np.float32), np.zeros(0, dtype=np.int64)
    rows = np.concatenate(matrices).astype(np.float32, copy=False)
    owners = np.repeat(np.arange(len(matrices)), [len(m) for m in matrices])
    return rows, owners


def _sums(data: _TrainingSet, margins: np.ndarray) -> np.ndarray:
    return np.bincount(data.owners, weights=margins, minlength=len(data.labels))


def _squared_error_of_sums(data: _TrainingSet) -> _Objective:
    """Half the squared error of each candidate's sum against its label: every store row of a
    candidate gets the candidate's residual as gradient, and 1 as hessian."""

    def objective(margins: np.ndarray, _: xgb.DMatrix) -> tuple[np.ndarray, np.ndarray]:
        gradient = (_sums(data, margins) - data.labels)[data.owners]
        return gradient, np.ones_like(gradient)

    return objective


def _ranknet_of_sums(data: _TrainingSet, rng: np.random.Generator) -> _Objective:
    """RankNet's logistic loss on pairs of candidates of one group with different labels, each
    pair weighted by the difference of its labels; the pairs drawn anew each round: each
    candidate against `_PARTNERS` random ones of its group."""
    first = np.searchsorted(data.groups, data.groups, side="left")  # where each one's group begins
    size = np.searchsorted(data.groups, data.groups, side="right") - first
    mine = np.repeat(np.arange(len(data.labels)), _PARTNERS)
    first, size = first[mine], size[mine]

    def objective(margins: np.ndarray, _: xgb.DMatrix) -> tuple[np.ndarray, np.ndarray]:
        sums = _sums(data, margins)
        theirs = first + (rng.random(len(mine)) * size).astype(np.int64)
        difference = data.labels[mine] - data.labels[theirs]
        ordered = difference != 0
        i, j, difference = mine[ordered], theirs[ordered], difference[ordered]
        sign, weight = np.sign(difference), np.abs(difference)
        # the modelled chance that the pair is misordered, 1 / (1 + e^x), without overflow
        wrong = np.exp(-np.logaddexp(0.0, sign * (sums[i] - sums[j])))
        n = len(data.labels)
        pull = weight * sign * wrong
        gradient = np.bincount(j, pull, n) - np.bincount(i, pull, n)
        curvature = weight * wrong * (1.0 - wrong)
        hessian = np.bincount(i, curvature, n) + np.bincount(j, curvature, n)
        return gradient[data.owners], np.maximum(hessian, 1e-6)[data.owners]

    return objective


def throughput_labels(latencies: np.ndarray) -> np.ndarray:
    """Each latency as a fraction of its group's best throughput; +inf (failed) gives 0."""
    best = latencies.min() if len(latencies) else np.inf
    if not np.isfinite(best):
        return np.zeros_like(latencies)
    return best / latencies
