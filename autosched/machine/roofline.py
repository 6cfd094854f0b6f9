"""This machine's roofline: its achievable peak arithmetic rate and memory bandwidth, measured by
``autosched calibrate`` and kept in a JSON file keyed by target, and the bound they put on a
workload's latency.

A calibration must not be lower than the machine can do: each rate is the best of several repeats,
the CPU time other processes took meanwhile is checked (a busy machine is measured again, and a
calibration that stayed busy says so), the CPU's theoretical peak is reported beside it, and a later
measurement that beats the stored peak raises it (:meth:`Calibration.observed`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from autosched.errors import UserError
from autosched.machine.cpu import cpu_peak
from autosched.machine.fmaloop import FmaRate, FmaRateRequest, fma_loop_shape
from autosched.machine.handoff import Placement, PlacementRequest
from autosched.measure.child import ChildProcess
from autosched.target import canonical_target, target_key, target_kind, thread_env

_FMA_STEPS = 200_000  # long enough that loop overhead and thread start-up vanish
_FMA_TIMEOUT_SECS = 120.0  # its compilation and repeats, in the measuring process
_MATMUL_SIZE = 2048
_COPY_BYTES = 1 << 28  # 256 MiB, far beyond any cache
_REPEATS = 5
_ATTEMPTS = 3  # calibrations of a busy machine before giving up and saying so
_BUSY_CORES = 0.2  # CPU time of other processes, in cores, above which the machine is busy


@dataclass(frozen=True)
class Calibration:
    """Achievable peak (GFLOP/s, float32) and memory bandwidth (GB/s) of one target's machine.

    ``peak_gflops`` is the highest of ``fma_gflops`` (a TIR loop of independent vector FMAs over
    every core), ``matmul_gflops`` (numpy's float32 matmul of 2048x2048 matrices) and any later
    measurement that beat them (named by ``raised_by``). ``bandwidth_gbs`` counts the bytes read
    and written by a 256 MiB copy. Each is the best of its repeats. ``theoretical_gflops`` is the
    CPU's cores x FMA units x lanes x 2 x clock (spelled out in ``theoretical``), where known.
    ``other_load`` is the CPU time other processes took while it was measured, in cores; ``busy``
    says it stayed above the threshold through every attempt. ``handoff_us`` and ``own_read_us``
    read where the host had placed the cores then (``autosched.machine.handoff.placement``): numpy's
    matmul, on every core, runs slower when they share no cache.
    """

    peak_gflops: float
    bandwidth_gbs: float
    fma_gflops: float
    matmul_gflops: float
    measured_at: str
    theoretical_gflops: float | None = None
    theoretical: str | None = None
    other_load: float | None = None
    busy: bool = False
    raised_by: str | None = None
    handoff_us: float | None = None
    own_read_us: float | None = None

    @property
    def placement(self) -> Placement | None:
        if self.handoff_us is None or self.own_read_us is None:
            return None
        return Placement(self.handoff_us * 1e-6, self.own_read_us * 1e-6)

    def bound_secs(self, flops: float | None, min_bytes: float) -> float:
        """The roofline's least latency: compute at peak or compulsory traffic at bandwidth."""
        return max(
            (flops or 0.0) / (self.peak_gflops * 1e9), min_bytes / (self.bandwidth_gbs * 1e9)
        )

    def observed(self, gflops: float, what: str) -> Calibration | None:
        """This calibration with its peak raised to ``gflops``, reached by ``what``; None when
        ``gflops`` does not beat the stored peak."""
        if gflops <= self.peak_gflops:
            return None
        return replace(self, peak_gflops=gflops, raised_by=what)


UNCALIBRATED_SCHEDULER = (
    "note: this target has no calibration, so the task scheduler cannot tell a kernel near the "
    "peak from one far from it (`autosched calibrate` measures the peak once)"
)
"""Told where a model is tuned for a target without a stored calibration
(``autosched.model.tuning.task_floors``)."""


def calibration_path() -> Path:
    """``$AUTOSCHED_CALIBRATION``, else ``autosched/calibration.json`` in the user's cache
    directory (``$XDG_CACHE_HOME``, by default ``~/.cache``)."""
    explicit = os.environ.get("AUTOSCHED_CALIBRATION")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "autosched" / "calibration.json"


def calibrate(target: dict, attempts: int = _ATTEMPTS) -> Calibration:
    """Measure the peak and the bandwidth of this machine for ``target`` (a CPU target); measure
    again, up to ``attempts`` times, while other processes take CPU time, keeping the best rates.

    Raises:
        UserError: the target is not a CPU.
    """
    if target_kind(target) != "llvm":
        raise UserError("calibrate measures the CPU; use an llvm target")
    cores, _ = fma_loop_shape(target)
    theory = cpu_peak(cores)
    matmul = bandwidth = 0.0
    load: float | None = None
    runner = ChildProcess(env=thread_env(canonical_target(target)))
    try:
        cores_placed = runner.call(PlacementRequest(target), _FMA_TIMEOUT_SECS)
        # the measuring process started and the loop built, outside the load's window (another
        # process's load only ever lowers a rate, so this one counts towards the best)
        fma = _fma_rate(runner, target).gflops
        for _ in range(attempts):
            with _other_processes_load() as window:
                rate = _fma_rate(runner, target)
                window.ours += rate.cpu_secs
                fma = max(fma, rate.gflops)
                matmul = max(matmul, _matmul_gflops())
                bandwidth = max(bandwidth, _copy_gbs())
            load = window.cores
            if load is None or load < _BUSY_CORES:
                break
    finally:
        runner.close()
    return Calibration(
        peak_gflops=max(fma, matmul),
        bandwidth_gbs=bandwidth,
        fma_gflops=fma,
        matmul_gflops=matmul,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        theoretical_gflops=None if theory is None else theory.gflops,
        theoretical=None if theory is None else theory.describe(),
        other_load=load,
        busy=load is not None and load >= _BUSY_CORES,
        handoff_us=cores_placed.handoff_secs * 1e6,
        own_read_us=cores_placed.own_read_secs * 1e6,
    )


def describe_calibration(calibration: Calibration) -> str:
    """One line: the peak and where it came from, the theoretical peak, the bandwidth, the load."""
    parts = [
        f"peak {calibration.peak_gflops:.1f} GFLOP/s (FMA loop {calibration.fma_gflops:.1f}, "
        f"numpy matmul {calibration.matmul_gflops:.1f}"
        + (f", raised by {calibration.raised_by}" if calibration.raised_by else "")
        + ")"
    ]
    if calibration.theoretical_gflops is not None:
        parts.append(
            f"theoretical {calibration.theoretical_gflops:.1f} GFLOP/s = {calibration.theoretical}"
        )
    parts.append(f"bandwidth {calibration.bandwidth_gbs:.1f} GB/s")
    if calibration.other_load is not None:
        parts.append(f"other processes {calibration.other_load:.2f} cores")
    cores_placed = calibration.placement
    if cores_placed is not None:
        parts.append(
            f"cores hand data over in {cores_placed.ratio:.1f}x their own reads (handoff "
            f"{calibration.handoff_us:.1f} us, own read {calibration.own_read_us:.1f} us)"
        )
    return "; ".join(parts)


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
    fields = Calibration.__dataclass_fields__
    return Calibration(**{name: value for name, value in entry.items() if name in fields})


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as error:
        raise UserError(f"cannot read the calibration file {path}: {error}") from None


def _best_secs(run: Callable[[], object]) -> float:
    """The shortest of ``_REPEATS`` timed runs, after one warm-up: a peak is what the machine
    reaches when nothing gets in its way."""
    run()
    samples = []
    for _ in range(_REPEATS):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return min(samples)


def _fma_rate(runner: ChildProcess, target: dict) -> FmaRate:
    """The FMA loop's rate, timed in ``runner``: a process whose TVM thread pool is as wide as
    the target's cores (this process's pool may be narrower, and cannot be widened once it has
    started)."""
    return runner.call(FmaRateRequest(target, _FMA_STEPS, _REPEATS), _FMA_TIMEOUT_SECS)


def _matmul_gflops() -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((_MATMUL_SIZE, _MATMUL_SIZE), dtype=np.float32)
    b = rng.standard_normal((_MATMUL_SIZE, _MATMUL_SIZE), dtype=np.float32)
    return 2 * _MATMUL_SIZE**3 / _best_secs(lambda: a @ b) / 1e9


def _copy_gbs() -> float:
    source = np.ones(_COPY_BYTES // 4, np.float32)
    destination = np.empty_like(source)
    return 2 * _COPY_BYTES / _best_secs(lambda: np.copyto(destination, source)) / 1e9


@dataclass
class _LoadWindow:
    """The CPU time that processes other than ours took within a window, as cores kept busy on
    average (``cores``; None without /proc/stat, or until the window closed). ``ours`` adds the
    CPU seconds of measuring processes of ours to this process's own."""

    ours: float = 0.0
    cores: float | None = None


@contextmanager
def _other_processes_load() -> Iterator[_LoadWindow]:
    """A `_LoadWindow` over the block."""
    busy_before, own_before, wall_before = _busy_secs(), time.process_time(), time.monotonic()
    window = _LoadWindow()
    yield window
    busy_after = _busy_secs()
    if busy_before is None or busy_after is None:
        return
    own = time.process_time() - own_before + window.ours
    wall = time.monotonic() - wall_before
    window.cores = max(0.0, (busy_after - busy_before - own) / wall) if wall > 0 else None


def _busy_secs() -> float | None:
    """CPU seconds all processes have run since boot (every state of /proc/stat but idle)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if fields[0] != "cpu":
        return None
    ticks = [int(value) for value in fields[1:9]]  # user nice system idle iowait irq softirq steal
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")
