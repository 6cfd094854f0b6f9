"""CUDA: a worker on a machine with an NVIDIA GPU tunes `cuda` targets with TVM's CUDA codegen.

These tests need a GPU; elsewhere they skip and say so.
"""

from __future__ import annotations

import pytest
import tvm

from autosched.log import TuningLog
from autosched.measure import LocalMeasurer, MeasureConfig
from autosched.target import parse_target
from autosched.tuner import TuneOptions, tune
from autosched.workloads import get_workload

pytestmark = [
    pytest.mark.skipif(
        not tvm.cuda(0).exist, reason="no CUDA GPU on this machine: CUDA tuning is not exercised"
    ),
    pytest.mark.slow,  # builds real programs
]


def test_matmul_is_tuned_and_verified_on_the_gpu(tmp_path) -> None:
    target = parse_target("cuda")
    workload = get_workload("matmul", {"M": 256, "N": 256, "K": 256})
    with TuningLog(f"sqlite:///{tmp_path / 'log.db'}") as log:
        measurer = LocalMeasurer(target, MeasureConfig(repeat=3, min_repeat_ms=5))
        try:
            report = tune(
                workload, target, log, measurer, TuneOptions(trials=16, batch_size=8, seed=0)
            )
        finally:
            measurer.close()
    assert report.trials == 16
    assert report.best_latency_secs is not None, "no candidate built, ran and verified on the GPU"
    assert report.gflops is not None and report.gflops > 1.0
