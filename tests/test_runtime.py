"""The loader of exported artefacts (``autosched.runtime``) as a deployment runs it: a fresh
interpreter with no ``TVM_*`` variable loads a tuned kernel and a tuned model, runs them on the
thread pool they were tuned on and imports nothing of the tuner; TVM's pool is resized where it
can be and warned of where it cannot; manifests that lie are refused."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import autosched
from model_files import write_mlp_onnx

from autosched.errors import UserError
from autosched.runtime import load
from autosched.target import host_target

# Modules a deployment must not need: the log and SQL, the service, the search, the cost models.
TUNER_MODULES = (
    "sqlalchemy",
    "alembic",
    "autosched.log",
    "autosched.server",
    "autosched.workers",
    "autosched.search",
    "autosched.costmodel",
    "autosched.tuner",
    "autosched.measure",
    "xgboost",
    "optuna",
)


def _fresh_env() -> dict[str, str]:
    """This environment without any variable that sizes TVM's thread pool."""
    return {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("TVM_") and name != "OMP_NUM_THREADS"
    }


def _every_cpu() -> None:
    """A user's process may run on every CPU; this test's process may not, once TVM's pool has
    pinned its main thread to one, and a child inherits that."""
    os.sched_setaffinity(0, range(os.cpu_count() or 1))


def _python(script: str, *args: str, cwd: Path | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=_fresh_env(),
        cwd=cwd,
        timeout=300,
        preexec_fn=_every_cpu,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _tvm_default_threads() -> int:
    """The size TVM gives its pool in a fresh interpreter with no variable set."""
    return int(_python("import tvm; print(tvm.runtime.num_threads())"))


@dataclass(frozen=True)
class Exported:
    """A kernel and a model tuned on a target of ``threads`` cores and exported as libraries."""

    kernel: Path
    model: Path
    onnx: Path
    threads: int


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """Tuned on a target whose core count is not the size TVM would give its pool by itself, so
    that a loader that left the pool alone runs on another number of threads."""
    root = tmp_path_factory.mktemp("artefacts")
    threads = 1 if _tvm_default_threads() != 1 else 2
    target = json.dumps({**host_target(), "num-cores": threads})
    db = f"sqlite:///{root / 'log.db'}"
    onnx = write_mlp_onnx(root / "mlp.onnx")
    shape = ["-p", "M=64", "-p", "N=64", "-p", "K=64"]
    common = ["--target", target, "--db", db, "--trials", "2", "--batch", "2", "--finalists", "2"]
    autosched("tune", "matmul", *shape, *common, cwd=root)
    autosched("tune", str(onnx), *common, cwd=root)
    autosched("export", "matmul", *shape, "--target", target, "--db", db, "--format",
              "library", "-o", "kernel/mm.so", cwd=root)  # fmt: skip
    autosched("export", str(onnx), "--target", target, "--db", db, "--format", "library",
              "-o", "model/mlp.so", cwd=root)  # fmt: skip
    return Exported(root / "kernel" / "mm.so", root / "model" / "mlp.so", onnx, threads)


_DEPLOYMENT = """
import json, sys, warnings
import numpy as np
warnings.simplefilter("error")
from autosched.runtime import load
kernel, model = load(sys.argv[1]), load(sys.argv[2])
import tvm
rng = np.random.default_rng(3)
a, b = (rng.uniform(-1, 1, (64, 64)).astype("float32") for _ in range(2))
x = rng.uniform(-1, 1, (16, 64)).astype("float32")
c, y = kernel(a, b), model(x=x)
print(json.dumps({
    "threads": [kernel.threads, model.threads],
    "pool": tvm.runtime.num_threads(),
    "kernel_error": float(np.abs(c - a @ b).max()),
    "x": x.tolist(),
    "y": y.tolist(),
    "modules": sorted(sys.modules),
}))
"""


@pytest.mark.slow
def test_a_fresh_interpreter_runs_the_kernel_and_the_model_on_the_threads_they_were_tuned_on(
    exported: Exported,
) -> None:
    import onnxruntime

    report = json.loads(_python(_DEPLOYMENT, str(exported.kernel), str(exported.model)))
    assert report["threads"] == [exported.threads] * 2
    assert report["pool"] == exported.threads
    assert report["kernel_error"] < 1e-4
    session = onnxruntime.InferenceSession(str(exported.onnx), providers=["CPUExecutionProvider"])
    x = np.array(report["x"], dtype=np.float32)
    (expected,) = session.run(None, {"x": x})
    np.testing.assert_allclose(np.array(report["y"]), expected, rtol=1e-4, atol=1e-4)
    tuner = sorted(name for name in report["modules"] if name.startswith(TUNER_MODULES))
    assert tuner == []
    # the same library loaded as TVM alone loads it runs on TVM's own guess of the cores
    plain = "import sys, tvm; tvm.runtime.load_module(sys.argv[1]); "
    plain += "print(tvm.runtime.num_threads())"
    assert int(_python(plain, str(exported.kernel))) != exported.threads


@pytest.mark.slow
def test_importing_the_loader_loads_nothing_of_the_tuner() -> None:
    loaded = _python("import sys, autosched.runtime; print('\\n'.join(sys.modules))").split()
    assert "autosched.runtime" in loaded
    assert [name for name in loaded if name.startswith((*TUNER_MODULES, "tvm"))] == []


@pytest.mark.slow
def test_both_manifests_carry_the_threads_and_the_timing_the_tuner_used(
    exported: Exported,
) -> None:
    kernel = json.loads(exported.kernel.with_suffix(".json").read_text())
    model = json.loads(exported.model.with_suffix(".json").read_text())
    for manifest, kind in ((kernel, "kernel"), (model, "model")):
        assert manifest["manifest"] == "autosched-artefact" and manifest["kind"] == kind
        assert manifest["runtime"] == {"device": "cpu", "num_threads": exported.threads}
        assert manifest["timing"] == {"warmup": 1, "min_repeat_ms": 40, "rounds": 10, "cold": False}
    assert kernel["num_outputs"] == 1 and kernel["library"] == "mm.so"
    assert kernel["retimed_latency_us"] > 0 and kernel["single_shot_latency_us"] > 0
    assert model["format"] == "onnx" and model["source"]["path"] == str(exported.onnx.resolve())


_STARTED_POOL = """
import os, sys, warnings
import tvm
os.environ["TVM_NUM_THREADS"] = sys.argv[2]
tvm.runtime.num_threads()  # the pool of this thread starts at that size
del os.environ["TVM_NUM_THREADS"]
from autosched.runtime import load
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    kernel = load(sys.argv[1], threads=int(sys.argv[3]))
print(kernel.threads, tvm.runtime.num_threads(), len(caught))
print(caught[0].message if caught else "")
"""


@pytest.mark.slow
def test_a_pool_started_smaller_cannot_grow_and_is_warned_of_while_a_larger_one_shrinks(
    exported: Exported,
) -> None:
    kernel = str(exported.kernel)
    counts, message = _python(_STARTED_POOL, kernel, "1", "2").split("\n", 1)
    assert counts.split() == ["1", "1", "1"]
    assert "started with 1 threads" in message and "TVM_NUM_THREADS=2" in message
    counts, message = _python(_STARTED_POOL, kernel, "2", "1").split("\n", 1)
    assert counts.split() == ["1", "1", "0"]


@pytest.mark.slow
def test_a_manifest_naming_a_library_elsewhere_is_refused(
    exported: Exported, tmp_path: Path
) -> None:
    manifest = json.loads(exported.kernel.with_suffix(".json").read_text())
    (tmp_path / "mm.so").write_bytes(exported.kernel.read_bytes())
    for library in ("../kernel/mm.so", str(exported.kernel), "mm.py"):
        (tmp_path / "mm.json").write_text(json.dumps({**manifest, "library": library}))
        with pytest.raises(UserError, match=r"must name a \.so file beside the manifest"):
            load(tmp_path / "mm.so")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"manifest": None}, "not an autosched-artefact manifest"),
        ({"manifest_version": 9}, "this loader reads version 1"),
        ({"runtime": {"device": "cpu", "num_threads": 0}}, "count of 1 to 4096"),
        ({"runtime": {"device": "tpu", "num_threads": 1}}, "device must be one of cpu, cuda"),
        ({"num_outputs": 4}, "num_outputs must lie between 1 and 3"),
        ({"arguments": [{"name": "A", "shape": [-1], "dtype": "float32"}]}, "list of sizes"),
    ],
)
def test_a_manifest_that_lies_is_refused_in_one_line(
    tmp_path: Path, change: dict, message: str
) -> None:
    manifest = {
        "manifest": "autosched-artefact",
        "manifest_version": 1,
        "kind": "kernel",
        "library": "mm.so",
        "function": "main",
        "runtime": {"device": "cpu", "num_threads": 1},
        "timing": {"warmup": 1, "min_repeat_ms": 40, "rounds": 10, "cold": False},
        "arguments": [{"name": name, "shape": [4, 4], "dtype": "float32"} for name in "ABC"],
        "num_outputs": 1,
    }
    (tmp_path / "mm.json").write_text(json.dumps({**manifest, **change}))
    with pytest.raises(UserError) as refused:
        load(tmp_path / "mm.json")
    assert message in str(refused.value) and "\n" not in str(refused.value)


class _CountedCalls:
    """A loaded artefact's owner whose ``main`` counts its calls; TVM's evaluator passes through
    (its calls, made in C++, are not counted)."""

    def __init__(self, owner: Any) -> None:
        self.owner, self.calls = owner, 0

    def __getitem__(self, name: str) -> Any:
        function = self.owner[name]

        def counted(*args: Any) -> Any:
            self.calls += 1
            return function(*args)

        return counted

    def time_evaluator(self, *args: Any, **kwargs: Any) -> Any:
        return self.owner.time_evaluator(*args, **kwargs)


@pytest.mark.parametrize(("min_repeat_ms", "direct"), [(0, True), (50, False)])
def test_a_call_that_lasts_a_sample_is_timed_alone_and_a_shorter_one_by_tvms_evaluator(
    exported: Exported, monkeypatch: pytest.MonkeyPatch, min_repeat_ms: int, direct: bool
) -> None:
    kernel = load(exported.kernel)
    timing = dataclasses.replace(kernel.manifest.timing, min_repeat_ms=min_repeat_ms)
    kernel.manifest = dataclasses.replace(kernel.manifest, timing=timing)
    counted = _CountedCalls(kernel._owner())
    monkeypatch.setattr(kernel, "_owner", lambda: counted)
    rng = np.random.default_rng(0)
    sample = kernel.sampler([rng.uniform(-1, 1, (64, 64)).astype("float32") for _ in range(2)])
    assert counted.calls == timing.warmup
    if direct:  # each sample one call of its own, not an untimed call and a timed one
        samples = [sample() for _ in range(3)]
        assert counted.calls == timing.warmup + 3
    else:  # a sample too short for its length: TVM's evaluator repeats it
        samples = [sample()]
        assert counted.calls == timing.warmup
    assert all(0 < secs < 1 for secs in samples)
