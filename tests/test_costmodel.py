"""The XGBoost cost model: it scores a candidate as the sum of its stores' scores, learns to rank
candidates, starts from a pretrained booster, and serves the search."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.s_tir.meta_schedule import TuneContext
from tvm.s_tir.meta_schedule.cost_model import RandomModel
from tvm.s_tir.meta_schedule.database import MemoryDatabase
from tvm.s_tir.meta_schedule.runner import RunnerResult

from autosched.costmodel import SearchCostModel, XGBCostModel
from autosched.costmodel.adapter import FLOOR, MIN_FINE_TUNE_SAMPLES
from autosched.costmodel.evaluation import pairwise_accuracy
from autosched.costmodel.features import PER_STORE_WIDTH, candidate_features
from autosched.costmodel.xgb import OBJECTIVES
from autosched.intrinsics import use_tensor_intrinsics
from autosched.target import host_target, to_tvm_target
from autosched.workloads import get_workload


@pytest.fixture(scope="module")
def sampled():
    """A tuning context and 96 candidate programs sampled from matmul's design space."""
    use_tensor_intrinsics(host_target())
    context = TuneContext(
        mod=get_workload("matmul", {"M": 128, "N": 128, "K": 128}).mod,
        target=to_tvm_target(host_target()),
        space_generator="post-order-apply",
        search_strategy="replay-trace",
        rand_state=7,
        num_threads=1,  # sampling on several threads draws other programs from run to run
    )
    context.pre_tuning(96, 96, context.generate_design_space(), MemoryDatabase(), RandomModel())
    candidates = context.generate_measure_candidates()
    assert candidates is not None and len(candidates) == 96
    return context, candidates


def _latencies(features: list[np.ndarray]) -> np.ndarray:
    """A latency that depends on the programs' store features, so there is something to learn."""
    weights = np.random.default_rng(0).uniform(-1, 1, PER_STORE_WIDTH)
    stores = np.stack([matrix.sum(axis=0) for matrix in features])
    scores = (stores - stores.mean(axis=0)) / (stores.std(axis=0) + 1e-9) @ weights
    return np.exp(scores / np.abs(scores).max())


def test_features_are_a_row_per_store_of_each_candidate(sampled) -> None:
    context, candidates = sampled
    features = candidate_features(context, candidates)
    assert len(features) == 96
    for matrix in features:
        assert matrix.dtype == np.float32 and matrix.shape[1] == PER_STORE_WIDTH
        assert matrix.shape[0] >= 1  # C's init and update at least
        assert np.isfinite(matrix).all() and matrix.any(axis=1).all()
    assert len({matrix.shape[0] for matrix in features}) > 1  # caching stages add stores


def test_a_candidates_score_is_the_sum_of_its_stores_scores(sampled) -> None:
    context, candidates = sampled
    features = candidate_features(context, candidates)
    model = XGBCostModel(seed=0)
    model.add("matmul", features[:64], list(_latencies(features)[:64]))
    model.fit()
    one, other = features[70], features[80]
    joined = np.concatenate([one, other])
    rows = [one[i : i + 1] for i in range(len(one))]
    np.testing.assert_allclose(
        model.predict([joined]), model.predict([one]) + model.predict([other]), rtol=1e-5
    )
    np.testing.assert_allclose(model.predict([one]), model.predict(rows).sum(), rtol=1e-5)


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_the_model_learns_to_rank_unseen_candidates(sampled, objective: str) -> None:
    context, candidates = sampled
    features = candidate_features(context, candidates)
    latencies = _latencies(features)
    model = XGBCostModel(seed=0, objective=objective)
    model.add("matmul", features[:64], list(latencies[:64]))
    model.fit()
    accuracy = pairwise_accuracy(model.predict(features[64:]), latencies[64:])
    assert accuracy > 0.75, f"pairwise rank accuracy on held-out candidates: {accuracy:.2f}"


def test_failed_candidates_are_learned_as_the_slowest(sampled) -> None:
    context, candidates = sampled
    features = candidate_features(context, candidates)[:48]
    latencies = [None if i % 2 else 1e-3 for i in range(48)]
    model = XGBCostModel(seed=0)
    model.add("matmul", features, latencies)
    model.fit()
    predicted = model.predict(features)
    assert predicted[1::2].mean() < predicted[0::2].mean()


def test_a_pretrained_model_predicts_with_its_base_and_fine_tuning_adds_to_it(sampled) -> None:
    context, candidates = sampled
    features = candidate_features(context, candidates)
    latencies = _latencies(features)
    shared = XGBCostModel(seed=0)
    shared.add("other", features[:48], list(latencies[:48]))
    shared.fit()
    booster = shared.booster_bytes()

    job_model = XGBCostModel.pretrained(booster, shared.objective, seed=0)
    assert job_model.trained and job_model.trained_on == 0
    np.testing.assert_array_equal(job_model.predict(features), shared.predict(features))

    job_model.add("mine", features[48:64], list(latencies[48:64]))
    job_model.fit()
    assert job_model.trained_on == 16
    assert not np.array_equal(job_model.predict(features), shared.predict(features))
    again = XGBCostModel.pretrained(booster, shared.objective, seed=0)
    np.testing.assert_array_equal(again.predict(features), shared.predict(features))


def test_an_unknown_objective_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown objective 'l2'"):
        XGBCostModel(objective="l2")


def test_an_unfitted_model_refuses_to_predict() -> None:
    with pytest.raises(RuntimeError, match="not been fitted"):
        XGBCostModel().predict([np.zeros((1, PER_STORE_WIDTH), dtype=np.float32)])


def test_features_of_another_width_or_count_are_refused() -> None:
    model = XGBCostModel()
    with pytest.raises(ValueError, match="2 feature matrices for 1 latencies"):
        model.add("matmul", [np.zeros((1, PER_STORE_WIDTH))] * 2, [1e-3])
    with pytest.raises(ValueError, match=f"matrices of {PER_STORE_WIDTH} columns"):
        model.add("matmul", [np.zeros((1, 2 * PER_STORE_WIDTH + 1))], [1e-3])
    assert model.num_samples == 0


def test_the_search_gets_seeded_random_scores_until_the_model_is_trained(sampled) -> None:
    context, candidates = sampled
    first = SearchCostModel(XGBCostModel(), "matmul", seed=3).predict(context, candidates[:8])
    again = SearchCostModel(XGBCostModel(), "matmul", seed=3).predict(context, candidates[:8])
    np.testing.assert_array_equal(first, again)

    model = XGBCostModel(seed=0)
    search_model = SearchCostModel(model, "matmul")
    latencies = _latencies(candidate_features(context, candidates))
    results = [RunnerResult(run_secs=[float(x)], error_msg=None) for x in latencies[:32]]
    search_model.update(context, candidates[:32], results)
    assert model.trained and model.trained_on == 32
    np.testing.assert_allclose(
        search_model.scores(context, candidates[32:40]),
        model.predict(candidate_features(context, candidates[32:40])),
    )


def test_the_search_hears_scores_scaled_by_the_first_population_after_each_fit(sampled) -> None:
    # MetaSchedule draws parents in proportion to the scores and counts negative ones as zero;
    # a ranking model's are of any sign
    context, candidates = sampled
    latencies = _latencies(candidate_features(context, candidates))
    results = [RunnerResult(run_secs=[float(x)], error_msg=None) for x in latencies]
    search_model = SearchCostModel(XGBCostModel(seed=0, objective="pairwise"), "matmul")
    search_model.update(context, candidates[:32], results[:32])

    population = candidates[32:]
    raw = search_model.scores(context, population)
    heard = search_model.predict(context, population)
    expected = np.maximum((raw - raw.min()) / (raw.max() - raw.min()), FLOOR)
    np.testing.assert_allclose(heard, expected, rtol=1e-6)
    assert heard.max() == pytest.approx(1.0) and heard.min() == FLOOR
    # the scale holds until the next fit: a program scores the same in any later population
    np.testing.assert_allclose(search_model.predict(context, population[5:9]), heard[5:9])

    search_model.update(context, candidates[32:40], results[32:40])  # a quarter more: a refit
    assert search_model.model.trained_on == 40
    later = search_model.predict(context, population[8:])
    assert later.max() == pytest.approx(1.0) and later.min() == FLOOR


def test_a_shared_model_is_fine_tuned_only_on_enough_of_the_jobs_measurements(sampled) -> None:
    context, candidates = sampled
    features = candidate_features(context, candidates)
    latencies = _latencies(features)
    shared = XGBCostModel(seed=0)
    shared.add("other", features[64:], list(latencies[64:]))
    shared.fit()
    model = XGBCostModel.pretrained(shared.booster_bytes(), shared.objective)
    search_model = SearchCostModel(model, "matmul")
    results = [RunnerResult(run_secs=[float(x)], error_msg=None) for x in latencies[:64]]
    search_model.update(context, candidates[:32], results[:32])
    assert model.trained_on == 0  # still the shared model's predictions
    np.testing.assert_array_equal(
        search_model.scores(context, candidates[64:72]), shared.predict(features[64:72])
    )
    search_model.update(context, candidates[32:64], results[32:64])
    assert model.trained_on == MIN_FINE_TUNE_SAMPLES == 64
