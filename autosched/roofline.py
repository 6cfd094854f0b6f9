"""This machine's roofline: its achievable peak arithmetic rate and memory bandwidth, measured once
by ``autosched calibrate`` and kept in a JSON file keyed by target, and the bound they put on a
workload's latency.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import tvm
from tvm.script import tirx as T

from autosched.errors import UserError
from autosched.target import canonical_target, target_key, target_kind, to_tvm_target

# The FMA loop: per core, independent chains of vector FMAs (enough to cover FMA latency on two
# ports), run long enough that loop overhead and thread start-up vanish.
_FMA_CHAINS = 12
_FMA_LANES = 16
_FMA_STEPS = 200_000
_MATMUL_SIZE = 2048
_COPY_BYTES = 1 << 28  # 256 MiB, far beyond any cache
_REPEATS = 5


@dataclass(frozen=True)
class Calibration:
    """Achievable peak (GFLOP/s, float32) and memory bandwidth (GB/s) of one target's machine.

    ``peak_gflops`` is the higher of ``fma_gflops`` (a TIR loop of independent vector FMAs over
    every core) and ``matmul_gflops`` (numpy's float32 matmul of 2048x2048 matrices).
    ``bandwidth_gbs`` counts the bytes read and written by a 256 MiB copy.
    """

    peak_gflops: float
    bandwidth_gbs: float
    fma_gflops: float
    matmul_gflops: float
    measured_at: str

    def bound_secs(self, flops: float | None, min_bytes: float) -> float:
        """The roofline's least latency: compute at peak or compulsory traffic at bandwidth."""
        return max(
            (flops or 0.0) / (self.peak_gflops * 1e9), min_bytes / (self.bandwidth_gbs * 1e9)
        )


def calibration_path() -> Path:
    """``$AUTOSCHED_CALIBRATION``, else ``autosched/calibration.json`` in the user's cache
    directory (``$XDG_CACHE_HOME``, by default ``~/.cache``)."""
    explicit = os.environ.get("AUTOSCHED_CALIBRATION")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "autosched" / "calibration.json"


def calibrate(target: dict) -> Calibration:
    """Measure the peak and the bandwidth of this machine for ``target`` (a CPU target).

    Raises:
        UserError: the target is not a CPU.
    """
    if target_kind(target) != "llvm":
        raise UserError("calibrate measures the CPU; use an llvm target")
    fma = _fma_gflops(target)
    matmul = _matmul_gflops()
    return Calibration(
        peak_gflops=max(fma, matmul),
        bandwidth_gbs=_copy_gbs(),
        fma_gflops=fma,
        matmul_gflops=matmul,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )


def save_calibration(target: dict, calibration: Calibration, path: Path | None = None) -> Path:
    """Store ``calibration`` under the target's key, next to those of other targets."""
    path = path or calibration_path()
    stored = _read(path)
    stored[target_key(target)] = {"target": canonical_target(target), **asdict(calibration)}
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(stored, indent=2, sort_keys=True) + "\n")
    temporary.replace(path)
    return path


def load_calibration(target: dict, path: Path | None = None) -> Calibration | None:
    """The stored calibration of ``target``; None when it was never calibrated."""
    entry = _read(path or calibration_path()).get(target_key(target))
    if entry is None:
        return None
    return Calibration(**{name: entry[name] for name in Calibration.__dataclass_fields__})


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as error:
        raise UserError(f"cannot read the calibration file {path}: {error}") from None


def _median_secs(run: Callable[[], object]) -> float:
    run()
    samples = []
    for _ in range(_REPEATS):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def _fma_gflops(target: dict) -> float:
    cores = int(canonical_target(target).get("num-cores") or os.cpu_count() or 1)
    shape = (cores, _FMA_CHAINS, _FMA_LANES)

    @T.prim_func
    def fma_loop(out: T.Buffer(shape, "float32")):
        for core in T.parallel(cores):
            acc = T.decl_buffer((_FMA_CHAINS, _FMA_LANES), "float32", scope="local")
            for chain in T.unroll(_FMA_CHAINS):
                for lane in T.vectorized(_FMA_LANES):
                    acc[chain, lane] = T.Cast("float32", chain + lane) * T.float32(0.001)
            for _step in range(_FMA_STEPS):
                for chain in T.unroll(_FMA_CHAINS):
                    for lane in T.vectorized(_FMA_LANES):
                        acc[chain, lane] = T.fma(
                            acc[chain, lane], T.float32(0.999), T.float32(0.001)
                        )
            for chain in T.unroll(_FMA_CHAINS):
                for lane in T.vectorized(_FMA_LANES):
                    out[core, chain, lane] = acc[chain, lane]

    module = tvm.compile(tvm.IRModule({"main": fma_loop}), target=to_tvm_target(target)).jit()
    out = tvm.runtime.empty(shape, "float32", tvm.cpu())
    secs = module.time_evaluator("main", tvm.cpu(), number=1, repeat=_REPEATS)(out).median
    return float(2 * cores * _FMA_CHAINS * _FMA_LANES * _FMA_STEPS / secs / 1e9)


def _matmul_gflops() -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((_MATMUL_SIZE, _MATMUL_SIZE), dtype=np.float32)
    b = rng.standard_normal((_MATMUL_SIZE, _MATMUL_SIZE), dtype=np.float32)
    return 2 * _MATMUL_SIZE**3 / _median_secs(lambda: a @ b) / 1e9


def _copy_gbs() -> float:
    source = np.ones(_COPY_BYTES // 4, np.float32)
    destination = np.empty_like(source)
    return 2 * _COPY_BYTES / _median_secs(lambda: np.copyto(destination, source)) / 1e9
