"""A new shape starts from the nearest tuned shapes of its operator: shape distance, traces that
follow their own decisions onto another shape, seeds skipped with a reason, and a tuning run that
measures them first."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import start_job

from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.subjects import ensure_subject
from autosched.measure import LocalMeasurer, MeasureConfig
from autosched.neighbours import SEED_RECORDS, neighbour_seeds, shape_distance
from autosched.records import CandidateResult, JobStatus, MeasureResult, RecordView
from autosched.schedule import apply_trace, program_hash, trace_to_json
from autosched.search.space import DesignSpace, design_space
from autosched.target import host_target, target_key
from autosched.tuner import TuneOptions, tune
from autosched.workload import Workload
from autosched.workloads import get_workload

FAST = MeasureConfig(repeat=2, min_repeat_ms=2)
TUNED = {"M": 64, "N": 64, "K": 64, "dtype": "float32"}
NEW = {"M": 48, "N": 96, "K": 80, "dtype": "float32"}


def test_shapes_are_near_in_log_space_and_other_dtypes_are_not_comparable() -> None:
    assert shape_distance(TUNED, TUNED) == 0
    assert shape_distance(TUNED, {**TUNED, "M": 128}) == pytest.approx(math.log(2))
    assert shape_distance(TUNED, {**TUNED, "M": 32, "K": 128}) == pytest.approx(2 * math.log(2))
    assert shape_distance(TUNED, {**TUNED, "dtype": "float16"}) is None
    assert shape_distance(TUNED, {"M": 64, "N": 64}) is None


def _tile_factors(trace_json: str) -> list[list[int]]:
    """The decisions of every SamplePerfectTile of a trace, in order."""
    insts, decisions = json.loads(trace_json)
    return [
        list(decision) for index, decision in decisions if insts[index][0] == "SamplePerfectTile"
    ]


def test_a_trace_follows_its_own_decisions_onto_another_shape() -> None:
    target = host_target()
    tuned, new = get_workload("matmul", TUNED), get_workload("matmul", NEW)
    sch = design_space(tuned, target, seed=0).sample(lambda _name, choices: choices[-1])
    assert sch is not None
    followed = design_space(new, target, seed=0).follow(sch.trace)
    assert followed is not None
    old_tiles, new_tiles = (
        _tile_factors(trace_to_json(sch.trace)),
        _tile_factors(trace_to_json(followed.trace)),
    )
    assert len(old_tiles) == len(new_tiles) == 3  # the i, j and k loops
    for extent, tiles in zip((48, 96, 80), new_tiles, strict=True):
        assert math.prod(tiles) == extent
    # replayed as it stands, the followed trace gives the same program
    assert program_hash(apply_trace(new.mod, trace_to_json(followed.trace)).mod) == program_hash(
        followed.mod
    )


def test_a_loop_of_another_extent_grows_at_the_tile_factor_asked_for() -> None:
    target = host_target()
    tuned = get_workload("matmul", TUNED)
    new = get_workload("matmul", {**TUNED, "M": 256})  # i 4x longer, j and k as tuned
    recorded = [[2, 4, 2, 4], [1, 8, 2, 4], [8, 8]]  # i, j (four levels each) and k

    tiles: list[str] = []  # the tiles' instructions, in the order their factors are chosen

    def choose(name: str, choices: list[int]) -> int:
        if ".f" not in name:
            return choices[-1]
        tile, factor = name.split(".f")
        if tile not in tiles:
            tiles.append(tile)
        return recorded[tiles.index(tile)][int(factor.split(".")[0])]

    sch = design_space(tuned, target, seed=0).sample(choose)
    assert sch is not None and _tile_factors(trace_to_json(sch.trace)) == recorded
    design = design_space(new, target, seed=0)
    grown = {}
    for grow_at in range(4):
        followed = design.follow(sch.trace, grow_at)
        assert followed is not None
        grown[grow_at] = _tile_factors(trace_to_json(followed.trace))
        assert grown[grow_at][1:] == recorded[1:]  # j and k keep their tiles
    assert [tiles[0] for tiles in grown.values()] == [
        [8, 4, 2, 4], [2, 16, 2, 4], [2, 4, 8, 4], [2, 4, 2, 16],
    ]  # fmt: skip


@pytest.mark.slow  # tunes one shape, then seeds and tunes another
def test_a_new_shape_measures_its_neighbours_schedules_first(tmp_path: Path) -> None:
    target = host_target()
    tuned, new = get_workload("matmul", TUNED), get_workload("matmul", NEW)
    measurer = LocalMeasurer(target, FAST)
    with TuningLog(f"sqlite:///{tmp_path / 'log.db'}") as log:
        try:
            options = TuneOptions(trials=6, batch_size=6, seed=0, finalists=0)
            tune(tuned, target, log, measurer, options)
            other_op = get_workload("softmax", {"rows": 8, "cols": 32})
            assert neighbour_seeds(log, other_op, target, _no_space).seeds == []
            found = neighbour_seeds(log, new, target, lambda: design_space(new, target, seed=0))
            assert found.source == f"{len(found.seeds)} schedules of M=64 N=64 K=64"
            assert 2 <= len(found.seeds) <= SEED_RECORDS and found.skipped == []
            report = tune(
                new, target, log, measurer, TuneOptions(trials=8, batch_size=8, seed=1, finalists=0)
            )
        finally:
            measurer.close()
        assert report.seeded_from == found.source
        stored = log.find_workload(new.key)
        stored_target = log.find_target(target_key(target))
        assert stored is not None and stored_target is not None
        measured = [r.program_hash for r in log.records(stored.id, stored_target.id)]
        # the baseline, then the seeds in their order, before anything the search proposed, as
        # many as the budget holds
        first = [seed.program_hash for seed in found.seeds[: report.trials]]
        assert set(measured[1 : 1 + len(first)]) == set(first)


def _no_space() -> DesignSpace:
    raise AssertionError("no neighbour, so no design space is built")


def test_a_record_whose_trace_does_not_replay_is_skipped_with_a_reason(tmp_path: Path) -> None:
    target = host_target()
    tuned, new = get_workload("matmul", TUNED), get_workload("matmul", NEW)
    with TuningLog(f"sqlite:///{tmp_path / 'log.db'}") as log:
        _record(log, tuned, target, '[[["GetSBlock",[],["nowhere","main"],["b0"]]],[]]')
        found = neighbour_seeds(log, new, target, lambda: design_space(new, target, seed=0))
    assert found.seeds == [] and found.source is None
    (reason,) = found.skipped
    assert "of M=64 N=64 K=64: its trace no longer replays on its own shape" in reason


def _record(log: TuningLog, workload: Workload, target: dict, trace_json: str) -> RecordView:
    """Store one verified measurement of ``trace_json`` as if a job had measured it."""
    stored_workload, stored_target = ensure_subject(log, workload, target)
    jobs = JobStore(log)
    job = start_job(log, stored_workload.id, stored_target.id, 1, strategy="evolutionary")
    result = MeasureResult(samples=(1e-5, 1e-5))
    log.record_batch(job, [CandidateResult(trace_json, "h" * 32, result, verified=True)])
    jobs.end_job(job, JobStatus.FINISHED)
    (record,) = log.records(stored_workload.id, stored_target.id)
    return record
