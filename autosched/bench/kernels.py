"""`autosched bench kernels`: per workload, in one run, the untuned, tuned and peer latencies, the
ratio of tuned to peer and the share of the roofline bound reached; as rows, JSON and a chart.

The tuned program and its peer are timed side by side in this process (``autosched.bench.timing``),
the cores' placement read after each round (``autosched.machine.handoff``): a change in the
machine's speed or in where the host put the cores falls on both alike, so their ratio holds
within the run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import tvm

from autosched.bench import plotting as plots
from autosched.bench.timing import Timing, time_side_by_side, use_threads
from autosched.errors import UserError
from autosched.exports.kernels import best_schedule
from autosched.log import TuningLog
from autosched.machine.handoff import farther, placement
from autosched.machine.roofline import Calibration
from autosched.measure import LocalMeasurer
from autosched.measure.program import target_device, timed_program
from autosched.target import to_tvm_target
from autosched.tuner import TuneOptions, tune
from autosched.workload import Workload, buffer_args, random_arrays, random_inputs
from autosched.workloads import get_workload
from autosched.workloads.peers import Peer, peer_for


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


KERNEL_ROUNDS = 9  # rounds of side-by-side timing of the tuned program and its peer
TUNED = "tuned"  # the tuned program's name among the contenders timed side by side


@dataclass(frozen=True)
class KernelRow:
    """One benchmarked workload. Latencies in microseconds; None where nothing was measured.

    ``tuned_us`` and ``peer_us`` are medians of ``rounds`` rounds of side-by-side timing,
    ``tuned_spread_us`` and ``peer_spread_us`` their smallest and largest samples, ``far_rounds``
    the rounds after which the cores were read farther apart than after the others
    (`autosched.machine.handoff.farther`).
    ``untuned_us`` and ``searched_us`` (the best candidate as the search timed it) are the
    search's own measurements.

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
    searched_us: float | None = None
    tuned_spread_us: tuple[float, float] | None = None
    peer_spread_us: tuple[float, float] | None = None
    rounds: int = 0
    far_rounds: int = 0

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
    if isinstance(cores, int) and cores > 0:  # the measurer's threads, here and for the peers
        use_threads(cores)
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
    peer = peer_for(workload)
    calls: dict[str, Callable[[], object]] = {}
    if report.best_latency_secs is not None:
        calls[TUNED] = tuned_call(log, workload, target, seed)
    if peer.workload is not None:  # tuned with the same budget, built and timed like ours
        if tune(peer.workload, target, log, measurer, options).best_latency_secs is not None:
            calls[peer.name] = tuned_call(log, peer.workload, target, seed)
    else:
        assert workload.num_outputs is not None
        inputs = random_inputs(workload, seed)[: -workload.num_outputs]
        calls.update({way.name: way.bind(inputs) for way in peer.ways if way.bind is not None})
    probe = (lambda: placement(target)) if target["kind"] == "llvm" else None
    timings, placements = time_side_by_side(calls, KERNEL_ROUNDS, between=probe)
    fastest, peer_timing, timed = fastest_way(peer, timings)
    tuned = timings.get(TUNED)
    tuned_secs = None if tuned is None else tuned.median_secs
    peer_secs = None if peer_timing is None else peer_timing.median_secs
    row = KernelRow(
        workload=workload.name,
        params=dict(workload.params),
        flops=workload.flops,
        float_arithmetic=workload.float_arithmetic,
        nominal_flops=workload.nominal_flops,
        min_bytes=workload.min_bytes,
        trials=report.trials,
        untuned_us=_us(report.baseline_latency_secs),
        tuned_us=_us(tuned_secs),
        peer=fastest.name,
        peer_us=_us(peer_secs),
        tuned_over_peer=tuned_secs / peer_secs if tuned_secs and peer_secs else None,
        gflops=workload.flops / tuned_secs / 1e9 if tuned_secs and workload.flops else None,
        roofline_us=None,
        roofline_percent=None,
        note=fastest.fallback or timed,
        searched_us=_us(report.best_latency_secs),
        tuned_spread_us=_spread_us(tuned),
        peer_spread_us=_spread_us(peer_timing),
        rounds=KERNEL_ROUNDS if calls else 0,
        far_rounds=sum(farther(placements)),
    )
    return row.against(calibration)


def tuned_call(log: TuningLog, workload: Workload, target: dict, seed: int) -> Callable[[], None]:
    """The best verified program of ``workload`` on ``target`` in ``log``, built in this process
    as the search timed it (its weights packed ahead, `autosched.measure.program.timed_program`),
    as a call on random arguments that returns once the device is done."""
    mod = timed_program(best_schedule(log, workload, target).schedule.mod)
    main = tvm.compile(mod, target=to_tvm_target(target)).jit()["main"]
    device = target_device(target)
    arrays = random_arrays(buffer_args(mod["main"], workload.name), workload.num_outputs or 0, seed)
    args = [tvm.runtime.tensor(array, device) for array in arrays]

    def call() -> None:
        main(*args)
        device.sync()

    return call


def fastest_way(peer: Peer, timings: dict[str, Timing]) -> tuple[Peer, Timing | None, str | None]:
    """Of the peer's ways timed in ``timings`` (by name), the fastest by median, its timing and,
    where there were alternatives, a line with what each took; the peer itself if none ran."""
    timed = [(timings[way.name], way) for way in peer.ways if way.name in timings]
    if not timed:
        return peer, None, None
    fastest_timing, fastest = min(timed, key=lambda pair: pair[0].median_secs)
    if not peer.alternatives:
        return fastest, fastest_timing, None
    each = ", ".join(f"{way.name} {timing.median_secs * 1e6:.1f} us" for timing, way in timed)
    return fastest, fastest_timing, f"the fastest of {each}"


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


def _spread_us(timing: Timing | None) -> tuple[float, float] | None:
    return None if timing is None else (timing.min_secs * 1e6, timing.max_secs * 1e6)


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
