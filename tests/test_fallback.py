"""Nearest-hardware fallback: on a log built for it, each level (exact, device, processor, ISA
family) is picked in turn, a trace relying on wider vectors than the target has is never taken,
a trace that no longer replays is reported and passed over, and a job on a target the log never
measured starts from the nearest records."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import Cli, start_job
from sqlalchemy import select
from tvm import te
from tvm.s_tir import Schedule

from autosched.admission import program_json
from autosched.errors import UserError
from autosched.exports.kernels import best_schedule
from autosched.fallback import FallbackLevel, intrinsic_features, isa_fits, vector_bits
from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.subjects import ensure_subject
from autosched.log.tables import Candidate
from autosched.measure import LocalMeasurer
from autosched.measure.simulated import SimulatedMeasurer
from autosched.records import CandidateResult, MeasureResult
from autosched.schedule import program_hash, trace_to_json
from autosched.server.engine import JobDriver
from autosched.target import canonical_target, host_target
from autosched.tuner import TuneOptions, tune
from autosched.workload import Workload, workload_from_ir_json, workload_from_te

X86 = "x86_64-unknown-linux-gnu"


def _llvm(mcpu: str, cores: int = 4) -> dict:
    return {"kind": "llvm", "mcpu": mcpu, "mtriple": X86, "num-cores": cores}


OURS = _llvm("znver3")  # AVX2: 256-bit vectors
ZNVER3_8 = _llvm("znver3", 8)
HASWELL = _llvm("haswell")
ZNVER4 = _llvm("znver4")  # AVX-512
ALDERLAKE = _llvm("alderlake")  # AVX2, no AVX-512 in LLVM's model
SAPPHIRERAPIDS = _llvm("sapphirerapids")  # AVX-512
HERE = {"hostname": "here", "cpu_model": "AMD Ryzen 9 5950X", "physical_cores": 16}
ELSEWHERE = {"hostname": "elsewhere", "cpu_model": "AMD EPYC 9654", "physical_cores": 96}
TWIN = {**ELSEWHERE, "hostname": "twin"}  # another machine with ELSEWHERE's processor


def vadd() -> Workload:
    """A tiny elementwise workload, carried as IR JSON like a user's program."""
    a = te.placeholder((64,), "float32", name="A")
    b = te.placeholder((64,), "float32", name="B")
    c = te.compute((64,), lambda i: a[i] + b[i], name="C")
    built = workload_from_te("vadd", {}, [a, b, c], flops=64, reference=None)
    return workload_from_ir_json(program_json(built.func), name="vadd")


def vectorized(workload: Workload, lanes: int) -> tuple[str, str]:
    """The trace and program hash of ``workload`` with its loop vectorized ``lanes`` wide."""
    sch = Schedule(workload.mod)
    (loop,) = sch.get_loops(sch.get_sblock("C"))
    _, inner = sch.split(loop, [None, lanes])
    sch.vectorize(inner)
    return trace_to_json(sch.trace), program_hash(sch.mod)


def record(
    log: TuningLog, workload: Workload, target: dict, machine: dict, lanes: int, secs: float
) -> None:
    """A verified measurement of ``workload`` vectorized ``lanes`` wide, on ``machine``."""
    stored, stored_target = ensure_subject(log, workload, target)
    job = start_job(log, stored.id, stored_target.id, 1)
    trace, digest = vectorized(workload, lanes)
    device = log.ensure_device({"kind": "llvm", **machine})
    result = MeasureResult(samples=(secs,))
    log.record_batch(job, [CandidateResult(trace, digest, result, verified=True, device_id=device)])


@pytest.fixture
def tuned(tmp_path: Path) -> Iterator[tuple[TuningLog, Workload]]:
    """A log of one workload on four targets: Haswell measured on this machine, 8 lanes; a
    larger Zen 3 elsewhere, 8 lanes; Zen 4 elsewhere, 16 lanes (512 bits), the fastest."""
    log = TuningLog(f"sqlite:///{tmp_path / 'tuned.db'}")
    workload = vadd()
    record(log, workload, HASWELL, HERE, lanes=8, secs=5e-5)
    record(log, workload, ZNVER3_8, ELSEWHERE, lanes=8, secs=4e-5)
    record(log, workload, ZNVER4, ELSEWHERE, lanes=16, secs=1e-5)
    yield log, workload
    log.close()


@pytest.mark.parametrize(
    ("target", "machines", "level", "tuned_for"),
    [
        (ZNVER3_8, [HERE], FallbackLevel.EXACT, ZNVER3_8),
        (OURS, [HERE], FallbackLevel.DEVICE, HASWELL),
        (OURS, [], FallbackLevel.PROCESSOR, ZNVER3_8),
        (_llvm("znver2"), [TWIN], FallbackLevel.PROCESSOR, ZNVER4),  # the same CPU model
        (ALDERLAKE, [], FallbackLevel.ISA, ZNVER3_8),  # Zen 4's 512-bit trace does not fit
        (SAPPHIRERAPIDS, [], FallbackLevel.ISA, ZNVER4),  # AVX-512: every trace fits
    ],
)
def test_the_nearest_level_with_a_record_is_picked(
    tuned: tuple[TuningLog, Workload], target: dict, machines: list, level, tuned_for: dict
) -> None:
    log, workload = tuned
    machines = [{"kind": "llvm", **machine} for machine in machines]
    best = best_schedule(log, workload, target, fallback=True, machines=machines)
    assert best.level is level
    assert best.tuned_for == canonical_target(tuned_for) and best.target == canonical_target(target)


def test_without_fallback_or_any_match_there_is_no_schedule(
    tuned: tuple[TuningLog, Workload],
) -> None:
    log, workload = tuned
    with pytest.raises(UserError, match="no tuned schedule of vadd for this target;"):
        best_schedule(log, workload, OURS)
    arm = {"kind": "llvm", "mcpu": "neoverse-v1", "mtriple": "aarch64-linux-gnu"}
    with pytest.raises(UserError, match="for this target or a nearby one"):
        best_schedule(log, workload, arm, fallback=True)


def test_the_isa_rule_reads_vector_width_and_intrinsics() -> None:
    workload = vadd()
    narrow, _ = vectorized(workload, 8)
    wide, _ = vectorized(workload, 16)
    assert isa_fits(workload, narrow, ZNVER4, ALDERLAKE)
    assert not isa_fits(workload, wide, ZNVER4, ALDERLAKE)
    assert isa_fits(workload, wide, HASWELL, ALDERLAKE)  # tuned for 256 bits: relies on 256
    assert not isa_fits(workload, narrow, ZNVER4, {**ALDERLAKE, "mtriple": "aarch64-linux-gnu"})
    vnni = json.dumps([[["Tensorize", [], ["dot_16x4_vnni", True], []]], []])
    assert intrinsic_features(vnni) == {"avx512vnni"}
    assert not isa_fits(workload, vnni, SAPPHIRERAPIDS, ALDERLAKE)
    assert vector_bits(frozenset({"avx2", "avx", "sse4.2"})) == 256


def test_a_record_that_no_longer_replays_is_reported_and_passed_over(
    tuned: tuple[TuningLog, Workload],
) -> None:
    log, workload = tuned
    stored, target = ensure_subject(log, workload, ALDERLAKE)
    job = start_job(log, stored.id, target.id, 2)
    broken = json.dumps([[["NoSuchInstruction", [], [], []]], []])
    trace, digest = vectorized(workload, 4)
    log.record_batch(
        job,
        [
            CandidateResult(broken, "f" * 32, MeasureResult(samples=(1e-6,)), verified=True),
            CandidateResult(trace, digest, MeasureResult(samples=(2e-6,)), verified=True),
        ],
    )
    best = best_schedule(log, workload, ALDERLAKE)
    assert best.level is FallbackLevel.EXACT and best.record.program_hash == digest
    assert len(best.notes) == 1 and "no longer replays" in best.notes[0]


def test_a_job_on_a_target_never_measured_starts_from_the_nearest_records(
    tuned: tuple[TuningLog, Workload],
) -> None:
    log, workload = tuned
    measurer = SimulatedMeasurer()
    options = TuneOptions(trials=2, batch_size=2, seed=0, strategy="random", warm=False)
    report = tune(workload, ALDERLAKE, log, measurer, options)
    assert report.seeded_from == "1 records of znver3 (isa match)"
    seed_trace, _ = vectorized(workload, 8)
    assert measurer.measured[1] == seed_trace  # right after the untuned baseline


def test_export_fallback_prints_the_level(
    tuned: tuple[TuningLog, Workload], cli: Cli, tmp_path: Path
) -> None:
    log, workload = tuned
    assert workload.source is not None
    program = tmp_path / "vadd.json"
    program.write_text(workload.source)
    out = tmp_path / "vadd.py"
    export = ["export", "--file", str(program), "--target", json.dumps(ALDERLAKE), "--db", log.url]
    result = cli(*export, "--fallback", "--output", str(out))
    assert result.code == 0, result.err
    assert "matched at level isa" in result.out
    header = out.read_text()
    assert '# match: "isa"' in header and '"mcpu": "znver3"' in header
    refused = cli(*export, "--output", str(out))
    assert refused.code == 2 and "no tuned schedule" in refused.err


@pytest.mark.slow
def test_retime_measures_the_nearest_records_here(tuned: tuple[TuningLog, Workload]) -> None:
    log, workload = tuned
    target = {**host_target(), "num-cores": 1}
    measurer = LocalMeasurer(target)
    try:
        best = best_schedule(log, workload, target, fallback=True, retime=measurer)
    finally:
        measurer.close()
    assert best.level is not FallbackLevel.EXACT
    (note,) = best.notes
    assert note.startswith("retimed ") and note.endswith(" ran")
    assert best.record.samples and best.record.samples != (4e-5,) and best.record.samples != (1e-5,)


def test_a_service_job_on_a_target_never_measured_queues_the_nearest_records_first(
    tuned: tuple[TuningLog, Workload],
) -> None:
    log, workload = tuned
    jobs = JobStore(log)
    job_id = jobs.submit(workload, ALDERLAKE, trials=2, batch_size=2, strategy="random", seed=0)
    assert job_id in jobs.claim_jobs("test-engine", 60)
    driver = JobDriver(log, jobs, jobs.job(job_id))
    assert driver.advance()
    with log.sessions.begin() as session:
        queued = list(
            session.scalars(
                select(Candidate.program_hash)
                .where(Candidate.job_id == job_id)
                .order_by(Candidate.queue_position, Candidate.id)
            )
        )
    _, seed_hash = vectorized(workload, 8)
    assert queued[:2] == [program_hash(workload.mod), seed_hash]  # the baseline, then the seed
