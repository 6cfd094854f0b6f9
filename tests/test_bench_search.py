"""`autosched bench search`: every arm's curve, the summary, the chart, and bad input; on the replay
simulator over recorded measurements, and once with real builds and timings."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest
from helpers import Cli
from recorded import DATA, load_recording

from autosched.log import TuningLog
from autosched.target import host_target

SHAPE = ["-p", "M=64", "-p", "N=64", "-p", "K=64"]


def _check_curves(result: dict, arms: list[str], seeds: int, trials: int) -> None:
    assert [arm["arm"] for arm in result["arms"]] == arms
    assert len(result["runs"]) == len(arms) * seeds
    for run in result["runs"]:
        counts = [point[0] for point in run["curve"]]
        bests = [point[2] for point in run["curve"]]
        assert counts == sorted(counts) and counts[-1] == trials
        assert all(a >= b for a, b in pairwise(bests))  # the best only improves
        assert bests[-1] >= result["best_us"]


@pytest.mark.slow
def test_every_arm_on_the_replay_simulator(tmp_path: Path, cli: Cli) -> None:
    url = f"sqlite:///{tmp_path / 'recorded.db'}"
    with TuningLog(url) as log:
        load_recording(DATA / "small_matmuls.json.gz", log, host_target())
    plot = tmp_path / "search.png"
    result = cli(
        "bench", "search", "matmul", *SHAPE, "--trials", "8", "--seeds", "3", "--batch", "4",
        "--arms", "cold,warm,neighbours,tpe,random",
        "--db", url, "--replay", "--json", "--plot", str(plot),
    )  # fmt: skip
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["replay"] is True
    (matmul,) = document["results"]
    _check_curves(matmul, ["cold", "warm", "neighbours", "tpe", "random"], seeds=3, trials=8)
    for run in matmul["runs"]:
        assert run["simulated"]["refused"] == 0
        assert run["simulated"]["replayed"] + run["simulated"]["predicted"] == 1 + 8
    for arm in matmul["arms"]:
        assert arm["min_best_us"] <= arm["median_best_us"] <= arm["max_best_us"]
    cold = next(arm for arm in matmul["arms"] if arm["arm"] == "cold")
    assert cold["trials_to_cold_best"] is not None  # the median seed reaches its own best
    assert plot.read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_real_builds_and_timings_without_a_source_log(cli: Cli) -> None:
    result = cli(
        "bench", "search", "matmul", "-p", "M=32", "-p", "N=32", "-p", "K=32", "--trials", "4",
        "--seeds", "1", "--batch", "4", "--arms", "cold,random", "--json",
    )  # fmt: skip
    assert result.code == 0, result.err
    (matmul,) = json.loads(result.out)["results"]
    _check_curves(matmul, ["cold", "random"], seeds=1, trials=4)
    assert all(run["simulated"] is None for run in matmul["runs"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--arms", "cold,greedy"], "unknown arm 'greedy'"),
        (["--db", "sqlite:///missing.db"], "no tuning log at missing.db"),
        (["--arms", "cold", "--replay", "--db", "sqlite:///empty.db"], "no successful"),
    ],
)
def test_bad_bench_search_input_is_a_one_line_error(
    cli: Cli, tmp_path: Path, args: list[str], message: str
) -> None:
    TuningLog(f"sqlite:///{tmp_path / 'empty.db'}").close()
    result = cli("bench", "search", "matmul", *SHAPE, "--trials", "4", *args)
    assert result.code == 2
    assert message in result.err and len(result.err.strip().splitlines()) == 1
