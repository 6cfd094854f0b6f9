"""Runs where nothing worked are loud: a kernel whose every trial failed exits non-zero naming the
most frequent cause; a model's task whose every trial failed says so as the reason it keeps the
default schedule, and a model of which nothing worked exits non-zero too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from faults import NoCompilerMeasurer
from model_files import write_mlp_onnx

import autosched.measure

pytestmark = pytest.mark.slow


@pytest.fixture
def no_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autosched.measure, "LocalMeasurer", NoCompilerMeasurer)


def test_a_run_where_every_trial_fails_exits_non_zero_naming_the_cause(no_compiler, cli) -> None:
    result = cli(
        "tune", "matmul", "-p", "M=32", "-p", "N=32", "-p", "K=32", "--trials", "4",
        "--finalists", "0", "--json",
    )  # fmt: skip
    assert result.code == 1
    report = json.loads(result.out)
    assert report["trials"] == report["failed"] == 4
    assert report["failure_cause"].startswith("build (5 of 5 failures): RuntimeError: cc:")
    assert result.err.strip().splitlines()[-1].startswith("every trial failed: build")


def test_a_model_of_which_nothing_worked_names_each_tasks_cause_and_exits_non_zero(
    no_compiler, cli, tmp_path: Path
) -> None:
    model = write_mlp_onnx(tmp_path / "mlp.onnx")
    result = cli("tune", str(model), "--input", "x=16x64:float32", "--trials", "4", "--json")
    assert result.code == 1, result.err
    report = json.loads(result.out)
    tuned = [task for task in report["tasks"] if task["trials"]]
    assert tuned and all(task["failed"] == task["trials"] for task in tuned)
    for task in tuned:
        assert task["default_schedule"].startswith("every trial failed: build"), task
    assert "every trial of every task failed" in result.err
