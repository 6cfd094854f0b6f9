"""`autosched bench models --corpus`: the conformance corpus's models chosen by name (a name of
neither list, a corpus model without --corpus, or a corpus whose packages are missing refused in
one line), and the smallest of them through the bench at a tiny budget: every contender timed or
the reason it is not, autosched's contender the library exported with its manifest."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from helpers import Cli

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
def test_the_smallest_corpus_model_has_every_contender_timed_or_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from autosched.bench import models
    from autosched.runtime import read_manifest
    from autosched.target import host_target

    monkeypatch.setenv("TVM_NUM_THREADS", "1")  # restored after the bench sets it
    (chosen,) = models.chosen_models("transformer_encoder", corpus=True)
    target = host_target()
    (row,) = models.bench_models(
        [chosen], target, trials=2, stock=False, rounds=3, work_dir=tmp_path / "kept"
    )  # 3 rounds: the untuned encoder takes ~0.5 s a call
    # the ONNX exporter's progress lines stay off stdout, which carries `--json`'s document
    assert "[torch.onnx]" not in capsys.readouterr().out
    work = tmp_path / "kept" / "transformer_encoder"
    # ONNX Runtime runs the file autosched tuned; the library is loaded by its manifest
    assert (work / "transformer_encoder.onnx").is_file()
    manifest = read_manifest(work / "autosched" / "transformer_encoder.so")
    assert manifest.kind == "model" and manifest.threads == target["num-cores"]
    assert manifest.document["source"]["path"] == str((work / "transformer_encoder.onnx").resolve())
    document = row.as_json()
    assert document["model"] == "transformer_encoder" and document["tasks"] >= 5
    assert 0 < document["autosched_trials"] <= 2 and document["stock_tune_secs"] is None
    latency = document["latency"]
    assert latency.pop("tvm_metaschedule")["note"] == models.STOCK_LEFT_OUT
    for name, timed in latency.items():
        assert timed["median_us"] is not None or timed["note"], name
        if timed["median_us"] is not None:
            low, high = timed["interval_us"]
            assert low <= timed["median_us"] <= high, name
            assert len(timed["samples_us"]) == 3
    assert latency["autosched"]["median_us"] is not None
    table = models.models_table([row]).splitlines()
    assert table[2].startswith("| transformer_encoder | ")
    assert "left out (--no-stock)" in table[-1]
    json.dumps(document)  # as `--json` writes it
