"""The shared cost model: versions in the log, training and leave-workload-out scores on recorded
measurements, the version each job starts from, retraining as the log grows, and `autosched model`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import Cli, run_at_once
from recorded import DATA, load_recording

from autosched.costmodel.dataset import EXTRACTOR, load_dataset
from autosched.costmodel.evaluation import leave_workload_out, pairwise_accuracy, top_k_score
from autosched.costmodel.shared import (
    RETRAIN_MIN_NEW,
    retrain_if_grown,
    starting_model,
    train_shared,
)
from autosched.costmodel.xgb import DEFAULT_OBJECTIVE
from autosched.errors import UserError
from autosched.log import TuningLog
from autosched.log.costmodels import CostModelStore
from autosched.measure import LocalMeasurer, MeasureConfig
from autosched.server.trainer import ModelTrainer
from autosched.target import host_target, target_family
from autosched.tuner import TuneOptions, tune
from autosched.workloads import get_workload

SMALL_MATMULS = DATA / "small_matmuls.json.gz"  # 3 matmul shapes, 48 tuned candidates each
FAMILY = target_family(host_target())


@pytest.fixture
def recorded(db_url: str) -> Iterator[TuningLog]:
    """A log holding the recorded small matmuls, filed under this machine's CPU."""
    log = TuningLog(db_url)
    load_recording(SMALL_MATMULS, log, host_target())
    yield log
    log.close()


def test_pairwise_accuracy_and_top_k_score_on_hand_made_rankings() -> None:
    latencies = np.array([1.0, 2.0, 4.0, np.inf])
    assert pairwise_accuracy(np.array([3.0, 2.0, 1.0, 9.0]), latencies) == 1.0
    assert pairwise_accuracy(np.array([1.0, 2.0, 3.0, 0.0]), latencies) == 0.0
    assert pairwise_accuracy(np.array([2.0, 3.0, 1.0, 0.0]), latencies) == pytest.approx(2 / 3)
    # the favourite is the 2.0 candidate: half the best throughput; the top 2 include the best
    assert top_k_score(np.array([5.0, 9.0, 1.0, 0.0]), latencies, 1) == 0.5
    assert top_k_score(np.array([5.0, 9.0, 1.0, 0.0]), latencies, 2) == 1.0
    assert top_k_score(np.array([0.0, 0.0, 0.0, 9.0]), latencies, 1) == 0.0


def test_the_shared_model_ranks_a_held_out_workload_better_than_a_model_of_its_own(
    tmp_path: Path,
) -> None:
    """Two matmuls and two convolutions, 129 real measurements each: trained on the other three,
    the shared model ranks the held-out workload's later candidates better than a fresh model
    trained on that workload's first 32 measurements, and its five favourites hold one nearly as
    fast as the best."""
    with TuningLog(f"sqlite:///{tmp_path / 'log.db'}") as log:
        load_recording(DATA / "matmuls_and_convs.json.gz", log, host_target())
        data = load_dataset(CostModelStore(log), FAMILY)
    evaluation = leave_workload_out(data, objective=DEFAULT_OBJECTIVE, first=32)
    assert len(evaluation.held_out) == 4
    shared, per_job = evaluation.mean("shared"), evaluation.mean("per_job")
    assert shared is not None and per_job is not None
    assert shared.pairwise > per_job.pairwise + 0.03
    assert shared.top5 > 0.9 and shared.top5 > per_job.top5 + 0.1
    assert shared.top1 > per_job.top1 + 0.2
    conv = next(item for item in evaluation.held_out if "H=28" in item.workload)
    assert conv.per_job is not None
    assert conv.shared.pairwise > 0.65 and conv.shared.top5 > conv.per_job.top5


def test_a_workload_with_too_few_measurements_to_score_is_not_held_out(
    recorded: TuningLog,
) -> None:
    data = load_dataset(CostModelStore(recorded), FAMILY)
    ids = data.workload_ids()
    few = ids == ids[0]
    few[np.flatnonzero(few)[15:]] = False  # 15 measurements of the first workload are left
    kept = data.select(few | (ids != ids[0]))
    evaluation = leave_workload_out(kept, objective="throughput", first=16)
    assert len(evaluation.held_out) == 2
    assert data.labels[int(ids[0])] not in {item.workload for item in evaluation.held_out}


def test_versions_count_up_per_family_even_when_added_at_once(db_url: str) -> None:
    with TuningLog(db_url) as log:
        store = CostModelStore(log)

        def add(family: str, features: str = EXTRACTOR) -> int:
            model = store.add(
                family=family,
                objective="throughput",
                features=features,
                booster=b"x",
                trained_on=1,
                workloads=1,
                last_measurement_id=1,
            )
            return model.version

        assert sorted(run_at_once(4, lambda: add("llvm:a"))) == [1, 2, 3, 4]
        assert add("cuda:sm_90") == 1
        assert add("llvm:a", features="per-store-pooled-329") == 5
        latest = store.latest("llvm:a", EXTRACTOR)
        assert latest is not None and latest.version == 4 and latest.features == EXTRACTOR
        assert [m.version for m in store.versions("llvm:a")] == [1, 2, 3, 4, 5]
        assert store.latest("llvm:none", EXTRACTOR) is None
        with pytest.raises(UserError, match="no cost model 999"):
            store.get(999)


def test_a_version_of_another_feature_definition_never_starts_a_search(
    recorded: TuningLog,
) -> None:
    store = CostModelStore(recorded)
    trained = train_shared(recorded, FAMILY, evaluate=False).model
    older = store.add(
        family=FAMILY,
        objective="throughput",
        features="per-store-pooled-329",
        booster=store.booster(trained.id),
        trained_on=1,
        workloads=1,
        last_measurement_id=1,
    )
    assert older.version == trained.version + 1
    model, version = starting_model(recorded, host_target(), seed=0)
    assert version == trained and model.has_base
    # a job that recorded the older version starts afresh rather than mix the definitions
    model, version = starting_model(recorded, host_target(), seed=0, model_id=older.id)
    assert version is None and not model.trained


def test_training_stores_a_version_with_its_data_size_and_scores(recorded: TuningLog) -> None:
    trained = train_shared(recorded, FAMILY)
    model = trained.model
    assert (model.family, model.version, model.objective) == (FAMILY, 1, DEFAULT_OBJECTIVE)
    assert model.features == EXTRACTOR
    assert model.trained_on == 3 * 49 and model.workloads == 3  # each with its baseline
    assert model.scores is not None and model.scores["workloads"] == 3
    assert 0.0 <= model.scores["shared"]["pairwise"] <= 1.0
    assert 0.0 < model.scores["shared"]["top5"] <= 1.0
    # 49 measurements per workload are too few to also learn from its first 64
    assert model.scores["per_job"] is None and model.scores["fine_tuned"] is None
    assert CostModelStore(recorded).booster(model.id)

    # features were cached: a second read extracts none
    extracted: list[int] = []
    data = load_dataset(
        CostModelStore(recorded), FAMILY, on_progress=lambda d, t: extracted.append(t)
    )
    assert extracted == [] and len(data) == 3 * 49


def test_a_family_without_measurements_cannot_be_trained(db_url: str) -> None:
    with TuningLog(db_url) as log, pytest.raises(UserError, match="no successful measurements"):
        train_shared(log, "cuda:sm_90")


def test_retraining_waits_for_enough_new_measurements(recorded: TuningLog) -> None:
    assert RETRAIN_MIN_NEW <= 3 * 49
    first = retrain_if_grown(recorded, FAMILY)
    assert first is not None and first.model.version == 1 and first.model.scores is None
    assert retrain_if_grown(recorded, FAMILY) is None
    assert ModelTrainer(recorded).step() == []


def test_the_service_trainer_trains_each_family_that_grew(recorded: TuningLog) -> None:
    assert ModelTrainer(recorded).step() == [FAMILY]
    assert CostModelStore(recorded).latest(FAMILY, EXTRACTOR) is not None


@pytest.mark.slow
def test_a_job_records_the_version_it_started_from(tmp_path: Path) -> None:
    target = host_target()
    workload = get_workload("matmul", {"M": 32, "N": 32, "K": 32})
    fast = MeasureConfig(repeat=2, min_repeat_ms=1, run_timeout_secs=5)
    with TuningLog(f"sqlite:///{tmp_path / 'log.db'}") as log:
        load_recording(SMALL_MATMULS, log, target)
        model = train_shared(log, FAMILY, evaluate=False).model
        measurer = LocalMeasurer(target, fast)
        try:
            warm = tune(
                workload, target, log, measurer, TuneOptions(trials=4, batch_size=4, finalists=0)
            )
            cold = tune(
                workload,
                target,
                log,
                measurer,
                TuneOptions(trials=4, batch_size=4, warm=False, finalists=0),
            )
        finally:
            measurer.close()
        store = CostModelStore(log)
        assert warm.cost_model == model and store.job_model(warm.job_id) == model.id
        assert cold.cost_model is None and store.job_model(cold.job_id) is None
        assert warm.as_json()["cost_model"] == {"id": model.id, "family": FAMILY, "version": 1}


@pytest.mark.slow
def test_model_train_list_and_eval_on_the_command_line(tmp_path: Path, cli: Cli) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    with TuningLog(url) as log:
        load_recording(SMALL_MATMULS, log, host_target())

    trained = cli("model", "train", "--db", url, "--objective", "pairwise", "--no-eval", "--json")
    assert trained.code == 0, trained.err
    model = json.loads(trained.out)
    assert model["version"] == 1 and model["objective"] == "pairwise" and model["scores"] is None

    listed = cli("model", "list", "--db", url, "--json")
    assert listed.code == 0, listed.err
    assert [m["id"] for m in json.loads(listed.out)] == [model["id"]]

    evaluated = cli("model", "eval", "--db", url, "--first", "16", "--json")
    assert evaluated.code == 0, evaluated.err
    document = json.loads(evaluated.out)
    assert document["family"] == FAMILY and len(document["held_out"]) == 3
    assert all(item["per_job"] is not None for item in document["held_out"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model", "train", "--db", "sqlite:///missing.db"], "no tuning log at missing.db"),
        (["model", "train", "--objective", "l2", "--db", "sqlite:///log.db"], "unknown objective"),
        (["model", "train", "--db", "sqlite:///log.db"], "no successful measurements"),
        (["model", "eval", "--db", "sqlite:///log.db"], "two workloads or more"),
        (["model", "list", "--target", "gpu", "--db", "sqlite:///log.db"], "unknown target"),
    ],
)
def test_bad_model_commands_are_one_line_errors(
    cli: Cli, tmp_path: Path, args: list[str], message: str
) -> None:
    TuningLog(f"sqlite:///{tmp_path / 'log.db'}").close()
    result = cli(*args)
    assert result.code == 2
    assert message in result.err and len(result.err.strip().splitlines()) == 1
