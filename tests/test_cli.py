"""The `autosched` command line as a user runs it: tune, log, export in every format, bad input."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tvm
from helpers import Cli, CliResult, autosched, one_core_target
from sqlalchemy import create_engine, text
from tvm.s_tir import meta_schedule as ms

from autosched.target import host_target, to_tvm_target
from autosched.workloads import get_workload

SHAPE = ["-p", "M=64", "-p", "N=64", "-p", "K=64"]
ONE_CORE = ["--target", json.dumps(one_core_target())]
TUNED = ["matmul", *SHAPE, *ONE_CORE]  # what the tuned fixture tuned, and on which target


def _ok(result: CliResult) -> str:
    """What a command that must succeed printed; its error output when it failed."""
    assert result.code == 0, result.err
    return result.out


def run_matmul(module: tvm.runtime.Module) -> None:
    """Run a 64^3 matmul module on random inputs and check it against numpy."""
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (64, 64)).astype("float32")
    b = rng.uniform(-1, 1, (64, 64)).astype("float32")
    c = tvm.runtime.empty((64, 64), "float32", tvm.cpu())
    module["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A working directory whose default log holds a short tuning of matmul 64^3, with a final
    of three (the final itself is test_finalists.py's)."""
    work = tmp_path_factory.mktemp("tuned")
    result = autosched(
        "tune", *TUNED, "--trials", "8", "--batch", "4", "--seed", "1",
        "--finalists", "3", "--json", cwd=work,
    )  # fmt: skip
    return work, json.loads(result.stdout)


@pytest.mark.slow
def test_tune_prints_the_report_as_json(tuned: tuple[Path, dict]) -> None:
    work, report = tuned
    assert (work / "autosched.db").exists()
    assert report["workload_key"] == get_workload("matmul", {"M": 64, "N": 64, "K": 64}).key
    assert report["trials"] == 8 and report["failed"] == 0
    assert report["best_latency_us"] > 0 and report["baseline_latency_us"] > 0
    assert report["speedup"] == pytest.approx(
        report["baseline_latency_us"] / report["best_latency_us"]
    )
    assert report["gflops"] == pytest.approx(2 * 64**3 / report["best_latency_us"] / 1e3)
    assert report["target"]["kind"] == "llvm"


@pytest.mark.slow
def test_log_lists_the_tuned_workload(tuned: tuple[Path, dict], cli: Cli) -> None:
    work, report = tuned
    (row,) = json.loads(_ok(cli("log", "--json", cwd=work)))
    assert row["workload_key"] == report["workload_key"]
    assert row["trials"] == 1 + 8  # the untuned baseline and the trials
    # the best latency is what tune reported: the final's re-timed median, named apart from the
    # best record's single measurement in the search
    winner = report["finalists"][0]
    assert row["best_latency_us"] == pytest.approx(report["best_latency_us"])
    assert row["retimed_latency_us"] == pytest.approx(report["best_latency_us"])
    assert row["single_shot_latency_us"] == pytest.approx(winner["first_median_secs"] * 1e6)
    assert row["gflops"] == pytest.approx(report["gflops"])
    table = _ok(cli("log", cwd=work))
    assert "matmul" in table and "M=64" in table


@pytest.mark.slow
def test_export_tvmscript_loads_and_computes_matmul(tuned: tuple[Path, dict], cli: Cli) -> None:
    work, _ = tuned
    _ok(cli("export", *TUNED, "--format", "tvmscript", "-o", "best.py", cwd=work))
    func = tvm.script.from_source((work / "best.py").read_text())
    run_matmul(tvm.compile(func, target=to_tvm_target(host_target())).jit())


@pytest.mark.slow
def test_export_metaschedule_db_is_used_by_compile_tir(tuned: tuple[Path, dict], cli: Cli) -> None:
    work, _ = tuned
    _ok(cli("export", *TUNED, "--format", "metaschedule-db", "-o", "msdb", cwd=work))
    database = ms.database.JSONDatabase(work_dir=str(work / "msdb"))
    workload = get_workload("matmul", {"M": 64, "N": 64, "K": 64})
    target = to_tvm_target(host_target())
    sch = ms.tir_integration.compile_tir(database, workload.mod, target)
    assert sch is not None, "TVM found no record for the workload in the exported database"
    assert len(sch.trace.insts) > 0
    run_matmul(tvm.compile(sch.mod, target=target).jit())


@pytest.mark.slow
def test_export_library_runs_and_describes_its_signature(
    tuned: tuple[Path, dict], cli: Cli
) -> None:
    work, report = tuned
    _ok(cli("export", *TUNED, "--format", "library", "-o", "lib/mm.so", cwd=work))
    run_matmul(tvm.runtime.load_module(str(work / "lib" / "mm.so")))
    sidecar = json.loads((work / "lib" / "mm.json").read_text())
    assert sidecar["function"] == "main"
    assert [a["shape"] for a in sidecar["arguments"]] == [[64, 64]] * 3
    assert {a["dtype"] for a in sidecar["arguments"]} == {"float32"}
    assert sidecar["num_outputs"] == 1
    assert sidecar["runtime"] == {"device": "cpu", "num_threads": 1}  # the one-core target's
    # the best record's single measurement, and the final's re-timed median
    winner = report["finalists"][0]
    assert sidecar["single_shot_latency_us"] == pytest.approx(winner["first_median_secs"] * 1e6)
    assert sidecar["retimed_latency_us"] == pytest.approx(report["best_latency_us"])


@pytest.mark.slow
def test_run_times_the_exported_kernel_beside_numpy_as_the_tuner_times(
    tuned: tuple[Path, dict], cli: Cli
) -> None:
    work, report = tuned
    _ok(cli("export", *TUNED, "--format", "library", "-o", "run/mm.so", cwd=work))
    np.save(work / "a.npy", np.ones((64, 64), np.float32))
    result = json.loads(
        _ok(cli("run", "run/mm.so", "--input", "A=a.npy", "--time", "--compare", "numpy",
                "--rounds", "3", "--json", cwd=work))
    )  # fmt: skip
    assert result["kind"] == "kernel" and result["threads"] == result["tuned_threads"] == 1
    assert result["outputs"] == [{"name": "C", "shape": [64, 64], "dtype": "float32"}]
    assert (
        result["peer"]["name"].startswith("numpy") and result["peer"]["max_abs_difference"] < 1e-4
    )
    timing = result["timing"]
    assert timing["rounds"] == 3 and not timing["cold"]
    for entrant in (timing["artefact"], timing["peer"]):
        assert len(entrant["samples_us"]) == 3 and entrant["median_us"] > 0
        low, high = entrant["interval_us"]
        assert low <= entrant["median_us"] <= high
    assert result["tuned"]["retimed_latency_us"] == pytest.approx(report["best_latency_us"])
    table = _ok(cli("run", "run/mm.so", "--time", "--rounds", "2", cwd=work))
    assert "output C: 64x64 float32" in table and "the tuner's final" in table


@pytest.mark.slow
def test_run_refuses_bad_input_in_one_line(tuned: tuple[Path, dict], cli: Cli) -> None:
    work, _ = tuned
    _ok(cli("export", *TUNED, "--format", "library", "-o", "bad/mm.so", cwd=work))
    np.save(work / "wide.npy", np.ones((64, 65), np.float32))
    np.save(work / "doubles.npy", np.ones((64, 64), np.float64))
    for args, message in [
        (["missing.so"], "cannot read the manifest"),
        (["bad/mm.py"], "give an exported library (.so) or its manifest (.json)"),
        (["bad/mm.so", "--compare", "numpy"], "give --time too"),
        (["bad/mm.so", "--time", "--compare", "tensorflow"], "--compare takes numpy"),
        (["bad/mm.so", "--time", "--compare", "torch"], "matmul's peer is numpy (OpenBLAS)"),
        (["bad/mm.so", "--input", "X=wide.npy"], "no input 'X'; its inputs: A, B"),
        (["bad/mm.so", "--input", "A=wide.npy"], "input 'A' is 64x65 float32"),
        (["bad/mm.so", "--input", "A=doubles.npy"], "input 'A' is 64x64 float64"),
        (["bad/mm.so", "--input", "A=absent.npy"], "cannot read absent.npy"),
    ]:
        result = cli("run", *args, cwd=work)
        assert result.code == 2 and message in result.err, (args, result.err)
        assert len(result.err.strip().splitlines()) == 1, result.err


@pytest.mark.slow
def test_a_pickle_given_as_an_input_is_refused_unread(
    tuned: tuple[Path, dict], cli: Cli, tmp_path: Path
) -> None:
    work, _ = tuned
    _ok(cli("export", *TUNED, "--format", "library", "-o", "pickle/mm.so", cwd=work))
    payload = tmp_path / "ran"
    np.save(work / "evil.npy", np.array([_Payload(payload)], dtype=object), allow_pickle=True)
    result = cli("run", "pickle/mm.so", "--input", "A=evil.npy", cwd=work)
    assert result.code == 2 and "cannot read evil.npy" in result.err
    assert not payload.exists()


class _Payload:
    """An object whose unpickling writes a file: what a hostile .npy input would run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.path), "w"))


@pytest.mark.slow
def test_workloads_lists_parameters_and_defaults(cli: Cli) -> None:
    listing = {w["name"]: w for w in json.loads(_ok(cli("workloads", "--json")))}
    assert {"matmul", "batch_matmul", "conv2d_nhwc", "softmax"} <= set(listing)
    params = {p["name"]: p["default"] for p in listing["matmul"]["params"]}
    assert params["M"] == 512 and params["dtype"] == "float32"


BAD_INPUT = [
    (["tune", "no_such_workload"], "no_such_workload"),
    (["tune", "matmul", "-p", "M=-3"], "M"),
    (["tune", "matmul", "-p", "Q=3"], "Q"),
    (["tune", "matmul", "-p", "M"], "KEY=VALUE"),
    (["tune", "matmul", "--target", "tpu"], "tpu"),
    (["tune", "matmul", "--target", '{"kind": "llvm", "mcpu": "nope"}'], "nope"),
    (["tune", "matmul", "--file", "missing.py"], "missing.py"),
    (["tune", "matmul", "--file", "garbage.py"], "garbage.py"),
    (["export", "matmul", "--format", "tvmscript", "-o", "x.py"], "autosched tune"),
    (["log"], "autosched tune"),
    (["export", "--model-job", "1"], "give --server"),
    (["export", "--model-job", "1", "--server", "http://127.0.0.1:9", "-p", "M=2"], "--target"),
    (
        ["export", "--model-job", "1", "--server", "http://127.0.0.1:9", "--format", "tvmscript"],
        "a model job exports as a library",
    ),
    (["export", "softmax", "--model-job", "1", "--server", "http://127.0.0.1:9"], "model file"),
    (["export", "--model-job", "1", "--server", "http://127.0.0.1:9", "-o", "m.txt"], ".so"),
    (["tune", "matmul", "--trials", "0"], "--trials"),
    (["tune", "matmul", "--no-such-flag"], "--no-such-flag"),
    (["tune", "matmul", "--db", "nosuchdb://x"], "nosuchdb"),
]


@pytest.mark.parametrize(("args", "mentions"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    cli: Cli, tmp_path: Path, args: list[str], mentions: str
) -> None:
    (tmp_path / "garbage.py").write_text("this is not TVMScript (\n")
    result = cli(*args)
    assert result.code == 2, result.err
    message = result.err.strip()
    assert "\n" not in message and "Traceback" not in message
    assert mentions in message
    assert not (tmp_path / "autosched.db").exists()


@pytest.mark.slow
def test_export_with_an_unknown_format_or_an_untuned_workload_exits_2(
    cli: Cli, tuned: tuple[Path, dict]
) -> None:
    work, _ = tuned
    (work / "a_directory").mkdir(exist_ok=True)
    (work / "a_file").write_text("")
    for args, message in (
        (["--format", "onnx", "-o", "x"], "unknown export format"),
        (["--format", "library", "-o", "x.txt"], "ending in .so"),
        (["--format", "tvmscript", "-o", "a_file/x.py"], "cannot write a_file/x.py"),
        (["--format", "tvmscript", "-o", "a_directory"], "is a directory"),
        (["--format", "library", "-o", "a_file/x.so"], "cannot write a_file/x.so"),
        (["--format", "metaschedule-db", "-o", "a_file"], "is a file"),
        (["--format", "metaschedule-db", "-o", "a_file/db"], "cannot write a_file/db"),
    ):
        result = cli("export", *TUNED, *args, cwd=work)
        assert result.code == 2 and "\n" not in result.err.strip(), result.err
        assert message in result.err, (args, result.err)
    untuned = cli("export", "matmul", "-p", "M=32", "--format", "tvmscript", "-o", "x.py", cwd=work)
    assert untuned.code == 2 and "\n" not in untuned.err.strip(), untuned.err
    assert not (work / "x.py").exists() and not (work / "x.txt").exists()


@pytest.mark.slow
def test_ctrl_c_keeps_completed_batches_and_marks_the_job_interrupted(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "autosched",
        "tune",
        "matmul",
        *SHAPE,
        "--trials",
        "200",
        "--batch",
        "4",
        "--seed",
        "2",
    ]
    process = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    engine = create_engine(f"sqlite:///{tmp_path / 'autosched.db'}")
    try:
        deadline = time.monotonic() + 300
        measured = 0
        while measured < 1 + 4 and time.monotonic() < deadline:
            time.sleep(0.5)
            if (tmp_path / "autosched.db").exists():
                with engine.connect() as connection:
                    try:
                        measured = connection.execute(
                            text("SELECT count(*) FROM measurements")
                        ).scalar()
                    except Exception:  # the schema is still being created
                        measured = 0
        assert measured >= 5, "no batch was recorded in time"
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 130, stderr
        with engine.connect() as connection:
            status = connection.execute(text("SELECT status FROM tuning_jobs")).scalar()
            count = connection.execute(text("SELECT count(*) FROM measurements")).scalar()
            orphans = connection.execute(
                text(
                    "SELECT count(*) FROM candidates c LEFT JOIN measurements m "
                    "ON m.candidate_id = c.id WHERE m.id IS NULL"
                )
            ).scalar()
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        engine.dispose()
    assert status == "interrupted"
    assert (count - 1) % 4 == 0 and count >= 5  # whole batches only
    assert orphans == 0


@pytest.mark.slow
def test_a_users_tvmscript_file_is_tuned_and_checked_against_its_unscheduled_program(
    tmp_path: Path, cli: Cli
) -> None:
    source = get_workload("matmul", {"M": 64, "N": 64, "K": 64}).func.script()
    (tmp_path / "mm.py").write_text("from tvm.script import tirx as T\n\n" + source)
    result = autosched(
        "tune", "--file", "mm.py", *ONE_CORE, "--trials", "4", "--batch", "4", "--finalists", "0",
        "--json", cwd=tmp_path,
    )  # fmt: skip
    report = json.loads(result.stdout)
    assert report["workload"] == "mm" and report["trials"] == 4
    assert report["best_latency_us"] < report["baseline_latency_us"]
    assert report["gflops"] is None  # a user's program has no known FLOP count
    _ok(cli("export", "--file", "mm.py", *ONE_CORE, "--format", "tvmscript", "-o", "best.py"))
    func = tvm.script.from_source((tmp_path / "best.py").read_text())
    run_matmul(tvm.compile(func, target=to_tvm_target(host_target())).jit())


@pytest.mark.slow
def test_tune_and_log_through_a_database_url(db_url: str, tmp_path: Path, cli: Cli) -> None:
    tmp_path = tmp_path / "cwd"
    tmp_path.mkdir()
    result = autosched(
        "tune",
        "softmax",
        "-p",
        "rows=16",
        "-p",
        "cols=64",
        "--trials",
        "3",
        "--batch",
        "3",
        "--finalists",
        "0",
        "--db",
        db_url,
        "--json",
        cwd=tmp_path,
    )
    report = json.loads(result.stdout)
    (row,) = json.loads(_ok(cli("log", "--db", db_url, "--json", cwd=tmp_path)))
    assert row["workload"] == "softmax" and row["trials"] == 1 + report["trials"]
    assert row["best_latency_us"] == pytest.approx(report["best_latency_us"])
    assert not (tmp_path / "autosched.db").exists()


@pytest.mark.slow
def test_the_report_names_the_untuned_program_among_the_finalists(tmp_path: Path, cli: Cli) -> None:
    result = cli(
        "tune", "softmax", "-p", "rows=16", "-p", "cols=64", "--trials", "3", "--batch", "3",
        "--finalists", "2", "--db", f"sqlite:///{tmp_path / 'log.db'}",
    )  # fmt: skip
    assert result.code == 0, result.err
    table = result.out[result.out.index("finalists timed again") :]
    ranks = [line for line in table.splitlines() if re.match(r"│ \d", line)]  # not wrapped
    assert len(ranks) == 3  # the two fastest tuned candidates and the untuned program
    assert sum("untuned" in line for line in ranks) == 1
    # the report ends with the commands to export it and run it; they run as printed
    last = result.out.strip().splitlines()[-1]
    db = f"sqlite:///{tmp_path / 'log.db'}"
    export = f"autosched export softmax -p rows=16 -p cols=64 --db {db} --format library"
    assert last == f"next: {export} -o softmax.so && autosched run softmax.so --time"
    for command in last.removeprefix("next: ").split(" && "):
        _ok(cli(*shlex.split(command)[1:], cwd=tmp_path))


def test_read_only_commands_create_nothing_and_no_command_takes_a_foreign_database(
    cli: Cli, tmp_path: Path
) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    foreign = tmp_path / "shop.db"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    for args, message in [
        (["log", "--db", f"sqlite:///{empty}"], "holds no tuning log yet"),
        (["model", "list", "--db", f"sqlite:///{empty}"], "holds no tuning log yet"),
        (["log", "--db", f"sqlite:///{foreign}"], "not a tuning log's (customers)"),
        (["tune", "matmul", *SHAPE, "--db", f"sqlite:///{foreign}"], "not a tuning log's"),
    ]:
        result = cli(*args)
        assert result.code == 2 and message in result.err, (args, result.err)
        assert len(result.err.strip().splitlines()) == 1
    assert empty.stat().st_size == 0  # not even a SQLite header: read-only commands write nothing
    with sqlite3.connect(empty) as connection:
        assert connection.execute("SELECT name FROM sqlite_master").fetchall() == []
    with sqlite3.connect(foreign) as connection:
        tables = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        assert [name for (name,) in tables] == ["customers"]
