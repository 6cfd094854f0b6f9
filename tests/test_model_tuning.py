"""Whole models tuned end to end on this machine with tiny budgets, through the command line:
an MLP from ONNX and a conv-relu-pool block from PyTorch, their trials split across tasks, the
compiled model checked against ONNX Runtime and PyTorch eager, exported as a Relax VM library
and as a MetaSchedule database that TVM's own passes apply; a layer another model
already tuned is reused; a task the admission refuses keeps the default schedule."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from helpers import Cli
from model_files import write_conv_block_pt2, write_mlp_onnx
from test_model_load import ANNOTATED_RELAX_MODEL

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class TunedModels:
    """One log, in which the MLP, then the conv block were tuned."""

    root: Path
    db: str
    mlp: Path
    conv: Path
    mlp_report: dict
    conv_report: dict


def _tune(root: Path, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "autosched", "tune", *args, "--seed", "0", "--json"]
    return subprocess.Popen(
        command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _report(tuning: subprocess.Popen[str]) -> dict:
    out, err = tuning.communicate(timeout=600)
    assert tuning.returncode == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> TunedModels:
    """The two models share no task, so they are tuned at once, as two users of one log would."""
    root = tmp_path_factory.mktemp("models")
    db = f"sqlite:///{root / 'log.db'}"
    mlp = write_mlp_onnx(root / "mlp.onnx", batch="batch")
    conv = write_conv_block_pt2(root / "conv.pt2")
    mlp_tuning = _tune(
        root, str(mlp), "--input", "x=16x64:float32", "--trials", "4", "--batch", "2", "--db", db
    )
    conv_tuning = _tune(root, str(conv), "--trials", "4", "--batch", "1", "--db", db)
    return TunedModels(root, db, mlp, conv, _report(mlp_tuning), _report(conv_tuning))


def _random_input(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(7).uniform(-1, 1, shape).astype(np.float32)


def _run_library(path: Path, array: np.ndarray) -> np.ndarray:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(array)).numpy()


def test_the_budget_is_split_across_the_tasks(tuned: TunedModels) -> None:
    report = tuned.mlp_report
    tasks = report["tasks"]
    assert len(tasks) >= 2 and report["trials"] == sum(task["trials"] for task in tasks)
    assert report["trials"] == 4
    assert all(task["trials"] == 2 for task in tasks)  # the warm-up round is the whole budget
    assert all(task["weight"] == 1 and task["default_schedule"] is None for task in tasks)
    for task in tasks:
        # after its last round, its fastest and its untuned program re-timed side by side
        assert task["finalists"] >= 2
        assert 0 < task["best_latency_us"] <= task["untuned_latency_us"]
        untuned_won = task["best_latency_us"] == task["untuned_latency_us"]
        assert task["schedule"] == ("untuned" if untuned_won else "tuned")
    assert report["estimated_over_tasks"] == len(tasks)
    assert 0 < report["estimated_latency_us"] <= report["estimated_untuned_latency_us"]
    assert report["check"]["reference"] == "ONNX Runtime"
    # the compiled model timed whole, on the target's threads as the loader runs its library
    measured = report["measured"]
    low, high = measured["interval_us"]
    assert 0 < low <= measured["latency_us"] <= high
    assert measured["threads"] == report["target"]["num-cores"]


def test_a_tuned_onnx_model_exports_as_a_library_that_matches_onnx_runtime(
    tuned: TunedModels, cli: Cli
) -> None:
    import onnxruntime

    library = tuned.root / "out" / "mlp.so"
    result = cli(
        "export", str(tuned.mlp), "--input", "x=16x64:float32", "--format", "library",
        "-o", str(library), "--db", tuned.db,
    )  # fmt: skip
    assert result.code == 0, result.err
    sidecar = json.loads(library.with_suffix(".json").read_text())
    assert sidecar["inputs"] == [{"name": "x", "shape": [16, 64], "dtype": "float32"}]
    assert sidecar["outputs"] == [{"name": "y", "shape": [16, 10], "dtype": "float32"}]
    assert {task["name"] for task in sidecar["tasks"]} == {
        task["name"] for task in tuned.mlp_report["tasks"]
    }
    x = _random_input((16, 64))
    session = onnxruntime.InferenceSession(str(tuned.mlp), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"x": x})
    np.testing.assert_allclose(_run_library(library, x), expected, rtol=1e-4, atol=1e-4)


def test_the_exported_database_is_applied_by_tvms_own_passes(tuned: TunedModels, cli: Cli) -> None:
    import onnx
    import onnxruntime
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from autosched.target import parse_target, to_tvm_target

    work_dir = tuned.root / "mlp-db"
    result = cli(
        "export", str(tuned.mlp), "--input", "x=16x64:float32", "--format", "metaschedule-db",
        "-o", str(work_dir), "--db", tuned.db,
    )  # fmt: skip
    assert result.code == 0, result.err
    database = JSONDatabase(work_dir=str(work_dir))
    assert len(database) == len(tuned.mlp_report["tasks"])
    # the recipe of docs/models.md (Exports), with TVM's passes only
    mod = from_onnx(onnx.load(str(tuned.mlp)), shape_dict={"x": [16, 64]})
    mod = tvm.transform.Sequential(
        [
            relax.transform.DecomposeOpsForInference(),
            relax.transform.CanonicalizeBindings(),
            relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "HWIO"]}),
            relax.transform.FastMathTransform(),
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
            relax.transform.AttachAttrLayoutFreeBuffers(),
        ]
    )(mod)
    target = to_tvm_target(parse_target(None))
    with target, database, tvm.transform.PassContext(opt_level=3):
        mod = relax.transform.MetaScheduleApplyDatabase()(mod)
    scheduled = [
        func
        for _, func in mod.functions_items()
        if isinstance(func, tvm.tirx.PrimFunc) and func.attrs.get("tirx.is_scheduled", False)
    ]
    assert len(scheduled) == len(tuned.mlp_report["tasks"])  # every kernel, under TVM's keys
    mod = relax.transform.SplitLayoutRewritePreproc()(mod)
    mod = relax.transform.FoldConstant()(mod)
    vm = relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())
    x = _random_input((16, 64))
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    session = onnxruntime.InferenceSession(str(tuned.mlp), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_a_pytorch_conv_block_is_tuned_and_matches_eager(tuned: TunedModels, cli: Cli) -> None:
    import torch

    report = tuned.conv_report
    assert report["check"]["reference"] == "PyTorch eager"
    # conv + batch norm + relu in one kernel, max pooling in another, and as the convolution
    # runs channels-last, a transpose of the input and one of the output
    assert report["trials"] == 4 and len(report["tasks"]) == 4
    assert all(task["default_schedule"] is None for task in report["tasks"])
    library = tuned.root / "conv.so"
    result = cli(
        "export", str(tuned.conv), "--format", "library", "-o", str(library), "--db", tuned.db
    )
    assert result.code == 0, result.err
    x = _random_input((1, 3, 32, 32))
    with torch.no_grad():
        expected = torch.export.load(str(tuned.conv)).module()(torch.from_numpy(x)).numpy()
    got = _run_library(library, x)
    assert got.shape == (1, 8, 16, 16)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_a_layer_another_model_tuned_is_reused(tuned: TunedModels, cli: Cli) -> None:
    wider = write_mlp_onnx(tuned.root / "wider.onnx", outputs=32, seed=3)
    result = cli("tune", str(wider), "--trials", "2", "--batch", "2", "--db", tuned.db, "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    # the rounds are told on stderr with --json too; the reused layer has none
    assert result.err.count(": 2 trials (") == 1, result.err
    first_layer = {task["workload_key"] for task in tuned.mlp_report["tasks"]}
    reused = [task for task in report["tasks"] if task["workload_key"] in first_layer]
    fresh = [task for task in report["tasks"] if task["workload_key"] not in first_layer]
    assert len(reused) == 1 and len(fresh) == 1
    assert reused[0]["trials"] == 0 and reused[0]["reused_records"] >= 2
    assert reused[0]["best_latency_us"] is not None
    assert fresh[0]["trials"] == 2 and report["reused_records"] == reused[0]["reused_records"]


def test_a_task_whose_design_space_was_measured_out_is_reused(cli: Cli, tmp_path: Path) -> None:
    conv = write_conv_block_pt2(tmp_path / "conv.pt2")
    db = f"sqlite:///{tmp_path / 'log.db'}"

    def tune(trials: int) -> list[dict]:
        # no finals: what the log reuses is its measurements
        result = cli("tune", str(conv), "--trials", str(trials), "--batch", "4", "--db", db,
                     "--seed", "0", "--finalists", "0", "--json")  # fmt: skip
        assert result.code == 0, result.err
        return json.loads(result.out)["tasks"]

    # 3 trials a task: the transposes into and out of channels-last have 2 programs to measure
    measured_out = {task["workload_key"] for task in tune(12) if task["trials"] < 3}
    assert measured_out
    # an even share of 13 trials is 4 records: the baseline and 2 programs are fewer
    for task in tune(13):
        if task["workload_key"] in measured_out:
            assert task["trials"] == 0 and task["reused_records"] == 3, task


def test_a_task_the_admission_refuses_keeps_the_default_schedule(
    tuned: TunedModels, cli: Cli
) -> None:
    path = tuned.root / "annotated.py"
    path.write_text(ANNOTATED_RELAX_MODEL)
    result = cli("tune", str(path), "--trials", "2", "--db", tuned.db)
    assert result.code == 0, result.err
    notes = [line for line in result.out.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "double" in notes[0]
    assert "keeps TVM's default schedule" in notes[0] and "block annotation 'hint'" in notes[0]
    assert "outputs match TVM's untuned build" in " ".join(result.out.split())


def test_the_log_lists_tuned_models_with_their_tasks(tuned: TunedModels, cli: Cli) -> None:
    result = cli("log", "models", "--db", tuned.db, "--json")
    assert result.code == 0, result.err
    models = {model["model"]: model for model in json.loads(result.out)}
    assert {"mlp", "conv"} <= set(models)
    mlp = models["mlp"]
    assert mlp["inputs"] == [{"name": "x", "shape": [16, 64], "dtype": "float32"}]
    assert mlp["reference"] == "ONNX Runtime" and mlp["format"] == "onnx"
    assert [(t["name"], t["weight"]) for t in mlp["tasks"]] == [
        (t["name"], t["weight"]) for t in tuned.mlp_report["tasks"]
    ]
    assert all(task["best_latency_us"] > 0 for task in mlp["tasks"])
    # the log names what each task compiles with as the tuning's report did
    assert [t["schedule"] for t in mlp["tasks"]] == [
        t["schedule"] for t in tuned.mlp_report["tasks"]
    ]
    assert mlp["estimated_latency_us"] == pytest.approx(tuned.mlp_report["estimated_latency_us"])
    measured = tuned.mlp_report["measured"]
    assert mlp["measured_latency_us"] == pytest.approx(measured["latency_us"])
    assert mlp["measured_interval_us"] == pytest.approx(measured["interval_us"])
    text = cli("log", "models", "--db", tuned.db)
    assert text.code == 0 and "conv (pytorch" in text.out


def test_a_model_whose_timing_fails_is_kept_with_a_warning(
    tuned: TunedModels, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timing process runs past its time: the tuning is kept and recorded, its report says
    why the model was not timed whole, and the log shows no latency for it."""
    import shutil

    from autosched.model import latency

    shutil.copy(tuned.root / "log.db", tmp_path / "log.db")
    db = f"sqlite:///{tmp_path / 'log.db'}"
    monkeypatch.setattr(latency, "TIMEOUT_SECS", 0.01)
    given = ("--input", "x=16x64:float32", "--trials", "1", "--db", db)
    result = cli("tune", str(tuned.mlp), *given)
    assert result.code == 0, result.err
    assert "warning: the model was not timed whole: timing the model took over" in result.out
    report = json.loads(cli("tune", str(tuned.mlp), *given, "--json").out)
    assert report["measured"] is None and "took over" in report["measured_problem"]
    (mlp,) = [
        m for m in json.loads(cli("log", "models", "--db", db, "--json").out) if m["model"] == "mlp"
    ]
    assert mlp["measured_latency_us"] is None and mlp["measured_interval_us"] is None
