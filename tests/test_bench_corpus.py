"""`autosched bench models --corpus`: the conformance corpus's models chosen by name (a name of
neither list, a corpus model without --corpus, or a corpus whose packages are missing refused in
one line), and the smallest of them through the bench's command at a tiny budget: every
contender timed in the same rounds, autosched's contender the library exported with its
manifest."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from helpers import Cli, autosched
from test_bench_models import CONTENDERS, ROW_FIELDS

CORPUS_LISTING = (
    "corpus models: transformer_encoder, bert, gpt2, t5_encoder, llama, wav2vec2, squeezenet1_1, "
    "mnasnet0_5, shufflenet_v2_x1_0, mobilenet_v3_small, regnet_y_400mf, efficientnet_b0, "
    "googlenet, resnet50, densenet121, convnext_tiny, swin_t, vit_b_16"
)


def test_an_unknown_corpus_model_is_one_line_and_exit_code_2(cli: Cli) -> None:
    result = cli("bench", "models", "--corpus", "--models", "bert,gpt5", "--trials", "2")
    assert result.code == 2
    assert result.err.strip().splitlines() == [
        f"error: unknown corpus model gpt5; {CORPUS_LISTING}"
    ]


def test_a_corpus_model_without_the_corpus_flag_is_one_line_and_exit_code_2(cli: Cli) -> None:
    result = cli("bench", "models", "--models", "mlp,bert,gpt2", "--trials", "2")
    assert result.code == 2
    assert result.err.strip().splitlines() == [
        "error: bert, gpt2 are models of the conformance corpus: add --corpus"
    ]


def test_a_corpus_whose_package_is_missing_names_the_install_command(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_spec = importlib.util.find_spec

    def without_transformers(name: str, *args: object) -> object:
        return None if name == "transformers" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_transformers)
    result = cli("bench", "models", "--corpus", "--models", "squeezenet1_1,bert", "--trials", "2")
    assert result.code == 2
    assert result.err.strip().splitlines() == [
        "error: the corpus needs transformers: pip install 'autosched[corpus]'"
    ]


@pytest.mark.slow
def test_the_smallest_corpus_model_has_every_contender_timed(tmp_path: Path) -> None:
    from autosched.bench.models import STOCK_LEFT_OUT
    from autosched.runtime import read_manifest

    # a process of its own, as a user runs it: TVM's pool starts on the threads the bench sets
    result = autosched(
        "bench", "models", "--corpus", "--models", "transformer_encoder", "--trials", "2",
        "--no-stock", "--rounds", "5", "--json", "--work-dir", "kept", cwd=tmp_path,
    )  # fmt: skip
    # stdout is `--json`'s document alone: the ONNX exporter's progress lines stay off it
    document = json.loads(result.stdout)
    # and a long run is not silent: each step and each round of tuning is told on stderr
    assert "transformer_encoder: tuning with autosched (2 trials)" in result.stderr
    assert re.search(r"transformer_encoder: tuning \S+: \d+ trials? \(\d+ left\)", result.stderr)
    assert "transformer_encoder: timing every contender side by side" in result.stderr
    assert document["trials"] == 2 and document["target"]["kind"] == "llvm"
    (row,) = document["rows"]
    assert set(row) == ROW_FIELDS
    assert row["model"] == "transformer_encoder" and row["trials"] == 2 and row["tasks"] >= 5
    assert row["threads"] == document["target"]["num-cores"]
    assert f"{row['threads']} cores" in row["cpu"]
    assert 0 < row["autosched_trials"] <= 2
    assert row["autosched_tune_secs"] > 0 and row["stock_tune_secs"] is None
    assert 0 <= row["max_abs_error"] < 1e-3  # the tuned model's outputs match PyTorch eager's
    assert row["slowest_task"] and 0 < row["slowest_task_us"] <= row["estimated_us"]
    # ONNX Runtime runs the file autosched tuned; the library is loaded by its manifest
    work = tmp_path / "kept" / "transformer_encoder"
    assert (work / "transformer_encoder.onnx").is_file()
    manifest = read_manifest(work / "autosched" / "transformer_encoder.so")
    assert manifest.kind == "model" and manifest.threads == document["target"]["num-cores"]
    assert manifest.document["source"]["path"] == str((work / "transformer_encoder.onnx").resolve())
    latency = row["latency"]
    assert set(latency) == CONTENDERS
    assert latency.pop("tvm_metaschedule")["note"] == STOCK_LEFT_OUT
    for name, timed in latency.items():
        assert timed["note"] is None, (name, timed["note"])
        assert 0 < timed["min_us"] <= timed["median_us"] <= timed["max_us"], name
        low, high = timed["interval_us"]
        assert low <= timed["median_us"] <= high, name
        assert min(timed["samples_us"]) == timed["min_us"]
    # every contender timed in the same five rounds (the untuned model, were it slower than a
    # second a call and ten times autosched's, in the first three only); the cores' placement
    # read after every round
    rounds = latency["autosched"]["repeats"]
    for name, timed in latency.items():
        assert len(timed["samples_us"]) in ((3, 5) if name == "tvm_untuned" else (5,)), name
    assert len(row["handoff_us"]) == len(row["own_read_us"]) == rounds
    assert all(us > 0 for us in row["handoff_us"] + row["own_read_us"])
    placements = row["by_placement"]  # empty where the cores stayed in one placement
    assert not placements or sum(reading["rounds"] for reading in placements.values()) == rounds
    ours = latency["autosched"]["median_us"]
    assert set(row["autosched_speedup"]) == CONTENDERS - {"autosched"}
    assert row["autosched_speedup"].pop("tvm_metaschedule") is None
    for name, speedup in row["autosched_speedup"].items():
        assert speedup == pytest.approx(latency[name]["median_us"] / ours)
