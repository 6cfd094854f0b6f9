"""`autosched bench models`: a tiny run's JSON (every contender timed, both tuners' wall time,
the figures consistent with each other), an unknown model name refused in one line, and the stock
tuner's child stopped with every process it started."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers import Cli, autosched

CONTENDERS = {
    "autosched",
    "tvm_metaschedule",
    "tvm_untuned",
    "pytorch_eager",
    "torch_compile",
    "onnxruntime",
}
ROW_FIELDS = {
    "model", "summary", "cpu", "threads", "trials", "autosched_trials", "tasks", "latency",
    "autosched_speedup", "autosched_tune_secs", "stock_tune_secs", "max_abs_error",
    "estimated_us", "slowest_task", "slowest_task_us", "handoff_us", "own_read_us",
    "by_placement",
}  # fmt: skip


@pytest.mark.slow
def test_a_tiny_run_reports_every_contender_of_the_mlp(tmp_path: Path) -> None:
    # stock TVM's fixed start-up alone is about a minute: left out here, as the option allows;
    # the fewest rounds of timing
    result = autosched(
        "bench", "models", "--models", "mlp", "--trials", "2", "--no-stock", "--rounds", "5",
        "--json", "--work-dir", "kept", cwd=tmp_path,
    )  # fmt: skip
    assert (tmp_path / "kept" / "mlp" / "mlp.pt2").is_file()  # the model's files are kept
    document = json.loads(result.stdout)
    assert document["trials"] == 2 and document["target"]["kind"] == "llvm"
    (row,) = document["rows"]
    assert set(row) == ROW_FIELDS
    assert row["model"] == "mlp" and row["trials"] == 2
    assert row["threads"] == document["target"]["num-cores"]
    assert f"{row['threads']} cores" in row["cpu"]
    assert 0 < row["autosched_trials"] <= 2 and row["tasks"] >= 2
    assert row["autosched_tune_secs"] > 0 and row["stock_tune_secs"] is None
    assert 0 <= row["max_abs_error"] < 1e-3  # the tuned model's outputs match PyTorch eager's
    assert row["slowest_task"] and 0 < row["slowest_task_us"] <= row["estimated_us"]
    assert set(row["latency"]) == CONTENDERS
    assert row["latency"].pop("tvm_metaschedule")["note"] == "left out (--no-stock)"
    for name, latency in row["latency"].items():
        assert latency["note"] is None, (name, latency["note"])
        assert 0 < latency["min_us"] <= latency["median_us"] <= latency["max_us"], name
        assert latency["repeats"] == 5 and len(latency["samples_us"]) == 5
        assert min(latency["samples_us"]) == latency["min_us"]
    # every contender timed in the same rounds, the cores' placement read after each
    assert len({latency["repeats"] for latency in row["latency"].values()}) == 1
    rounds = row["latency"]["autosched"]["repeats"]
    assert len(row["handoff_us"]) == len(row["own_read_us"]) == rounds
    assert all(us > 0 for us in row["handoff_us"] + row["own_read_us"])
    placements = row["by_placement"]  # empty where the cores stayed in one placement
    assert not placements or sum(reading["rounds"] for reading in placements.values()) == rounds
    ours = row["latency"]["autosched"]["median_us"]
    assert set(row["autosched_speedup"]) == CONTENDERS - {"autosched"}
    assert row["autosched_speedup"].pop("tvm_metaschedule") is None
    for name, speedup in row["autosched_speedup"].items():
        assert speedup == pytest.approx(row["latency"][name]["median_us"] / ours)


def test_rounds_timed_near_and_far_are_read_apart() -> None:
    from autosched.bench.models import Contender, Latency, ModelRow
    from autosched.bench.timing import Timing
    from autosched.machine.handoff import Placement

    near, far = Placement(20e-6, 19e-6), Placement(80e-6, 19e-6)
    ours = Latency(Contender.AUTOSCHED, Timing((0.010, 0.030, 0.012, 0.011, 0.028)))
    theirs = Latency(Contender.ONNXRUNTIME, Timing((0.015, 0.020, 0.016, 0.014, 0.021)))
    untimed = Latency(Contender.TORCH_COMPILE, None, "left out")
    far_slower = Latency(Contender.TVM_UNTUNED, Timing((0.5, 0.9, 0.7)))  # the first 3 rounds
    row = ModelRow(
        "resnet18", "", "cpu", 2, 8, 8, 1, (ours, theirs, untimed, far_slower), 1.0, None, 0.0,
        1.0, None, None, placements=(near, far, near, near, far),
    )  # fmt: skip
    (near_rounds, far_rounds) = row.by_placement()
    assert (near_rounds.far, near_rounds.rounds, far_rounds.far, far_rounds.rounds) == (
        False, 3, True, 2,
    )  # fmt: skip
    assert near_rounds.median_us == {
        Contender.AUTOSCHED: pytest.approx(11000), Contender.ONNXRUNTIME: pytest.approx(15000),
        Contender.TVM_UNTUNED: pytest.approx(600000),
    }  # fmt: skip
    assert far_rounds.median_us[Contender.TVM_UNTUNED] == pytest.approx(900000)
    assert far_rounds.speedup_over(Contender.ONNXRUNTIME) == pytest.approx(20.5 / 29)
    assert far_rounds.speedup_over(Contender.TORCH_COMPILE) is None
    document = row.as_json()["by_placement"]
    assert document["near"]["autosched_speedup"] == {
        "onnxruntime": pytest.approx(15 / 11), "tvm_untuned": pytest.approx(600 / 11)
    }  # fmt: skip
    assert document["far"]["median_us"]["autosched"] == pytest.approx(29000)
    always_far = ModelRow(**{**row.__dict__, "placements": (far,) * 5})
    assert always_far.by_placement() == []
    assert always_far.as_json()["by_placement"] == {}


def test_an_unknown_model_is_one_line_and_exit_code_2(cli: Cli) -> None:
    result = cli("bench", "models", "--models", "mlp,gpt5", "--trials", "2")
    assert result.code == 2
    assert result.err.strip().splitlines() == [
        "error: unknown model gpt5; models: mlp, resnet18, bert_layer, mobilenet_v2, convs2s"
    ]


def test_a_work_dir_that_is_not_empty_is_refused_with_exit_code_2(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "notes.txt").write_text("mine")
    result = cli("bench", "models", "--models", "mlp", "--trials", "2", "--work-dir", "kept")
    assert result.code == 2
    assert result.err.strip().splitlines() == [
        f"error: Invalid value for --work-dir: {Path('kept')} is not empty"
    ]
    assert [path.name for path in (tmp_path / "kept").iterdir()] == ["notes.txt"]


# A child that starts a grandchild (as stock MetaSchedule starts its pools), writes
# the grandchild's pid, then exits with status 3 or, given "wait", sleeps.
_PARENT_OF_A_SLEEPER = """
import subprocess, sys
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(sleeper.pid, flush=True)
if sys.argv[1] == "wait":
    sleeper.wait()
sys.exit(3)
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped by init, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _sleeper_pid(output: Path) -> int:
    deadline = time.monotonic() + 10
    while not output.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    return int(output.read_text().split()[0])


def test_a_child_that_exits_takes_the_processes_it_started_with_it(tmp_path: Path) -> None:
    from autosched.bench.models import run_process_group

    output = tmp_path / "output"
    with output.open("w") as stream:
        status = run_process_group(
            [sys.executable, "-c", _PARENT_OF_A_SLEEPER, "exit"], stream, os.environ
        )
    assert status == 3
    assert _gone(_sleeper_pid(output))


def test_an_interrupted_wait_kills_the_child_and_what_it_started(tmp_path: Path) -> None:
    from autosched.bench.models import run_process_group

    output = tmp_path / "output"

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 3.0)
    try:
        with output.open("w") as stream, pytest.raises(KeyboardInterrupt):
            run_process_group(
                [sys.executable, "-c", _PARENT_OF_A_SLEEPER, "wait"], stream, os.environ
            )
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert _gone(_sleeper_pid(output))
