"""`autosched bench kernels`: suites, the JSON of a tiny run, the chart and the calibration file."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import Cli

from autosched.bench.kernels import (
    KERNEL_ROUNDS,
    SUITES,
    KernelRow,
    fastest_rate,
    fastest_way,
    plot_rows,
    suite_cases,
)
from autosched.bench.timing import time_side_by_side
from autosched.check import check_peer
from autosched.errors import UserError
from autosched.machine.roofline import Calibration, load_calibration, save_calibration
from autosched.target import host_target
from autosched.workloads import get_workload
from autosched.workloads.peers import Peer, peer_for

CALIBRATION = Calibration(
    peak_gflops=100.0,
    bandwidth_gbs=10.0,
    fma_gflops=100.0,
    matmul_gflops=80.0,
    measured_at="2026-01-01T00:00:00+00:00",
)


def test_calibration_is_stored_per_target_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    assert load_calibration(host_target(), path) is None
    save_calibration(host_target(), CALIBRATION, path)
    assert load_calibration(host_target(), path) == CALIBRATION
    assert load_calibration({"kind": "llvm", "mcpu": "skylake-avx512"}, path) is None
    # 2 GFLOP at 100 GFLOP/s, or 1 GB at 10 GB/s: whichever takes longer
    assert CALIBRATION.bound_secs(2e9, 1e8) == pytest.approx(0.02)
    assert CALIBRATION.bound_secs(2e8, 1e9) == pytest.approx(0.1)


def test_suites_name_valid_workloads_and_bad_requests_are_user_errors() -> None:
    for cases in SUITES.values():
        for case in cases:
            assert get_workload(case.workload, case.params).flops
    assert suite_cases(None, [], {}) == list(SUITES["smoke"])
    assert suite_cases(None, ["matmul"], {"M": "8"})[0].params == {"M": "8"}
    with pytest.raises(UserError, match="unknown suite 'huge'"):
        suite_cases("huge", [], {})
    with pytest.raises(UserError, match="not both"):
        suite_cases("smoke", ["matmul"], {})
    with pytest.raises(UserError, match="name a single workload"):
        suite_cases(None, ["matmul", "softmax"], {"M": "8"})


def test_integer_operations_and_nominal_flops_neither_raise_nor_meet_the_float_peak() -> None:
    assert get_workload("matmul", {"M": 16, "N": 16, "K": 16}).float_arithmetic
    assert get_workload("matmul_int4_weight", {}).float_arithmetic  # dequantised to float32
    int8 = get_workload("matmul_int8", {"M": 64, "N": 64, "K": 64, "layout": "vnni"})
    assert not int8.float_arithmetic  # int32 results of int8 dot products
    assert not get_workload("conv2d_nhwc", {}).nominal_flops
    for layout in ("nchw", "nhwc"):  # they count the direct convolution's FLOPs, 2.25x their own
        assert get_workload(f"conv2d_{layout}_winograd", {}).nominal_flops
    # 1 GFLOP in 20 ms: 50 GFLOP/s, against 40 for the peer
    matmul = KernelRow("matmul", {"M": 8}, 1e9, True, 768, 2, 4e4, 2e4, "numpy", 2.5e4, 0.8,
                       50.0, None, None, None).against(CALIBRATION)  # fmt: skip
    vnni = replace(matmul, workload="matmul_int8", float_arithmetic=False, gflops=900.0)
    winograd = replace(matmul, workload="conv2d_nhwc_winograd", nominal_flops=True, gflops=300.0)
    rows = [matmul, vnni.against(CALIBRATION), winograd.against(CALIBRATION)]
    assert fastest_rate(rows) == (50.0, "tuned matmul")
    assert matmul.roofline_percent == pytest.approx(50.0)  # 10 ms at the peak of 100
    for unbounded in (vnni, winograd):
        assert unbounded.against(CALIBRATION).roofline_us is None
        assert unbounded.against(CALIBRATION).roofline_percent is None


@pytest.mark.slow
def test_bench_json_has_every_field_for_a_tiny_run(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    calibration = tmp_path / "calibration.json"
    # a peak no 16^3 matmul reaches (a fast core runs one at 200 GFLOP/s), so none raises it
    unreached = replace(CALIBRATION, peak_gflops=10_000.0, fma_gflops=10_000.0)
    save_calibration(host_target(), unreached, calibration)
    monkeypatch.setenv("AUTOSCHED_CALIBRATION", str(calibration))
    result = cli(
        "bench", "kernels", "matmul", "-p", "M=16", "-p", "N=16", "-p", "K=16",
        "--trials", "2", "--json", "--plot", "chart.png",
    )  # fmt: skip
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["calibration"]["peak_gflops"] == 10_000.0
    assert document["calibration"]["raised_by"] is None
    (row,) = document["rows"]
    assert set(row) == set(KernelRow.__dataclass_fields__)
    assert row["workload"] == "matmul" and row["params"]["M"] == 16
    assert row["peer"] == "numpy (OpenBLAS)" and row["note"] is None
    for field in ("untuned_us", "tuned_us", "peer_us", "tuned_over_peer", "gflops"):
        assert row[field] > 0, field
    assert row["flops"] == 2 * 16**3 and row["min_bytes"] == 3 * 16 * 16 * 4
    assert row["roofline_us"] == pytest.approx(max(2 * 16**3 / 10_000e3, 3072 / 10e3))
    assert row["roofline_percent"] == pytest.approx(100 * row["roofline_us"] / row["tuned_us"])
    assert row["tuned_over_peer"] == pytest.approx(row["tuned_us"] / row["peer_us"])
    # both timed in the same rounds, the cores' placement read after each
    assert row["rounds"] == KERNEL_ROUNDS and 0 <= row["far_rounds"] <= KERNEL_ROUNDS
    for name in ("tuned", "peer"):
        smallest, largest = row[f"{name}_spread_us"]
        assert 0 < smallest <= row[f"{name}_us"] <= largest
    assert row["searched_us"] > 0  # the search's own timing of the same program, for reference
    if (tmp_path / "chart.png").exists():
        assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"


def test_chart_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the chart needs matplotlib (the zoo extra)")
    row = KernelRow("matmul", {"M": 8}, 1024.0, True, 768, 2, 10.0, 5.0, "numpy", 4.0, 1.25,
                    0.2, 1.0, 20.0, None)  # fmt: skip
    plot_rows([row, row], tmp_path / "chart.png")
    assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_a_rate_above_the_stored_peak_raises_it(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    calibration = tmp_path / "calibration.json"
    save_calibration(host_target(), replace(CALIBRATION, peak_gflops=1e-3), calibration)
    monkeypatch.setenv("AUTOSCHED_CALIBRATION", str(calibration))
    result = cli(  # B packed ahead: the tuned program is timed as the search built it
        "bench", "kernels", "matmul", "-p", "M=16", "-p", "N=16", "-p", "K=16", "-p", "weights=B",
        "--trials", "1", "--json",
    )  # fmt: skip
    assert result.code == 0, result.err
    document = json.loads(result.out)
    (row,) = document["rows"]
    peak = max(row["gflops"], row["flops"] / row["peer_us"] / 1e3)
    assert document["calibration"]["peak_gflops"] == pytest.approx(peak)
    assert document["calibration"]["raised_by"] in ("tuned matmul", "numpy (OpenBLAS) on matmul")
    assert load_calibration(host_target(), calibration) == Calibration(
        **{k: v for k, v in document["calibration"].items() if k != "path"}
    )
    assert row["roofline_us"] == pytest.approx(max(row["flops"] / (peak * 1e3), 3072 / 10e3))
    assert "the peak is raised" in result.err


def test_the_fastest_of_a_peers_alternatives_counts_and_each_is_reported() -> None:
    def taking(secs: float) -> Callable[[list[np.ndarray]], Callable[[], list[np.ndarray]]]:
        return lambda inputs: lambda: (time.sleep(secs), inputs)[1]

    slow = Peer("library, NCHW", taking(2e-3))
    peer = replace(slow, alternatives=(Peer("library, channels-last", taking(2e-4)),))
    inputs = [np.zeros(4, np.float32)]
    timings, _ = time_side_by_side({way.name: way.bind(inputs) for way in peer.ways if way.bind})
    fastest, timing, timed = fastest_way(peer, timings)
    assert fastest.name == "library, channels-last"
    assert timing is not None and 2e-4 <= timing.median_secs < 2e-3
    assert timed is not None and timed.startswith("the fastest of library, NCHW ")
    assert ", library, channels-last " in timed
    assert fastest_way(slow, timings)[2] is None  # nothing to choose from
    assert fastest_way(peer, {}) == (peer, None, None)  # none ran


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("conv2d_nchw", {"N": 1, "H": 9, "W": 9, "CI": 4, "CO": 8, "stride": 2}),
        ("conv2d_nchw_winograd", {"N": 1, "H": 9, "W": 7, "CI": 4, "CO": 8, "padding": 2}),
        ("conv2d_nhwc_winograd", {"N": 2, "H": 7, "W": 9, "CI": 4, "CO": 8, "padding": 1}),
        ("conv2d_nhwc", {"N": 2, "H": 8, "W": 8, "CI": 4, "CO": 8, "stride": 2}),
        ("depthwise_conv2d", {"N": 1, "H": 8, "W": 8, "C": 8, "padding": 0}),
    ],
)
def test_pytorch_runs_each_convolution_in_both_memory_layouts_and_both_match(
    name: str, params: dict
) -> None:
    peer = peer_for(get_workload(name, params))
    assert [way.name.rsplit(", ", 1)[1] for way in peer.ways] == [
        "NCHW",
        "channels-last",
    ]
    result = check_peer(get_workload(name, params), seed=0)
    assert result.ok, result.detail
