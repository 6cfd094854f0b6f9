"""The portable tuning log: export and import between SQLite and PostgreSQL, idempotent merges
that keep every log's samples with their provenance and the finals that re-timed their best
records, and files refused whole (corrupt, of an unknown version, over a bound, or carrying a
hostile program) with one line.
"""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import tvm
from helpers import Cli, on_postgresql, on_sqlite, start_job
from sqlalchemy import func, select, update

from autosched.admission import program_json
from autosched.errors import Conflict, UserError
from autosched.finals.ranking import Entrant, rank_finalists
from autosched.finals.timings import FinalistStore
from autosched.log import TuningLog
from autosched.log.portable import Limits, Selection, Tally, export_log, import_log
from autosched.log.provenance import autosched_version
from autosched.log.subjects import ensure_subject
from autosched.log.tables import (
    Candidate,
    Device,
    FinalistTiming,
    Measurement,
    Target,
    TuningJob,
    Workload,
)
from autosched.records import CandidateResult, ErrorKind, MeasureResult
from autosched.workloads import get_workload

SHAPE = {"M": 16, "N": 16, "K": 16}
TARGET = {"kind": "llvm", "mcpu": "znver3", "mtriple": "x86_64-unknown-linux-gnu", "num-cores": 4}
MACHINE_A = {
    "kind": "llvm",
    "hostname": "a",
    "cpu_model": "AMD EPYC 7763",
    "physical_cores": 4,
    "tvm_version": tvm.__version__,
    "llvm_version": 17,
}
MACHINE_B = {**MACHINE_A, "hostname": "b"}
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def fill(
    log: TuningLog, machine: dict, *, programs: range, base: float, shape: dict = SHAPE
) -> int:
    """Measure made-up programs of a small matmul on ``machine`` (one build error among them);
    returns the job id."""
    workload = get_workload("matmul", shape)
    stored, target = ensure_subject(log, workload, TARGET)
    device = log.ensure_device(machine)
    job = start_job(log, stored.id, target.id, len(programs))
    results = []
    for i in programs:
        started = T0 + timedelta(seconds=i)
        if i == programs[-1]:
            result = MeasureResult(
                error_kind=ErrorKind.BUILD, error_msg="no such intrinsic", started_at=started
            )
        else:
            secs = base + i * 1e-6
            result = MeasureResult(
                samples=(secs, secs * 1.01, secs * 0.99),
                build_secs=0.5,
                started_at=started,
                finished_at=started + timedelta(seconds=1),
            )
        trace = json.dumps([[["SampleCategorical", [], [], [i]]], []])
        results.append(CandidateResult(trace, f"{i:032x}", result, verified=True, device_id=device))
    log.record_batch(job, results)
    return job


def record_final(log: TuningLog, job: int, programs: range) -> None:
    """A final of ``programs`` (measured by ``fill``) for the job: five samples each, the
    fastest program the slowest single shot, so that the final changes the winner."""
    workload = get_workload("matmul", SHAPE)
    stored, target = ensure_subject(log, workload, TARGET)
    entrants = [
        Entrant(
            f"{i:032x}", json.dumps([[["SampleCategorical", [], [], [i]]], []]), 1e-4 + i * 1e-6
        )
        for i in programs
    ]
    samples = [[(2 + len(programs) - i) * 1e-5 + r * 1e-7 for r in range(5)] for i in programs]
    device = log.ensure_device(MACHINE_A)
    FinalistStore(log).record(job, stored.id, target.id, device, rank_finalists(entrants, samples))


def content(path: Path) -> list[dict]:
    """A file's lines, its header without the time it was written."""
    with gzip.open(path, "rt") as lines:
        header, *rest = (json.loads(line) for line in lines)
    del header["created_at"]
    return [header, *rest]


def snapshot(log: TuningLog) -> dict[str, object]:
    """Everything an import may touch: row counts, measurement uids and best records."""
    with log.sessions.begin() as session:
        counts = {
            model.__tablename__: session.scalar(select(func.count()).select_from(model))
            for model in (Workload, Target, Device, Candidate, Measurement)
        }
        uids = sorted(session.scalars(select(Measurement.uid)))
    best = [(row.workload_name, row.best_latency_secs) for row in log.summary()]
    return {"counts": counts, "uids": uids, "best": best}


def assert_refused_whole(log: TuningLog, file: Path, message: str) -> None:
    """Importing ``file`` is refused with one line that says ``message``, and changes nothing."""
    before = snapshot(log)
    with pytest.raises(UserError) as refused:
        import_log(log, file)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert snapshot(log) == before


def rewrite(source: Path, target: Path, change: dict[int, dict | None]) -> Path:
    """Copy a file, with line ``n`` replaced by ``change[n]`` (dropped if None)."""
    with gzip.open(source, "rt") as lines:
        documents = [json.loads(line) for line in lines]
    with gzip.open(target, "wt") as out:
        for number, document in enumerate(documents):
            replaced = change.get(number, document)
            if replaced is not None:
                out.write(json.dumps(replaced) + "\n")
    return target


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    """A file of a SQLite log: one workload on one target, 5 measurements (one failed)."""
    with TuningLog(f"sqlite:///{tmp_path / 'source.db'}") as source:
        fill(source, MACHINE_A, programs=range(5), base=1e-4)
        export_log(source, tmp_path / "source.jsonl.gz")
    return tmp_path / "source.jsonl.gz"


@on_postgresql
def test_a_round_trip_through_postgresql_gives_equal_content(
    db_url: str, exported: Path, tmp_path: Path
) -> None:
    with TuningLog(db_url) as log:
        summary = import_log(log, exported)
        assert summary.measurements == Tally(new=5, existing=0)
        again = export_log(log, tmp_path / "again.jsonl.gz")
    assert content(again.path) == content(exported)
    lines = content(exported)
    kinds = [line.get("type", "header") for line in lines]
    assert kinds == ["header", "workload", "target", "device", *["measurement"] * 5, "best", "end"]
    measured = [line for line in lines if line.get("type") == "measurement"]
    assert measured[-1]["error_kind"] == "build" and measured[-1]["samples"] == []
    provenance = measured[0]["provenance"]
    assert provenance["autosched"] == autosched_version() and provenance["tvm"] == tvm.__version__
    assert provenance["llvm"] == "17" and provenance["job"] == 1
    assert provenance["machine"] == {
        "cpu_model": "AMD EPYC 7763",
        "physical_cores": 4,
        "hostname": "a",
    }


def test_importing_a_file_twice_changes_nothing(log: TuningLog, exported: Path) -> None:
    first = import_log(log, exported)
    assert (first.workloads, first.targets, first.devices) == (
        Tally(1, 0),
        Tally(1, 0),
        Tally(1, 0),
    )
    assert first.measurements == Tally(5, 0) and first.other_tvm == 0
    before = snapshot(log)
    second = import_log(log, exported)
    assert (second.workloads, second.targets, second.devices) == (Tally(0, 1),) * 3
    assert second.measurements == Tally(0, 5)
    assert snapshot(log) == before


def test_merging_two_logs_of_one_workload_keeps_every_sample(
    log: TuningLog, tmp_path: Path
) -> None:
    files = []
    for name, machine, base in (("a", MACHINE_A, 2e-4), ("b", MACHINE_B, 1e-4)):
        with TuningLog(f"sqlite:///{tmp_path / name}.db") as source:
            fill(source, machine, programs=range(4), base=base)
            files.append(export_log(source, tmp_path / f"{name}.jsonl.gz").path)
    fill(log, MACHINE_A, programs=range(2, 6), base=3e-4)  # this log's own measurements
    for file in files:
        assert import_log(log, file).measurements == Tally(4, 0)
    workload = log.find_workload(get_workload("matmul", SHAPE).key)
    assert workload is not None
    (tuned,) = log.tuned_records(workload.id)
    records = log.records(workload.id, tuned.target.id)
    assert len(records) == 12  # 4 here, 4 + 4 imported; programs 2 and 3 measured three times
    by_program = {}
    for record in records:
        by_program.setdefault(record.program_hash, []).append(record.samples)
    assert len(by_program[f"{2:032x}"]) == 3 and len(by_program[f"{5:032x}"]) == 1
    assert tuned.record.median_secs == pytest.approx(1e-4)  # machine b's fastest program
    assert tuned.device is not None and tuned.device["hostname"] == "b"
    # this log's own measurement of a program measured elsewhere is still its one local one
    with log.sessions.begin() as session:
        local = session.scalar(
            select(func.count()).select_from(Measurement).where(Measurement.imported_at.is_(None))
        )
    assert local == 4


def test_an_export_selects_by_workload_target_and_time(log: TuningLog, tmp_path: Path) -> None:
    fill(log, MACHINE_A, programs=range(3), base=1e-4)
    fill(log, MACHINE_A, programs=range(3), base=1e-4, shape={"M": 8, "N": 8, "K": 8})
    small = get_workload("matmul", {"M": 8, "N": 8, "K": 8}).key
    only = export_log(log, tmp_path / "one.jsonl.gz", Selection(workload=small))
    assert only.counts["workload"] == 1 and only.counts["measurement"] == 3
    with log.sessions.begin() as session:
        session.execute(update(Measurement).values(finished_at=T0))
    late = export_log(log, tmp_path / "late.jsonl.gz", Selection(since=T0 + timedelta(days=1)))
    assert late.counts["measurement"] == 2  # nothing is that recent but the two best records
    assert late.counts["best"] == 2
    with pytest.raises(UserError, match="nothing to export"):
        export_log(log, tmp_path / "none.jsonl.gz", Selection(workload="nope"))


def _hostile_program() -> str:
    graph = json.loads(program_json(get_workload("softmax", {}).func))
    op = next(i for i, node in enumerate(graph["nodes"]) if node["type"] == "ir.Op")
    graph["nodes"][op]["data"] = "tirx.call_extern"
    return json.dumps(graph)


def _program_importing_llvm_ir() -> str:
    """A loop annotated with LLVM IR that TVM links into the kernel."""
    graph = json.loads(program_json(get_workload("softmax", {}).func))
    nodes = graph["nodes"]
    loop = next(node for node in nodes if node["type"] == "tirx.For")
    nodes += [
        {"type": "ffi.String", "data": "pragma_import_llvm"},
        {"type": "ffi.String", "data": 'module asm ".pushsection .init_array"'},
        {"type": "ffi.Map", "data": [len(nodes), len(nodes) + 1]},
    ]
    loop["data"]["annotations"] = len(nodes) - 1
    return json.dumps(graph)


@on_sqlite  # refused before the database is touched; the conflict test below rolls back on both
@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncated", "corrupt"),
        ("not gzip", "not gzip-compressed"),
        ("version 3", "format version 3; this autosched reads versions 1 to 2"),
        ("no end line", "truncated"),
        ("hostile program", "may call pure math intrinsics only, not tirx.call_extern"),
        ("loop importing LLVM IR", "may not carry the loop annotation 'pragma_import_llvm'"),
        ("trace importing LLVM IR", "may not attach the annotation 'pragma_import_llvm'"),
        ("negative sample", "line 5: measurement.samples.0: Input should be greater than or equal"),
        ("unknown device", "names a device the file lacks"),
    ],
)
def test_a_damaged_file_is_refused_in_one_line_and_nothing_is_imported(
    log: TuningLog, exported: Path, tmp_path: Path, damage: str, message: str
) -> None:
    lines = content(exported)
    bad = tmp_path / "bad.jsonl.gz"
    if damage == "truncated":
        data = exported.read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    elif damage == "not gzip":
        bad.write_text("\n".join(json.dumps(line) for line in lines))
    elif damage == "version 3":
        rewrite(exported, bad, {0: {**lines[0], "created_at": T0.isoformat(), "version": 3}})
    elif damage == "no end line":
        rewrite(exported, bad, {len(lines) - 1: None})
    elif damage == "hostile program":
        rewrite(exported, bad, {1: {**lines[1], "program": _hostile_program()}})
    elif damage == "loop importing LLVM IR":
        rewrite(exported, bad, {1: {**lines[1], "program": _program_importing_llvm_ir()}})
    elif damage == "trace importing LLVM IR":
        instructions, decisions = json.loads(lines[4]["trace"])
        planted = ["Annotate", ["l0", '"module asm \\".pushsection .init_array\\""'],
                   ["pragma_import_llvm"], []]  # fmt: skip
        trace = json.dumps([[*instructions, planted], decisions])
        rewrite(exported, bad, {4: {**lines[4], "trace": trace}})
    elif damage == "negative sample":
        rewrite(exported, bad, {4: {**lines[4], "samples": [-1.0]}})
    else:
        rewrite(exported, bad, {4: {**lines[4], "device": "0" * 64}})
    assert_refused_whole(log, bad, message)


@on_sqlite
def test_files_over_a_bound_are_refused(log: TuningLog, exported: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="over the limit of 100"):
        import_log(log, exported, Limits(file_bytes=100))
    with pytest.raises(UserError, match="line 2 is over 1000 bytes"):
        import_log(log, exported, Limits(line_bytes=1000))
    bomb = tmp_path / "bomb.jsonl.gz"
    header = content(exported)[0]
    with gzip.open(bomb, "wt") as out:
        out.write(json.dumps({**header, "created_at": T0.isoformat()}) + "\n")
        out.write(" " * (4 << 20) + "\n")
    assert bomb.stat().st_size < 10_000
    with pytest.raises(UserError, match="decompresses to over 1048576 bytes"):
        import_log(log, bomb, Limits(data_bytes=1 << 20, line_bytes=8 << 20))
    assert snapshot(log)["counts"] == dict.fromkeys(
        ("workloads", "targets", "devices", "candidates", "measurements"), 0
    )


def test_a_workload_stored_as_another_program_refuses_the_whole_file(
    log: TuningLog, exported: Path
) -> None:
    key = get_workload("matmul", SHAPE).key
    log.ensure_workload(key=key, name="matmul", params=SHAPE, tvmscript="other", flops=None)
    before = snapshot(log)
    with pytest.raises(Conflict, match="stored here as another program"):
        import_log(log, exported)
    assert snapshot(log) == before


def test_measurements_of_another_tvm_version_are_kept_and_counted(
    log: TuningLog, exported: Path, tmp_path: Path
) -> None:
    lines = content(exported)
    older = {
        number: {**line, "provenance": {**line["provenance"], "tvm": "0.20.0"}}
        for number, line in enumerate(lines)
        if line.get("type") == "measurement"
    }
    other = rewrite(exported, tmp_path / "old.jsonl.gz", older)
    summary = import_log(log, other)
    assert summary.other_tvm == 5 and summary.measurements == Tally(5, 0)
    workload = log.find_workload(get_workload("matmul", SHAPE).key)
    assert workload is not None
    (tuned,) = log.tuned_records(workload.id)
    records = log.records(workload.id, tuned.target.id)
    assert {(record.tvm_version, record.imported) for record in records} == {("0.20.0", True)}


def test_log_export_and_import_commands(cli: Cli, tmp_path: Path) -> None:
    source, merged = tmp_path / "source.db", tmp_path / "merged.db"
    with TuningLog(f"sqlite:///{source}") as log:
        fill(log, MACHINE_A, programs=range(3), base=1e-4)
    file = tmp_path / "out" / "log.jsonl.gz"
    exported = cli("log", "export", "--output", str(file), "--db", f"sqlite:///{source}")
    assert exported.code == 0, exported.err
    assert "1 workloads, 1 targets, 1 devices, 3 measurements, 1 best records" in exported.out
    first = cli("log", "import", str(file), "--db", f"sqlite:///{merged}", "--json")
    assert first.code == 0, first.err
    assert json.loads(first.out)["measurements"] == {"new": 3, "existing": 0}
    second = cli("log", "import", str(file), "--db", f"sqlite:///{merged}")
    assert "0 measurements new, 3 already there" in second.out
    listed = cli("log", "--db", f"sqlite:///{merged}", "--json")
    assert [row["trials"] for row in json.loads(listed.out)] == [3]
    file.write_bytes(b"not a log")
    refused = cli("log", "import", str(file), "--db", f"sqlite:///{merged}")
    assert refused.code == 2 and refused.err.count("\n") == 1
    assert "not gzip-compressed" in refused.err


def test_new_measurements_record_their_provenance(log: TuningLog) -> None:
    job = fill(log, MACHINE_A, programs=range(2), base=1e-4)
    with log.sessions.begin() as session:
        rows = session.execute(select(Measurement.provenance, Measurement.tvm_version)).all()
    assert {row.tvm_version for row in rows} == {tvm.__version__}
    assert all(row.provenance["job"] == job and row.provenance["llvm"] == "17" for row in rows)


def test_a_workload_keyed_otherwise_by_another_tvm_is_stored_under_this_ones_key(
    log: TuningLog, exported: Path, tmp_path: Path
) -> None:
    key = get_workload("matmul", SHAPE).key
    other_key = "f" * 32
    with gzip.open(exported, "rt") as lines:
        text = lines.read().replace(key, other_key)
    rekeyed = tmp_path / "rekeyed.jsonl.gz"
    with gzip.open(rekeyed, "wt") as out:
        out.write(text)
    summary = import_log(log, rekeyed)
    assert summary.rekeyed == 1 and summary.measurements == Tally(5, 0)
    assert log.find_workload(other_key) is None
    stored = log.find_workload(key)
    assert stored is not None and stored.source is None  # still the built-in workload
    assert log.count_records(stored.id, log.tuned_records(stored.id)[0].target.id) == 5


@pytest.fixture
def with_final(tmp_path: Path) -> tuple[Path, list]:
    """A file of a SQLite log whose best record a final timed again, and that log's summary."""
    with TuningLog(f"sqlite:///{tmp_path / 'finals.db'}") as source:
        job = fill(source, MACHINE_A, programs=range(4), base=1e-4)
        record_final(source, job, range(3))
        summary = export_log(source, tmp_path / "finals.jsonl.gz")
        rows = source.summary()
    assert summary.counts["final"] == 1
    return summary.path, rows


def test_finals_travel_with_the_records_and_are_imported_once(
    db_url: str, with_final: tuple[Path, list], cli: Cli
) -> None:
    file, (exported_row,) = with_final
    assert exported_row.retimed_secs is not None
    with TuningLog(db_url) as log:
        first = import_log(log, file)
        (row,) = log.summary()
        second = import_log(log, file)
        with log.sessions.begin() as session:
            timings = session.scalar(select(func.count()).select_from(FinalistTiming))
            jobs = session.scalars(select(TuningJob)).all()
    assert first.finals == Tally(1, 0) and second.finals == Tally(0, 1)
    assert timings == 3 and [(job.status, job.strategy, job.owner) for job in jobs] == [
        ("finished", "random", None)
    ]
    assert row.best_latency_secs == pytest.approx(exported_row.best_latency_secs)
    assert (row.retimed_secs, row.retimed_low_secs, row.retimed_high_secs) == pytest.approx(
        (exported_row.retimed_secs, exported_row.retimed_low_secs, exported_row.retimed_high_secs)
    )
    listed = cli("log", "--db", db_url, "--json")
    (shown,) = json.loads(listed.out)
    assert shown["retimed_latency_us"] == pytest.approx(exported_row.retimed_secs * 1e6)
    assert shown["retimed_interval_us"] is not None


def test_a_final_since_a_date_brings_the_measurements_of_its_finalists(
    log: TuningLog, tmp_path: Path
) -> None:
    job = fill(log, MACHINE_A, programs=range(5), base=1e-4)
    record_final(log, job, range(3))
    with log.sessions.begin() as session:
        session.execute(update(Measurement).values(finished_at=T0))
        session.execute(update(FinalistTiming).values(created_at=T0 + timedelta(days=2)))
    late = export_log(log, tmp_path / "late.jsonl.gz", Selection(since=T0 + timedelta(days=1)))
    assert late.counts["final"] == 1 and late.counts["measurement"] == 3  # its three finalists
    with TuningLog(f"sqlite:///{tmp_path / 'other.db'}") as other:
        assert import_log(other, late.path).finals == Tally(1, 0)
        (row,) = other.summary()
    assert row.retimed_secs is not None


@on_sqlite
def test_a_finals_ranks_come_from_its_samples_not_from_the_file(
    log: TuningLog, with_final: tuple[Path, list], tmp_path: Path
) -> None:
    file, (exported_row,) = with_final
    lines = content(file)
    number = next(i for i, line in enumerate(lines) if line.get("type") == "final")
    final = lines[number]
    forged = {**final, "finalists": final["finalists"][::-1]}  # the slowest claims to have won
    import_log(log, rewrite(file, tmp_path / "forged.jsonl.gz", {number: forged}))
    (row,) = log.summary()
    assert row.retimed_secs == pytest.approx(exported_row.retimed_secs)
    with log.sessions.begin() as session:
        ranked = session.execute(
            select(FinalistTiming.rank, FinalistTiming.median_secs).order_by(FinalistTiming.rank)
        ).all()
    assert [median for _, median in ranked] == sorted(median for _, median in ranked)


@on_sqlite
@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("unmeasured program", "names a program the file holds no measurement of"),
        ("a program twice", "names a program twice"),
        ("no samples", "finalists.0.samples: List should have at least 1 item"),
        ("unknown device", "final 1 names a device the file lacks"),
    ],
)
def test_a_final_naming_what_the_file_lacks_is_refused_and_nothing_is_imported(
    log: TuningLog, with_final: tuple[Path, list], tmp_path: Path, damage: str, message: str
) -> None:
    file, _ = with_final
    lines = content(file)
    number = next(i for i, line in enumerate(lines) if line.get("type") == "final")
    final = lines[number]
    entries = final["finalists"]
    if damage == "unmeasured program":
        forged = {**final, "finalists": [{**entries[0], "program_hash": "e" * 32}, *entries[1:]]}
    elif damage == "a program twice":
        forged = {**final, "finalists": [entries[0], *entries]}
    elif damage == "no samples":
        forged = {**final, "finalists": [{**entries[0], "samples": []}, *entries[1:]]}
    else:
        forged = {**final, "device": "0" * 64}
    lines[0]["created_at"] = T0.isoformat()
    bad = rewrite(file, tmp_path / "bad.jsonl.gz", {0: lines[0], number: forged})
    assert_refused_whole(log, bad, message)


@on_sqlite
def test_a_version_1_file_without_finals_is_still_read(log: TuningLog, exported: Path) -> None:
    lines = content(exported)
    header = {**lines[0], "created_at": T0.isoformat(), "version": 1}
    end = lines[-1]
    counts = {kind: count for kind, count in end["counts"].items() if kind != "final"}
    older = rewrite(
        exported,
        exported.with_name("v1.jsonl.gz"),
        {0: header, len(lines) - 1: {**end, "counts": counts}},
    )
    assert import_log(log, older).measurements == Tally(5, 0)
