"""`autosched bench models`: the zoo's models exported as the bench takes them, rounds timed near
and far read apart, the table, an unknown model name refused in one line, and the stock tuner's
child stopped with every process it started. A whole run of the bench is in
test_bench_corpus.py."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers import Cli

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
def test_a_zoo_model_is_benched_from_the_pt2_file_it_exports(tmp_path: Path) -> None:
    """The zoo's side of the bench (its corpus side runs whole in test_bench_corpus.py): the
    model exported with ``torch.export`` to the file autosched tunes, loaded as it loads it."""
    from autosched.bench.models import chosen_models
    from autosched.model.load import load_model

    (mlp,) = chosen_models("mlp", corpus=False)
    files = mlp.export(tmp_path)
    assert files.model_file == tmp_path / "mlp.pt2" and files.onnx_file is None
    model = load_model(files.model_file)
    assert [spec.shape for spec in model.inputs] == [tuple(files.example[0].shape)]


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


def test_the_table_has_a_row_per_model_and_says_why_a_contender_has_no_time() -> None:
    from autosched.bench.models import Contender, Latency, ModelRow, models_table
    from autosched.bench.timing import Timing

    timed = Timing((0.010, 0.012, 0.011))
    latencies = tuple(
        Latency(contender, None, "left out (--no-stock)")
        if contender is Contender.STOCK_TVM
        else Latency(contender, timed)
        for contender in Contender
    )
    row = ModelRow(
        "resnet18", "", "cpu", 2, 8, 8, 3, latencies, 90.0, None, 0.0, 1.0, "conv2d", 400.0
    )  # fmt: skip
    table = models_table([row]).splitlines()
    assert table[2].startswith("| resnet18 | 3 | 8 (8) | 1.5 / - | 11.00 ")
    assert table[-1] == "- resnet18, TVM MetaSchedule: left out (--no-stock)"
    assert not any(line.startswith("Geometric mean") for line in table)  # one model: no mean


def test_over_several_models_the_table_gives_each_peers_geometric_mean() -> None:
    from autosched.bench.models import (
        Contender,
        Latency,
        ModelRow,
        geometric_mean_speedups,
        models_table,
    )
    from autosched.bench.timing import Timing

    def row(model: str, ours: float, onnxruntime: float) -> ModelRow:
        secs = {Contender.AUTOSCHED: ours, Contender.ONNXRUNTIME: onnxruntime}
        latencies = tuple(
            Latency(contender, Timing((secs[contender],) * 3))
            if contender in secs
            else Latency(contender, None, "not run")
            for contender in Contender
        )
        return ModelRow(model, "", "cpu", 2, 8, 8, 3, latencies, 90.0, None, 0.0, 1.0, "t", 4.0)

    # ONNX Runtime 2x slower on one model and 2x faster on the other: level on the whole
    rows = [row("a", 0.010, 0.020), row("b", 0.010, 0.005), row("c", 0.010, 0.010)]
    assert geometric_mean_speedups(rows) == {Contender.ONNXRUNTIME: (pytest.approx(1.0), 3)}
    assert (
        "Geometric mean of each peer's median over autosched's: ONNX Runtime 1.00x over 3 models."
        in models_table(rows).splitlines()
    )


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
