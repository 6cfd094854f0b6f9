"""Candidate features: MetaSchedule's per-store features, pooled into one vector per candidate.

Per-store features describe each buffer store of a scheduled program (loop structure, arithmetic,
memory access, reuse); a program has one row per store. Pooling them by sum and by max gives a
fixed-length vector that any regressor or ranker can use.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tvm.s_tir.meta_schedule import TuneContext
from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

PER_STORE_WIDTH = 164
FEATURE_WIDTH = 2 * PER_STORE_WIDTH + 1

_extractor: PerStoreFeature | None = None


def _per_store_extractor() -> PerStoreFeature:
    global _extractor
    if _extractor is None:
        _extractor = PerStoreFeature(extract_workload=False)
    return _extractor


def pool(per_store: np.ndarray) -> np.ndarray:
    """One candidate's per-store rows pooled into a vector: sum, max, and the number of stores."""
    if per_store.shape[0] == 0:
        return np.zeros(FEATURE_WIDTH, dtype=np.float32)
    return np.concatenate(
        [per_store.sum(axis=0), per_store.max(axis=0), [per_store.shape[0]]]
    ).astype(np.float32)


def candidate_features(context: TuneContext, candidates: Sequence[MeasureCandidate]) -> np.ndarray:
    """The pooled feature matrix of ``candidates``: one row of FEATURE_WIDTH per candidate."""
    if not candidates:
        return np.zeros((0, FEATURE_WIDTH), dtype=np.float32)
    per_store = _per_store_extractor().extract_from(context, list(candidates))
    return np.stack([pool(rows.numpy()) for rows in per_store])
