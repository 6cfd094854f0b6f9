"""Training data of a target family's shared cost model, read from the tuning log.

Every measurement of the family becomes one row: the candidate's per-store feature matrix and its
median latency (+inf when it failed), grouped by workload and target. Features are extracted once,
by replaying the candidate's trace, and cached in the log; a candidate whose trace no longer
replays (another TVM version) is cached as empty and left out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from tvm.s_tir.meta_schedule import TuneContext
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

from autosched.costmodel.features import PER_STORE_WIDTH, candidate_features
from autosched.intrinsics import use_tensor_intrinsics
from autosched.log.costmodels import CostModelStore, TrainingRow
from autosched.schedule import apply_trace
from autosched.target import to_tvm_target
from autosched.workload import resolve_workload

# Names the feature definition of features.py; change it whenever that definition changes.
EXTRACTOR = f"per-store-{PER_STORE_WIDTH}"


@dataclass(frozen=True)
class Dataset:
    """Rows of measurements: features (an object array of per-store matrices), latencies (+inf:
    failed) and the group of each row.

    ``groups[i]`` indexes ``subjects``, the (workload id, target id) pairs; ``labels`` names the
    workloads by id.
    """

    features: np.ndarray
    latencies: np.ndarray
    groups: np.ndarray
    measurement_ids: np.ndarray
    subjects: list[tuple[int, int]]
    labels: dict[int, str]

    def __len__(self) -> int:
        return len(self.latencies)

    @property
    def last_measurement_id(self) -> int:
        return int(self.measurement_ids.max()) if len(self) else 0

    def select(self, rows: np.ndarray) -> Dataset:
        """The dataset of the rows where the boolean mask ``rows`` is true."""
        return Dataset(
            self.features[rows],
            self.latencies[rows],
            self.groups[rows],
            self.measurement_ids[rows],
            self.subjects,
            self.labels,
        )

    def workload_ids(self) -> np.ndarray:
        """The workload id of each row."""
        ids = np.asarray([workload_id for workload_id, _ in self.subjects], dtype=np.int64)
        return ids[self.groups] if len(self) else np.zeros(0, dtype=np.int64)


def load_dataset(
    store: CostModelStore,
    family: str,
    *,
    on_progress: Callable[[int, int], None] | None = None,
) -> Dataset:
    """Every measurement of ``family`` in the log, with features (extracting the missing ones).

    ``on_progress(done, total)`` is called as features are extracted.
    """
    rows = store.training_rows(family)
    ids = [row.candidate_id for row in rows]
    features = store.cached_features(ids, EXTRACTOR)
    missing = [row for row in rows if row.candidate_id not in features]
    by_subject: dict[tuple[int, int], list[TrainingRow]] = defaultdict(list)
    for row in missing:
        by_subject[row.workload_id, row.target_id].append(row)
    done = 0
    for (workload_id, target_id), subject_rows in by_subject.items():
        extracted = _extract(store, workload_id, target_id, subject_rows)
        store.cache_features(extracted.items(), EXTRACTOR)
        features.update(extracted)
        done += len(subject_rows)
        if on_progress is not None:
            on_progress(done, len(missing))
    return _assemble(store, rows, features)


def _extract(
    store: CostModelStore, workload_id: int, target_id: int, rows: Sequence[TrainingRow]
) -> dict[int, np.ndarray]:
    """Features of one subject's candidates; an empty vector for a trace that does not replay."""
    info, target = store.subject(workload_id, target_id)
    empty = np.zeros(0, dtype=np.float32)
    try:
        workload = resolve_workload(info.ref)
    except Exception:  # the workload no longer rebuilds here: none of its rows can be used
        return {row.candidate_id: empty for row in rows}
    use_tensor_intrinsics(target)
    context = TuneContext(mod=workload.mod, target=to_tvm_target(target))
    args_info = ArgInfo.from_prim_func(workload.func)
    found: dict[int, np.ndarray] = {}
    replayed: list[tuple[int, MeasureCandidate]] = []
    for row in rows:
        try:
            sch = apply_trace(workload.mod, row.trace_json)
        except Exception:  # a trace of another TVM version may no longer replay
            found[row.candidate_id] = empty
            continue
        replayed.append((row.candidate_id, MeasureCandidate(sch, args_info)))
    if replayed:
        matrix = candidate_features(context, [candidate for _, candidate in replayed])
        found.update((candidate_id, matrix[i]) for i, (candidate_id, _) in enumerate(replayed))
    return found


def _assemble(
    store: CostModelStore, rows: Sequence[TrainingRow], features: dict[int, np.ndarray]
) -> Dataset:
    usable = [row for row in rows if len(features.get(row.candidate_id, ()))]
    subjects = sorted({(row.workload_id, row.target_id) for row in usable})
    index = {subject: i for i, subject in enumerate(subjects)}
    matrices = np.empty(len(usable), dtype=object)
    matrices[:] = [features[row.candidate_id].reshape(-1, PER_STORE_WIDTH) for row in usable]
    return Dataset(
        features=matrices,
        latencies=np.asarray(
            [np.inf if row.median_secs is None else row.median_secs for row in usable],
            dtype=np.float64,
        ),
        groups=np.asarray(
            [index[row.workload_id, row.target_id] for row in usable], dtype=np.int64
        ),
        measurement_ids=np.asarray([row.measurement_id for row in usable], dtype=np.int64),
        subjects=subjects,
        labels=store.workload_labels(workload_id for workload_id, _ in subjects),
    )
