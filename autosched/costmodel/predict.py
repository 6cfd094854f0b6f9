"""Latency guesses for the replay simulator: what a program the log never measured would take.

A throughput model predicts a candidate's latency as a fraction of its workload's best throughput;
the guess is the best latency recorded for the workload divided by that fraction. Guesses serve
simulated runs only (comparing strategies without hardware time), never the tuning log.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tvm.s_tir.meta_schedule import TuneContext
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

from autosched.costmodel.features import candidate_features
from autosched.costmodel.xgb import XGBCostModel
from autosched.log import TuningLog
from autosched.records import WorkloadRef
from autosched.schedule import apply_trace
from autosched.target import target_key, to_tvm_target
from autosched.workload import Workload, resolve_workload

# A predicted fraction of the best throughput is clipped to this floor: a guess of 50x slower
# than the best already means "slow", and the model's extrapolation towards 0 means nothing.
MIN_FRACTION = 0.02


class LatencyPredictor:
    """Guesses latencies from ``model`` (trained with the ``throughput`` objective) and the best
    latencies of ``source`` on ``target``; a workload the source never timed gets no guess."""

    def __init__(self, model: XGBCostModel, source: TuningLog, target: dict) -> None:
        if model.objective != "throughput":
            raise ValueError("latency guesses need a model of the throughput objective")
        self._model = model
        self._source = source
        self._target = target
        self._tvm_target = to_tvm_target(target)
        self._workloads: dict[str, tuple[Workload, TuneContext, float | None]] = {}

    def __call__(self, ref: WorkloadRef, traces: Sequence[str]) -> list[float | None]:
        workload, context, best = self._workload(ref)
        if best is None or not traces:
            return [None] * len(traces)
        args_info = ArgInfo.from_prim_func(workload.func)
        candidates = [MeasureCandidate(apply_trace(workload.mod, t), args_info) for t in traces]
        fractions = np.clip(
            self._model.predict(candidate_features(context, candidates)), MIN_FRACTION, 1.0
        )
        return [float(best / fraction) for fraction in fractions]

    def _workload(self, ref: WorkloadRef) -> tuple[Workload, TuneContext, float | None]:
        if ref.key not in self._workloads:
            workload = resolve_workload(ref)
            context = TuneContext(mod=workload.mod, target=self._tvm_target)
            self._workloads[ref.key] = (workload, context, self._best_latency(ref.key))
        return self._workloads[ref.key]

    def _best_latency(self, workload_key: str) -> float | None:
        stored_workload = self._source.find_workload(workload_key)
        stored_target = self._source.find_target(target_key(self._target))
        if stored_workload is None or stored_target is None:
            return None
        fastest = self._source.records(stored_workload.id, stored_target.id, ok_only=True, limit=1)
        return fastest[0].median_secs if fastest else None
