"""`autosched bench models`: a tiny run's JSON (every contender timed, both tuners' wall time,
the figures consistent with each other), and an unknown model name refused in one line."""

from __future__ import annotations

import json
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
    "estimated_us", "slowest_task", "slowest_task_us",
}  # fmt: skip


@pytest.mark.slow
def test_a_tiny_run_reports_every_contender_of_the_mlp(tmp_path: Path) -> None:
    # stock TVM's fixed start-up alone is about a minute: left out here, as the option allows
    result = autosched(
        "bench", "models", "--models", "mlp", "--trials", "2", "--no-stock", "--json",
        cwd=tmp_path,
    )  # fmt: skip
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
        assert latency["repeats"] >= 5
    ours = row["latency"]["autosched"]["median_us"]
    assert set(row["autosched_speedup"]) == CONTENDERS - {"autosched"}
    assert row["autosched_speedup"].pop("tvm_metaschedule") is None
    for name, speedup in row["autosched_speedup"].items():
        assert speedup == pytest.approx(row["latency"][name]["median_us"] / ours)


def test_an_unknown_model_is_one_line_and_exit_code_2(cli: Cli) -> None:
    result = cli("bench", "models", "--models", "mlp,gpt5", "--trials", "2")
    assert result.code == 2
    assert result.err.strip().splitlines() == [
        "error: unknown model gpt5; models: mlp, resnet18, bert_layer, mobilenet_v2, convs2s"
    ]
