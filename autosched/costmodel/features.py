"""Candidate features: MetaSchedule's per-store features, one row per buffer store of a program.

Per-store features describe each buffer store of a scheduled program (loop structure, arithmetic,
memory access, reuse). A candidate is the matrix of its stores' rows, as many rows as it has
stores; a model scores each store and sums the scores into the candidate's (see
``autosched.costmodel.xgb``), as Ansor's and MetaSchedule's own models do.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tvm.s_tir.meta_schedule import TuneContext
from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

PER_STORE_WIDTH = 164

StoreFeatures = Sequence[np.ndarray]
"""One float32 matrix of shape (stores, PER_STORE_WIDTH) per candidate."""

_extractor: PerStoreFeature | None = None


def _per_store_extractor() -> PerStoreFeature:
    global _extractor
    if _extractor is None:
        _extractor = PerStoreFeature(extract_workload=False)
    return _extractor


def candidate_features(
    context: TuneContext, candidates: Sequence[MeasureCandidate]
) -> list[np.ndarray]:
    """The per-store feature matrix of each of ``candidates``."""
    if not candidates:
        return []
    per_store = _per_store_extractor().extract_from(context, list(candidates))
    return [
        np.asarray(rows.numpy(), dtype=np.float32).reshape(-1, PER_STORE_WIDTH)
        for rows in per_store
    ]
