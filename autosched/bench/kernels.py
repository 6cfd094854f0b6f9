"""`autosched bench kernels`: per workload, in one run, the untuned, tuned and peer latencies, the
ratio of tuned to peer and the share of the roofline bound reached; as rows, JSON and a chart.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from autosched.bench import plotting as plots
from autosched.bench.timing import time_call
from autosched.errors import UserError
from autosched.log import TuningLog
from autosched.measure import LocalMeasurer
from autosched.roofline import Calibration
from autosched.tuner import TuneOptions, tune
from autosched.workload import Workload, random_inputs
from autosched.workloads import get_workload
from autosched.workloads.peers import Peer, peer_for, use_peer_threads


@dataclass(frozen=True)
class BenchCase:
    """One workload with its parameters, as a suite lists it."""

    workload: str
    params: dict[str, object]


# smoke: tiny shapes, a whole run in about a minute; seeds: the shapes of the reading list.
SUITES: dict[str, tuple[BenchCase, ...]] = {
    "smoke": (
        BenchCase("matmul", {"M": 64, "N": 64, "K": 64}),
        BenchCase("softmax", {"rows": 32, "cols": 256}),
        BenchCase("blur3x3", {"H": 128, "W": 128}),
    ),
    "seeds": (
        BenchCase("matmul", {"M": 1024, "N": 1024, "K": 1024}),
        BenchCase("batch_matmul", {}),
        BenchCase("dense_bias_relu", {}),
        BenchCase("conv2d_nhwc", {"preset": "resnet50_res2_3x3"}),
        BenchCase("conv2d_nhwc", {"preset": "resnet50_res3_3x3"}),
        BenchCase("conv2d_nhwc", {"preset": "resnet50_res4_3x3"}),
        BenchCase("conv2d_nchw", {"preset": "resnet50_res3_1x1"}),
        BenchCase("depthwise_conv2d", {"preset": "mobilenet_v2_56x56x144_s1"}),
        BenchCase("conv1d_glu", {}),
        BenchCase("attention_luong", {}),
        BenchCase("attention_bahdanau", {}),
        BenchCase("attention_chunked", {}),
        BenchCase("softmax", {}),
        BenchCase("layernorm", {}),
        BenchCase("matmul_int4_weight", {}),
        BenchCase("matmul_int8", {"layout": "vnni"}),
        BenchCase("gemv_lut_lowbit", {}),
        BenchCase("mxfp8_quantize", {}),
        BenchCase("dropout_philox", {}),
        BenchCase("blur3x3", {}),
        BenchCase("unsharp_mask", {}),
        BenchCase("harris_corner", {}),
        BenchCase("ragged_batch_matmul", {}),
    ),
}


@dataclass(frozen=True)
class KernelRow:
    """One benchmarked workload. Latencies in microseconds; None where nothing was measured.

    ``flops`` counts operations, integer ones too (``float_arithmetic`` false: int8 dot
    products), or another algorithm's (``nominal_flops``: a Winograd convolution counts the direct
    one's). Neither row has a roofline, nor raises the peak: the calibrated peak is of float32
    FMAs the program itself performs.
    """

    workload: str
    params: dict[str, object]
    flops: float | None
    float_arithmetic: bool
    min_bytes: int
    trials: int
    untuned_us: float | None
    tuned_us: float | None
    peer: str
    peer_us: float | None
    tuned_over_peer: float | None
    gflops: float | None
    roofline_us: float | None
    roofline_percent: float | None
    note: str | None
    nominal_flops: bool = False

    @property
    def bounded_by_peak(self) -> bool:
        """Whether the calibrated float32 peak bounds this row's rate."""
        return self.float_arithmetic and not self.nominal_flops

    def as_json(self) -> dict[str, object]:
        return asdict(self)

    def against(self, calibration: Calibration) -> KernelRow:
        """This row with its roofline figures taken against ``calibration`` (none where the peak
        does not bound its rate)."""
        if not self.bounded_by_peak:
            return replace(self, roofline_us=None, roofline_percent=None)
        bound_us = calibration.bound_secs(self.flops, self.min_bytes) * 1e6
        percent = 100 * bound_us / self.tuned_us if self.tuned_us else None
        return replace(self, roofline_us=bound_us, roofline_percent=percent)


def suite_cases(
    suite: str | None, workloads: Sequence[str], params: dict[str, str]
) -> list[BenchCase]:
    """The cases to run: the named workloads (with ``params``) or else the suite.

    Raises:
        UserError: an unknown suite, both a suite and workloads, or parameters for several.
    """
    if workloads:
        if suite is not None:
            raise UserError("give a --suite or workload names, not both")
        if params and len(workloads) > 1:
            raise UserError("-p sets parameters of one workload; name a single workload")
        return [BenchCase(name, dict(params)) for name in workloads]
    if params:
        raise UserError("-p needs a workload name")
    name = suite or "smoke"
    if name not in SUITES:
        raise UserError(f"unknown suite {name!r}; suites: {', '.join(SUITES)}")
    return list(SUITES[name])


def bench_kernels(
    cases: Sequence[BenchCase],
    target: dict,
    *,
    trials: int,
    calibration: Calibration,
    db_url: str | None = None,
    seed: int = 0,
    on_row: Callable[[KernelRow], None] | None = None,
) -> list[KernelRow]:
    """Tune each case with ``trials`` candidates and compare it with its peer and the roofline.

    Tuning goes to ``db_url`` (continuing what is there) or to a throw-away log. Workload peers
    are tuned with the same budget.
    """
    workloads = [get_workload(case.workload, case.params) for case in cases]  # bad input first
    cores = target.get("num-cores")
    if isinstance(cores, int) and cores > 0:  # the cores the tuned programs are timed on
        use_peer_threads(cores)
    with tempfile.TemporaryDirectory(prefix="autosched-bench-") as work:
        log = TuningLog(db_url or f"sqlite:///{Path(work) / 'bench.db'}")
        measurer = LocalMeasurer(target)
        options = TuneOptions(trials=trials, batch_size=min(trials, 64), seed=seed)
        rows = []
        try:
            for workload in workloads:
                row = _bench_one(workload, target, log, measurer, options, calibration, seed)
                rows.append(row)
                if on_row is not None:
                    on_row(row)
        finally:
            measurer.close()
            log.close()
    return rows


def _bench_one(
    workload: Workload,
    target: dict,
    log: TuningLog,
    measurer: LocalMeasurer,
    options: TuneOptions,
    calibration: Calibration,
    seed: int,
) -> KernelRow:
    report = tune(workload, target, log, measurer, options)
    peer, peer_secs, timed = _timed_peer(
        peer_for(workload), workload, target, log, measurer, options, seed
    )
    tuned = report.best_latency_secs
    row = KernelRow(
        workload=workload.name,
        params=dict(workload.params),
        flops=workload.flops,
        float_arithmetic=workload.float_arithmetic,
        nominal_flops=workload.nominal_flops,
        min_bytes=workload.min_bytes,
        trials=report.trials,
        untuned_us=_us(report.baseline_latency_secs),
        tuned_us=_us(tuned),
        peer=peer.name,
        peer_us=_us(peer_secs),
        tuned_over_peer=tuned / peer_secs if tuned and peer_secs else None,
        gflops=workload.flops / tuned / 1e9 if tuned and workload.flops else None,
        roofline_us=None,
        roofline_percent=None,
        note=peer.fallback or timed,
    )
    return row.against(calibration)


def fastest_rate(rows: Sequence[KernelRow]) -> tuple[float, str]:
    """The highest GFLOP/s any tuned program or peer of a floating-point workload reached, and
    which one it was (integer operations, four int8 products to a VNNI lane, are no FLOPs; a
    Winograd convolution's counted FLOPs are the direct one's, not its own)."""
    rates = []
    for row in rows:
        if not row.bounded_by_peak:
            continue
        if row.gflops is not None:
            rates.append((row.gflops, f"tuned {row.workload}"))
        if row.peer_us and row.flops:
            rates.append((row.flops / row.peer_us / 1e3, f"{row.peer} on {row.workload}"))
    return max(rates, default=(0.0, "nothing"))


def _us(secs: float | None) -> float | None:
    return None if secs is None else secs * 1e6


def _timed_peer(
    peer: Peer,
    workload: Workload,
    target: dict,
    log: TuningLog,
    measurer: LocalMeasurer,
    options: TuneOptions,
    seed: int,
) -> tuple[Peer, float | None, str | None]:
    """The peer that counts, its seconds and, where it had alternatives, what each took: a
    workload peer tuned with the same budget, else a library peer timed on random inputs."""
    if peer.workload is not None:
        return peer, tune(peer.workload, target, log, measurer, options).best_latency_secs, None
    assert workload.num_outputs is not None
    return fastest_peer(peer, random_inputs(workload, seed)[: -workload.num_outputs])


def fastest_peer(peer: Peer, inputs: list[np.ndarray]) -> tuple[Peer, float, str | None]:
    """Time a library peer and each of its alternatives on ``inputs``: the fastest, its median
    seconds and, where there were alternatives, a line with what each took."""
    timed = []
    for way in peer.ways:
        assert way.bind is not None
        timed.append((time_call(way.bind(inputs)), way))
    secs, fastest = min(timed, key=lambda pair: pair[0])
    if not peer.alternatives:
        return fastest, secs, None
    each = ", ".join(f"{way.name} {way_secs * 1e6:.1f} us" for way_secs, way in timed)
    return fastest, secs, f"the fastest of {each}"


def plot_rows(rows: Sequence[KernelRow], path: Path) -> None:
    """A PNG: latencies (untuned, tuned, peer) per workload on a log scale, and the share of the
    roofline bound the tuned program reaches.

    Raises:
        UserError: matplotlib is not installed.
    """
    pyplot = plots.pyplot()
    labels = [row.workload for row in rows]
    positions = np.arange(len(rows))
    figure, (latency, roofline) = pyplot.subplots(
        2, 1, figsize=(max(8, 0.7 * len(rows) + 3), 8), sharex=True
    )
    width = 0.27
    for offset, (name, values) in enumerate(
        [
            ("untuned", [row.untuned_us for row in rows]),
            ("tuned", [row.tuned_us for row in rows]),
            ("peer", [row.peer_us for row in rows]),
        ]
    ):
        heights = [value or 0.0 for value in values]
        latency.bar(positions + (offset - 1) * width, heights, width, label=name)
    latency.set_yscale("log")
    latency.set_ylabel("latency (us)")
    latency.legend()
    latency.set_title("autosched bench kernels")
    roofline.bar(positions, [row.roofline_percent or 0.0 for row in rows], 0.5, color="tab:green")
    roofline.set_ylabel("% of roofline bound")
    roofline.set_xticks(positions, labels, rotation=45, ha="right")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
