"""The shared cost models in the tuning log: their versions, the measurements they learn from, and
the feature vectors cached for those measurements.

A family (``autosched.target.target_family``) gathers the targets whose measurements train one
model. Versions count up per family; the newest one is what a new job starts from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from autosched.errors import NotFound, UserError
from autosched.log.queries import record_of
from autosched.log.store import LogStore
from autosched.log.tables import (
    Candidate,
    CandidateFeatures,
    CostModel,
    Measurement,
    Target,
    TuningJob,
    Workload,
)
from autosched.records import WorkloadInfo
from autosched.target import target_family

_VERSION_RETRIES = 5


@dataclass(frozen=True)
class ModelInfo:
    """One stored version of a family's shared cost model (without its booster)."""

    id: int
    family: str
    version: int
    objective: str
    features: str
    created_at: datetime
    trained_on: int
    workloads: int
    last_measurement_id: int
    scores: dict[str, Any] | None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "family": self.family,
            "version": self.version,
            "objective": self.objective,
            "features": self.features,
            "created_at": self.created_at.isoformat(),
            "trained_on": self.trained_on,
            "workloads": self.workloads,
            "last_measurement_id": self.last_measurement_id,
            "scores": self.scores,
        }


@dataclass(frozen=True)
class TrainingRow:
    """One measurement of the family: what a model learns from. ``median_secs`` is None on error."""

    measurement_id: int
    candidate_id: int
    workload_id: int
    target_id: int
    trace_json: str
    median_secs: float | None


class CostModelStore(LogStore):
    """Shared cost model versions and cached features of one tuning log.

    Contract:
        * ``add`` gives each family's versions 1, 2, 3, ... even when processes add at once.
        * Cached features are written once per candidate and extractor; writing again is a no-op.
        * Thread safety: as ``TuningLog``.
    """

    def families(self) -> list[str]:
        """Families with at least one target in the log, sorted."""
        with self._log.sessions.begin() as session:
            targets = session.scalars(select(Target.target_json)).all()
        return sorted({target_family(target) for target in targets})

    def target_ids(self, family: str) -> list[int]:
        """The stored targets of ``family``."""
        with self._log.sessions.begin() as session:
            rows = session.execute(select(Target.id, Target.target_json)).all()
        return [row.id for row in rows if target_family(row.target_json) == family]

    def subject(self, workload_id: int, target_id: int) -> tuple[WorkloadInfo, dict[str, Any]]:
        """A stored workload and the JSON of a stored target."""
        with self._log.sessions.begin() as session:
            workload = self._log.workload_by_id(session, workload_id)
            target = session.scalar(select(Target.target_json).where(Target.id == target_id))
        if target is None:
            raise UserError(f"no target {target_id} in the tuning log")
        return workload, target

    def workload_labels(self, workload_ids: Iterable[int]) -> dict[int, str]:
        """A short label per workload: its name and parameters, ``matmul(M=64,N=64,K=64)``."""
        ids = list(workload_ids)
        with self._log.sessions.begin() as session:
            rows = session.execute(
                select(Workload.id, Workload.name, Workload.params).where(Workload.id.in_(ids))
            ).all()
        return {
            row.id: f"{row.name}({','.join(f'{k}={v}' for k, v in row.params.items())})"
            for row in rows
        }

    def training_rows(self, family: str, *, after: int = 0) -> list[TrainingRow]:
        """Every measurement of the family newer than measurement id ``after``, oldest first."""
        targets = self.target_ids(family)
        query = (
            select(
                Measurement.id,
                Candidate.id,
                Candidate.workload_id,
                Candidate.target_id,
                Candidate.trace_json,
                Measurement.median_secs,
            )
            .join(Candidate, Candidate.id == Measurement.candidate_id)
            .where(Candidate.target_id.in_(targets), Measurement.id > after)
            .order_by(Measurement.id)
        )
        with self._log.sessions.begin() as session:
            return [TrainingRow(*row) for row in session.execute(query)]

    def count_measurements(self, family: str, *, after: int = 0) -> int:
        """How many measurements of the family are newer than measurement id ``after``."""
        query = (
            select(func.count(Measurement.id))
            .join(Candidate, Candidate.id == Measurement.candidate_id)
            .where(Candidate.target_id.in_(self.target_ids(family)), Measurement.id > after)
        )
        with self._log.sessions.begin() as session:
            return session.scalar(query) or 0

    def cached_features(
        self, candidate_ids: Sequence[int], extractor: str
    ) -> dict[int, np.ndarray]:
        """The cached features of those candidates that have them, each flattened."""
        found: dict[int, np.ndarray] = {}
        chunk = 500  # stays under every backend's limit on bound parameters
        with self._log.sessions.begin() as session:
            for start in range(0, len(candidate_ids), chunk):
                query = select(CandidateFeatures.candidate_id, CandidateFeatures.features).where(
                    CandidateFeatures.extractor == extractor,
                    CandidateFeatures.candidate_id.in_(candidate_ids[start : start + chunk]),
                )
                for candidate_id, blob in session.execute(query):
                    found[candidate_id] = np.frombuffer(blob, dtype=np.float32)
        return found

    def cache_features(self, features: Iterable[tuple[int, np.ndarray]], extractor: str) -> None:
        """Store features by candidate id (each flattened), in one transaction; a log opened
        read-only keeps none."""
        if self._log.read_only:
            return
        values = [
            {
                "candidate_id": candidate_id,
                "extractor": extractor,
                "features": np.asarray(vector, dtype=np.float32).tobytes(),
            }
            for candidate_id, vector in features
        ]
        if not values:
            return
        with self._log.sessions.begin() as session:
            session.execute(
                self._log.insert(CandidateFeatures)
                .values(values)
                .on_conflict_do_nothing(index_elements=["candidate_id", "extractor"])
            )

    def add(
        self,
        *,
        family: str,
        objective: str,
        features: str,
        booster: bytes,
        trained_on: int,
        workloads: int,
        last_measurement_id: int,
        scores: dict[str, Any] | None = None,
    ) -> ModelInfo:
        """Store a new version of the family's model, reading the feature definition
        ``features``; it becomes the latest."""
        for _ in range(_VERSION_RETRIES):
            try:
                with self._log.sessions.begin() as session:
                    newest = session.scalar(
                        select(func.max(CostModel.version)).where(CostModel.family == family)
                    )
                    row = CostModel(
                        family=family,
                        version=(newest or 0) + 1,
                        objective=objective,
                        features=features,
                        trained_on=trained_on,
                        workloads=workloads,
                        last_measurement_id=last_measurement_id,
                        scores=scores,
                        booster=booster,
                    )
                    session.add(row)
                    session.flush()
                    return record_of(ModelInfo, row)
            except IntegrityError:  # another process took that version number first
                continue
        raise RuntimeError(f"could not number a new model version of {family}")

    def latest(self, family: str, features: str) -> ModelInfo | None:
        """The newest version of the family's model that reads the feature definition
        ``features``, or None when it has none."""
        query = (
            select(CostModel)
            .where(CostModel.family == family, CostModel.features == features)
            .order_by(CostModel.version.desc())
            .limit(1)
        )
        with self._log.sessions.begin() as session:
            row = session.scalar(query)
            return None if row is None else record_of(ModelInfo, row)

    def get(self, model_id: int) -> ModelInfo:
        """A stored version by id.

        Raises:
            NotFound: there is no such model.
        """
        with self._log.sessions.begin() as session:
            row = session.get(CostModel, model_id)
            if row is None:
                raise NotFound(f"no cost model {model_id} in the tuning log")
            return record_of(ModelInfo, row)

    def booster(self, model_id: int) -> bytes:
        """The serialised booster of a stored version."""
        with self._log.sessions.begin() as session:
            blob = session.scalar(select(CostModel.booster).where(CostModel.id == model_id))
        if blob is None:
            raise NotFound(f"no cost model {model_id} in the tuning log")
        return bytes(blob)

    def versions(self, family: str | None = None) -> list[ModelInfo]:
        """Stored versions, of one family or all, by family and then version."""
        query = select(CostModel).order_by(CostModel.family, CostModel.version)
        if family is not None:
            query = query.where(CostModel.family == family)
        with self._log.sessions.begin() as session:
            return [record_of(ModelInfo, row) for row in session.scalars(query)]

    def set_job_model(self, job_id: int, model_id: int | None) -> None:
        """Record which version a job's search started from."""
        with self._log.sessions.begin() as session:
            session.execute(
                update(TuningJob).where(TuningJob.id == job_id).values(cost_model_id=model_id)
            )

    def job_model(self, job_id: int) -> int | None:
        """The version a job's search started from; None when it started cold."""
        with self._log.sessions.begin() as session:
            return session.scalar(select(TuningJob.cost_model_id).where(TuningJob.id == job_id))
