"""Every search strategy through the same tuning loop, on the replay simulator: recorded
measurements of small matmuls answer what they can, a throughput model guesses the rest, and
nothing is built, timed, or written back into the recording's log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from recorded import DATA, load_recording

from autosched.costmodel import XGBCostModel
from autosched.costmodel.predict import LatencyPredictor
from autosched.costmodel.shared import train_shared
from autosched.errors import UserError
from autosched.log import TuningLog
from autosched.log.costmodels import CostModelStore
from autosched.replay import ReplayMeasurer
from autosched.search.registry import STRATEGY_NAMES
from autosched.search.tpe import study_name
from autosched.target import host_target, target_family, target_key
from autosched.tuner import TuneOptions, tune
from autosched.workloads import get_workload

WORKLOAD = get_workload("matmul", {"M": 64, "N": 64, "K": 64})


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TuningLog, XGBCostModel]]:
    """The recorded small matmuls, and a throughput model trained on them."""
    path = tmp_path_factory.mktemp("source") / "recorded.db"
    log = TuningLog(f"sqlite:///{path}")
    load_recording(DATA / "small_matmuls.json.gz", log, host_target())
    family = target_family(host_target())
    model = train_shared(log, family, objective="throughput", evaluate=False).model
    booster = CostModelStore(log).booster(model.id)
    yield log, XGBCostModel.pretrained(booster, model.objective)
    log.close()


def _measured(log: TuningLog) -> int:
    workload = log.find_workload(WORKLOAD.key)
    target = log.find_target(target_key(host_target()))
    assert workload is not None and target is not None
    return log.count_records(workload.id, target.id)


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_each_strategy_tunes_on_the_replay_simulator(
    source: tuple[TuningLog, XGBCostModel], strategy: str, tmp_path: Path
) -> None:
    recorded, model = source
    target = host_target()
    before = _measured(recorded)
    measurer = ReplayMeasurer(recorded, target, predict=LatencyPredictor(model, recorded, target))
    options = TuneOptions(trials=16, batch_size=8, seed=3, strategy=strategy, warm=False)
    with TuningLog(f"sqlite:///{tmp_path / 'simulated.db'}") as scratch:
        report = tune(WORKLOAD, target, scratch, measurer, options)
        assert report.trials == 16 and report.failed == 0
        assert _measured(scratch) == 1 + 16  # the baseline, then every trial
        assert report.best_latency_secs is not None
        assert report.best_latency_secs < report.baseline_latency_secs
        if strategy == "tpe":
            study = optuna.load_study(
                study_name=study_name(WORKLOAD, target), storage=scratch.engine_url
            )
            assert len([t for t in study.trials if t.value is not None]) >= 16
    counts = measurer.counts
    assert counts.refused == 0 and counts.replayed + counts.predicted == 1 + 16
    assert counts.replayed >= 1  # the baseline at least is a real measurement
    assert _measured(recorded) == before


def test_simulated_results_are_not_recorded_into_the_log_they_replay(
    source: tuple[TuningLog, XGBCostModel],
) -> None:
    recorded, _ = source
    measurer = ReplayMeasurer(recorded, host_target())
    with pytest.raises(UserError, match="cannot be recorded into the log they replay"):
        tune(WORKLOAD, host_target(), recorded, measurer, TuneOptions(trials=4, batch_size=4))
