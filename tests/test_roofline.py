"""The roofline's figures: the CPU's theoretical peak, a busy machine noticed, a peak raised by a
faster measurement, and calibration files written before those fields existed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import pytest

from autosched.machine import cpu, roofline
from autosched.machine.cpu import cpu_peak
from autosched.machine.fmaloop import FmaRate, FmaRateRequest
from autosched.machine.handoff import Placement, PlacementRequest
from autosched.machine.roofline import Calibration, describe_calibration, load_calibration
from autosched.target import host_target, target_key

FLAGS_AVX2 = "fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx avx2"


def cpuinfo(vendor: str, family: int, flags: str, cores: int = 2, threads: int = 1) -> str:
    """/proc/cpuinfo of a one-socket machine with ``cores`` cores of ``threads`` threads each."""
    blocks = []
    for core in range(cores):
        for _ in range(threads):
            blocks.append(
                f"processor\t: {len(blocks)}\nvendor_id\t: {vendor}\ncpu family\t: {family}\n"
                f"model name\t: Test CPU\nphysical id\t: 0\ncore id\t\t: {core}\n"
                f"cpu MHz\t\t: 2450.000\nflags\t\t: {flags}\n"
            )
    return "\n".join(blocks)


@pytest.fixture(autouse=True)
def _no_cpufreq(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The nominal clock of the text, whatever cpufreq this machine has."""
    monkeypatch.setattr(cpu, "_MAX_FREQ_KHZ", tmp_path / "absent")


@pytest.mark.parametrize(
    ("vendor", "family", "flags", "shape"),
    [
        ("AuthenticAMD", 0x17, FLAGS_AVX2, (1, 8)),  # Zen: a 256-bit FMA takes two 128-bit pipes
        ("AuthenticAMD", 0x17, FLAGS_AVX2 + " clwb", (2, 8)),  # Zen 2
        ("AuthenticAMD", 0x19, FLAGS_AVX2 + " clwb", (2, 8)),  # Zen 3
        ("AuthenticAMD", 0x19, FLAGS_AVX2 + " clwb avx512f", (1, 16)),  # Zen 4: two halves
        ("AuthenticAMD", 0x1A, FLAGS_AVX2 + " clwb avx512f", (2, 16)),  # Zen 5
        ("GenuineIntel", 6, FLAGS_AVX2, (2, 8)),
        ("GenuineIntel", 6, FLAGS_AVX2 + " avx512f", (2, 16)),
    ],
)
def test_the_theoretical_peak_multiplies_cores_fma_units_lanes_and_clock(
    vendor: str, family: int, flags: str, shape: tuple[int, int]
) -> None:
    peak = cpu_peak(cpuinfo=cpuinfo(vendor, family, flags))
    assert peak is not None and (peak.fma_units, peak.lanes) == shape
    assert peak.cores == 2 and peak.clock_ghz == pytest.approx(2.45)
    assert peak.gflops == pytest.approx(2 * shape[0] * shape[1] * 2 * 2.45)
    units, lanes = shape
    assert peak.describe() == f"2 cores x {units} FMA x {lanes} lanes x 2 x 2.45 GHz (nominal)"


def test_physical_cores_count_once_and_a_target_may_use_fewer() -> None:
    text = cpuinfo("GenuineIntel", 6, FLAGS_AVX2, cores=4, threads=2)
    assert cpu_peak(cpuinfo=text).cores == 4  # type: ignore[union-attr]
    assert cpu_peak(2, cpuinfo=text).cores == 2  # type: ignore[union-attr]
    assert cpu_peak(16, cpuinfo=text).cores == 4  # type: ignore[union-attr]


def test_the_highest_clock_is_used_where_cpufreq_tells_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "max").write_text("3500000\n")
    monkeypatch.setattr(cpu, "_MAX_FREQ_KHZ", tmp_path / "max")
    peak = cpu_peak(cpuinfo=cpuinfo("AuthenticAMD", 0x19, FLAGS_AVX2 + " clwb"))
    assert peak is not None and peak.clock_ghz == 3.5 and peak.clock_source == "max"


def test_cpus_without_known_fma_units_have_no_theoretical_peak() -> None:
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\n"
    assert cpu_peak(cpuinfo=arm) is None
    assert cpu_peak(cpuinfo=cpuinfo("GenuineIntel", 6, "fpu sse sse2 avx")) is None  # no FMA
    assert cpu_peak(cpuinfo="") is None


CALIBRATION = Calibration(
    peak_gflops=50.0,
    bandwidth_gbs=10.0,
    fma_gflops=50.0,
    matmul_gflops=40.0,
    measured_at="2026-01-01T00:00:00+00:00",
    theoretical_gflops=156.8,
    theoretical="2 cores x 2 FMA x 8 lanes x 2 x 2.45 GHz (nominal)",
    other_load=1.1,
    busy=True,
    handoff_us=80.2,
    own_read_us=19.1,
)


def test_a_faster_measurement_raises_the_peak_and_a_slower_one_does_not() -> None:
    assert CALIBRATION.observed(49.0, "numpy on matmul") is None
    raised = CALIBRATION.observed(138.0, "numpy on matmul")
    assert raised is not None and raised.peak_gflops == 138.0
    assert raised.raised_by == "numpy on matmul" and raised.fma_gflops == 50.0
    line = describe_calibration(raised)
    assert "peak 138.0 GFLOP/s" in line and "raised by numpy on matmul" in line
    assert "theoretical 156.8 GFLOP/s = 2 cores x 2 FMA" in line
    assert "other processes 1.10 cores" in line
    assert "cores hand data over in 4.2x their own reads (handoff 80.2 us, own read 19.1" in line


def test_a_calibration_file_from_before_the_load_check_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    old = {"peak_gflops": 69.6, "bandwidth_gbs": 9.0, "fma_gflops": 52.9, "matmul_gflops": 69.6}
    entry = {**old, "measured_at": "2026-01-01T00:00:00+00:00", "target": host_target()}
    path.write_text(json.dumps({target_key(host_target()): entry}))
    loaded = load_calibration(host_target(), path)
    assert loaded is not None and loaded.peak_gflops == 69.6
    assert loaded.theoretical_gflops is None and loaded.busy is False


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the load check reads /proc/stat")
def test_another_process_busy_meanwhile_is_seen_as_load() -> None:
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # until it runs
        with roofline._other_processes_load() as window:
            time.sleep(1.0)
    finally:
        burner.kill()
        burner.wait()
    assert window.cores is not None and window.cores >= 0.5  # one core of two, or all of one


class RecordingRunner:
    """Stands in for the measuring process: records its environment, answers the FMA loop."""

    started: ClassVar[list[dict[str, str]]] = []

    def __init__(self, *, env: dict[str, str]) -> None:
        self.started.append(env)

    def call(self, request: object, timeout_secs: float) -> FmaRate | Placement:
        assert timeout_secs > 0
        if isinstance(request, PlacementRequest):
            return Placement(handoff_secs=20e-6, own_read_secs=19e-6)
        assert isinstance(request, FmaRateRequest)
        return FmaRate(gflops=321.0, cpu_secs=0.5)

    def close(self) -> None:
        pass


def test_the_fma_loop_is_timed_in_a_process_whose_threads_span_the_targets_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # this process's TVM pool may be one thread wide (half the logical CPUs) and cannot widen
    monkeypatch.setattr(RecordingRunner, "started", [])
    monkeypatch.setattr(roofline, "ChildProcess", RecordingRunner)
    monkeypatch.setattr(roofline, "_matmul_gflops", lambda: 123.0)
    monkeypatch.setattr(roofline, "_copy_gbs", lambda: 20.0)
    calibration = roofline.calibrate({**host_target(), "num-cores": 2}, attempts=1)
    assert RecordingRunner.started == [{"TVM_NUM_THREADS": "2"}]
    assert calibration.fma_gflops == calibration.peak_gflops == 321.0
    assert (calibration.handoff_us, calibration.own_read_us) == (
        pytest.approx(20),
        pytest.approx(19),
    )
    assert "in 1.1x their own reads (handoff 20.0 us, own read 19.0 us)" in describe_calibration(
        calibration
    )


def test_the_fma_loop_reports_its_rate_and_the_cpu_time_it_took() -> None:
    rate = FmaRateRequest(host_target(), steps=2000, repeats=2).execute()
    assert rate.gflops > 0 and rate.cpu_secs > 0
