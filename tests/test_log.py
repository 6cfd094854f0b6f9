"""Tests of the tuning log: migrations, idempotent inserts, atomic batches and best records.

Every test that takes ``db_url`` runs once on SQLite and once on PostgreSQL.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import optuna
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from helpers import run_at_once, start_job, start_like_autosched
from sqlalchemy import Engine, create_engine, inspect, make_url, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import NullPool

from autosched.errors import Conflict, UserError
from autosched.log import TuningLog, default_db_url
from autosched.log.db import VERSION_TABLE, run_migrations, upgrade_schema
from autosched.log.jobs import JobStore
from autosched.log.tables import Base
from autosched.records import CandidateResult, ErrorKind, JobStatus, MeasureResult

TABLES = {
    "workloads",
    "targets",
    "devices",
    "tuning_jobs",
    "candidates",
    "measurements",
    "best_records",
    "finalist_timings",
    "finals",
    "tuned_models",
    "tuned_model_tasks",
    "model_jobs",
    "model_job_tasks",
    "model_job_rounds",
    "workers",
    "leases",
    "api_tokens",
    "cost_models",
    "candidate_features",
}


@dataclass(frozen=True)
class Job:
    id: int
    workload_id: int
    target_id: int


@contextmanager
def _engine(db_url: str) -> Iterator[Engine]:
    """An engine on the test's database that pools no connection, disposed of on leaving."""
    engine = create_engine(db_url, poolclass=NullPool)
    try:
        yield engine
    finally:
        engine.dispose()


def _programs(log: TuningLog, workload_id: int, target_id: int) -> set[str]:
    return {record.program_hash for record in log.records(workload_id, target_id)}


def matmul_job(log: TuningLog, workload_key: str = "w1", target_key: str = "llvm") -> Job:
    workload = log.ensure_workload(
        key=workload_key, name="matmul", params={"n": 64}, tvmscript="# tir", flops=2.0e6
    )
    target = log.ensure_target(key=target_key, kind="llvm", target_json={"kind": "llvm"})
    job_id = start_job(log, workload.id, target.id, 16, batch_size=4)
    return Job(job_id, workload.id, target.id)


@pytest.fixture
def job(log: TuningLog) -> Job:
    return matmul_job(log)


def timed(
    program_hash: str, *samples: float, verified: bool = True, device_id: int | None = None
) -> CandidateResult:
    return CandidateResult(
        trace_json=f"trace {program_hash}",
        program_hash=program_hash,
        result=MeasureResult(samples=samples, build_secs=0.5),
        predicted_score=0.25,
        verified=verified,
        device_id=device_id,
    )


def failed(
    program_hash: str, kind: ErrorKind, *samples: float, verified: bool = False
) -> CandidateResult:
    result = MeasureResult(samples=samples, error_kind=kind, error_msg=f"{kind.value} went wrong")
    return CandidateResult(f"trace {program_hash}", program_hash, result, verified=verified)


def test_migrations_create_every_table_and_reopening_changes_nothing(db_url: str) -> None:
    with TuningLog(db_url) as log:
        workload = log.ensure_workload(key="w", name="n", params={}, tvmscript="", flops=None)
    with _engine(db_url) as engine:
        assert set(inspect(engine).get_table_names()) == TABLES | {VERSION_TABLE}
        with TuningLog(db_url) as log:
            assert log.find_workload("w") == workload
        with engine.connect() as connection:
            versions = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).all()
        assert versions == [(_head_revision(),)]


def test_migrations_match_the_models(db_url: str) -> None:
    with _engine(db_url) as engine:
        run_migrations(engine)
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "version_table": VERSION_TABLE}
            )
            assert compare_metadata(context, Base.metadata) == []


def test_a_fresh_log_gets_the_schema_the_migrations_build(db_url: str) -> None:
    with _engine(db_url) as engine:
        run_migrations(engine)
        migrated = _schema(engine)
        with engine.begin() as connection:
            Base.metadata.drop_all(connection)
            connection.execute(text(f"DROP TABLE {VERSION_TABLE}"))
        assert inspect(engine).get_table_names() == []
        upgrade_schema(engine)  # a database without a log: the head schema at once
        assert _schema(engine) == migrated
        upgrade_schema(engine)  # and it is a log at head, which the migrations leave alone
        assert _schema(engine) == migrated


def _schema(engine: Engine) -> dict[str, object]:
    """Every table's columns, keys, indexes and constraints, and the revision, as comparable
    values."""
    inspector = inspect(engine)
    schema: dict[str, object] = {}
    for table in inspector.get_table_names():
        schema[table] = {
            "columns": sorted(
                (c["name"], str(c["type"]), c["nullable"], str(c["default"]))
                for c in inspector.get_columns(table)
            ),
            "primary key": inspector.get_pk_constraint(table)["constrained_columns"],
            "foreign keys": sorted(
                (
                    fk["name"] or "",
                    tuple(fk["constrained_columns"]),
                    fk["referred_table"],
                    tuple(fk["referred_columns"]),
                    sorted((k, str(v)) for k, v in fk["options"].items()),
                )
                for fk in inspector.get_foreign_keys(table)
            ),
            "indexes": sorted(
                (
                    ix["name"] or "",
                    tuple(str(column) for column in ix["column_names"]),
                    ix["unique"],
                    sorted((k, str(v)) for k, v in ix.get("dialect_options", {}).items()),
                )
                for ix in inspector.get_indexes(table)
            ),
            "unique": sorted(
                (uc["name"] or "", tuple(uc["column_names"]))
                for uc in inspector.get_unique_constraints(table)
            ),
            "checks": sorted(
                (ck["name"] or "", ck["sqltext"]) for ck in inspector.get_check_constraints(table)
            ),
        }
    with engine.connect() as connection:
        schema["revision"] = connection.execute(text(f"SELECT * FROM {VERSION_TABLE}")).all()
    return schema


def _head_revision() -> str | None:
    config = Config()
    config.set_main_option("script_location", "autosched.log:migrations")
    return ScriptDirectory.from_config(config).get_current_head()


def test_upgrading_a_log_of_the_first_schema_keeps_its_records(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    config = Config()
    config.set_main_option("script_location", "autosched.log:migrations")
    with engine.begin() as connection:
        connection.exec_driver_sql("PRAGMA foreign_keys = ON")
        config.attributes["connection"] = connection
        config.attributes["version_table"] = "alembic_version"  # where logs kept it then
        command.upgrade(config, "0001")
        now = "2026-11-30 00:00:00"
        for statement in (
            f"INSERT INTO workloads VALUES (1, 'w', 'matmul', '{{}}', 'x', 1.0, '{now}')",
            f"INSERT INTO targets VALUES (1, 't', 'llvm', '{{}}', '{now}')",
            "INSERT INTO tuning_jobs VALUES "
            f"(1, 1, 1, 8, 4, 'evolutionary', 0, 'finished', '{now}', '{now}', '{now}')",
            f"INSERT INTO candidates VALUES (1, 1, 1, 1, '[[],[]]', 'h', NULL, '{now}')",
            "INSERT INTO measurements VALUES "
            f"(1, 1, NULL, '[0.5]', 0.5, NULL, NULL, 1, 0.1, '{now}', '{now}')",
        ):
            connection.exec_driver_sql(statement)
    engine.dispose()
    with TuningLog(url) as log:
        (record,) = log.records(1, 1)
        assert record.median_secs == 0.5 and record.program_hash == "h"
        assert JobStore(log).job(1).status is JobStatus.FINISHED
    engine = create_engine(url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT state FROM candidates")).scalar() == "measured"
        assert "alembic_version" not in inspect(connection).get_table_names()
    engine.dispose()


def test_optuna_studies_share_the_database_in_either_order(db_url: str) -> None:
    storage = optuna.storages.RDBStorage(db_url)
    study = optuna.create_study(study_name="before", storage=storage)
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    storage.engine.dispose()
    with TuningLog(db_url) as log:
        log.ensure_target(key="t", kind="llvm", target_json={})
    storage = optuna.storages.RDBStorage(db_url)
    optuna.create_study(study_name="after", storage=storage)
    assert len(optuna.load_study(study_name="before", storage=storage).trials) == 2
    storage.engine.dispose()
    with TuningLog(db_url) as log:
        assert log.find_target("t") is not None


def open_and_ensure_target(url: str) -> int:
    with TuningLog(url) as log:
        return log.ensure_target(key="llvm", kind="llvm", target_json={}).id


def test_logs_opened_at_once_by_threads_on_a_fresh_database_all_work(db_url: str) -> None:
    assert len(set(run_at_once(4, lambda: open_and_ensure_target(db_url)))) == 1


def test_different_logs_opened_at_once_by_threads_all_work(tmp_path: Path) -> None:
    urls = iter([f"sqlite:///{tmp_path / f'log{index}.db'}" for index in range(8)])
    assert run_at_once(8, lambda: open_and_ensure_target(next(urls))) == [1] * 8


@pytest.mark.slow
def test_logs_opened_at_once_by_processes_on_a_fresh_database_all_work(db_url: str) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(3)
    with ProcessPoolExecutor(
        3, context, initializer=start_like_autosched, initargs=(barrier,)
    ) as pool:
        ids = list(pool.map(open_and_ensure_target, [db_url] * 3))
    assert len(set(ids)) == 1


def test_ensure_workload_returns_the_stored_row_and_refuses_another_program(
    log: TuningLog,
) -> None:
    first = log.ensure_workload(
        key="w1", name="matmul", params={"n": 64, "dtype": "float32"}, tvmscript="# a", flops=1.5
    )
    again = log.ensure_workload(key="w1", name="other", params={}, tvmscript="# a", flops=None)
    assert again == first
    with pytest.raises(Conflict, match="stored as another program"):
        log.ensure_workload(key="w1", name="matmul", params={}, tvmscript="# b", flops=None)
    assert first.params == {"n": 64, "dtype": "float32"}
    assert log.find_workload("w1") == first
    assert log.find_workload("w2") is None
    assert log.ensure_workload(key="w2", name="c", params={}, tvmscript="", flops=None).id != (
        first.id
    )


def test_ensure_target_returns_the_stored_row(log: TuningLog) -> None:
    first = log.ensure_target(key="llvm -mcpu=x", kind="llvm", target_json={"mcpu": "x"})
    assert log.ensure_target(key="llvm -mcpu=x", kind="cuda", target_json={}) == first
    assert log.find_target("llvm -mcpu=x") == first
    assert first.target_json == {"mcpu": "x"}
    assert log.find_target("cuda") is None


def test_ensure_device_keys_on_the_canonical_fingerprint(log: TuningLog) -> None:
    device = log.ensure_device({"cpu": "xeon", "cores": 16})
    assert log.ensure_device({"cores": 16, "cpu": "xeon"}) == device
    assert log.ensure_device({"cpu": "epyc", "cores": 16}) != device


def test_concurrent_ensure_workload_inserts_one_row(log: TuningLog) -> None:
    def ensure() -> int:
        return log.ensure_workload(key="w", name="n", params={}, tvmscript="", flops=None).id

    assert len(set(run_at_once(8, ensure))) == 1


def test_record_batch_stores_samples_medians_and_errors(log: TuningLog, job: Job) -> None:
    device = log.ensure_device({"cpu": "xeon"})
    finished = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    slow = CandidateResult(
        trace_json="trace a",
        program_hash="a",
        result=MeasureResult(
            samples=(3.0, 1.0, 2.0),
            build_secs=0.5,
            started_at=finished - timedelta(seconds=9),
            finished_at=finished,
        ),
        predicted_score=0.75,
        verified=True,
        device_id=device,
    )
    stored = log.record_batch(job.id, [slow, failed("b", ErrorKind.RUN_TIMEOUT)])

    assert stored == 2
    a, b = log.records(job.workload_id, job.target_id)
    assert (a.program_hash, a.trace_json, a.samples) == ("a", "trace a", (3.0, 1.0, 2.0))
    assert a.median_secs == 2.0
    assert (a.error_kind, a.error_msg, a.verified, a.job_id) == (None, None, True, job.id)
    assert a.measured_at == finished
    assert a.measured_at.utcoffset() == timedelta(0)
    assert (b.program_hash, b.median_secs, b.samples) == ("b", None, ())
    assert (b.error_kind, b.error_msg) == (ErrorKind.RUN_TIMEOUT, "run_timeout went wrong")
    assert _programs(log, job.workload_id, job.target_id) == {"a", "b"}
    assert _programs(log, job.workload_id, job.target_id + 1) == set()


def test_best_comes_only_from_verified_error_free_results(log: TuningLog, job: Job) -> None:
    log.record_batch(
        job.id,
        [
            timed("unverified", 0.1, verified=False),
            failed("incorrect", ErrorKind.INCORRECT, 0.1),
            failed("incorrect but verified", ErrorKind.INCORRECT, 0.1, verified=True),
            timed("slow", 3.0),
            timed("medium", 2.0),
        ],
    )
    best = log.best(job.workload_id, job.target_id)
    assert best is not None
    assert (best.program_hash, best.median_secs, best.verified) == ("medium", 2.0, True)

    log.record_batch(
        job.id, [timed("faster unverified", 0.5, verified=False), timed("slower", 2.5)]
    )
    assert log.best(job.workload_id, job.target_id) == best

    log.record_batch(job.id, [timed("fastest", 1.0), timed("tie", 1.0)])
    best = log.best(job.workload_id, job.target_id)
    assert best is not None
    assert (best.program_hash, best.median_secs) == ("fastest", 1.0)


def test_no_best_without_a_verified_result(log: TuningLog, job: Job) -> None:
    log.record_batch(job.id, [timed("a", 0.1, verified=False), failed("b", ErrorKind.BUILD)])
    assert log.best(job.workload_id, job.target_id) is None


def test_recording_the_same_batch_twice_changes_nothing(log: TuningLog, job: Job) -> None:
    batch = [timed("a", 2.0), timed("b", 1.0), failed("c", ErrorKind.CRASH), timed("a", 0.5)]
    assert log.record_batch(job.id, batch) == 3

    def state() -> tuple:
        return log.records(job.workload_id, job.target_id), log.summary(), JobStore(log).job(job.id)

    before = state()

    assert log.record_batch(job.id, batch) == 0
    other_job = start_job(log, job.workload_id, job.target_id, 4, seed=None)
    assert log.record_batch(other_job, batch) == 0

    assert state() == before
    assert before[1][0].trials == 3
    assert before[1][0].best_latency_secs == 1.0


def test_the_same_batch_recorded_at_once_is_stored_once(log: TuningLog, job: Job) -> None:
    batch = [timed(f"p{index}", 1.0 + index) for index in range(20)]
    assert sum(run_at_once(4, lambda: log.record_batch(job.id, batch))) == 20
    assert len(log.records(job.workload_id, job.target_id)) == 20


def unordered_samples() -> CandidateResult:
    return CandidateResult("trace", "bad", MeasureResult(samples=(1.0, "x")), verified=True)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (lambda: timed("bad", 0.2, device_id=10**6), IntegrityError),
        (lambda: timed("bad", -1.0), IntegrityError),
        (unordered_samples, TypeError),
    ],
    ids=["unknown device", "negative timing", "raises while reading"],
)
def test_a_batch_that_fails_midway_leaves_nothing(
    log: TuningLog, job: Job, bad: Callable[[], CandidateResult], error: type[Exception]
) -> None:
    log.record_batch(job.id, [timed("old", 5.0)])
    before = (log.records(job.workload_id, job.target_id), log.best(job.workload_id, job.target_id))

    with pytest.raises(error):
        log.record_batch(job.id, [timed("new", 0.1), bad(), timed("after", 0.3)])

    after = (log.records(job.workload_id, job.target_id), log.best(job.workload_id, job.target_id))
    assert after == before
    assert _programs(log, job.workload_id, job.target_id) == {"old"}
    assert JobStore(log).job(job.id).trials_done == 1
    assert log.record_batch(job.id, [timed("new", 0.1)]) == 1


def test_summary_counts_trials_and_failures_per_workload_and_target(log: TuningLog) -> None:
    job_a = matmul_job(log, "wa", "llvm")
    job_b = matmul_job(log, "wb", "cuda")
    matmul_job(log, "wc", "llvm")  # no candidates: not in the summary
    log.record_batch(job_a.id, [timed("1", 2.0), timed("2", 1.0), failed("3", ErrorKind.BUILD)])
    log.record_batch(job_b.id, [failed("1", ErrorKind.RUN), timed("2", 0.5, verified=False)])

    rows = log.summary()

    assert [(row.workload_key, row.target_key) for row in rows] == [("wa", "llvm"), ("wb", "cuda")]
    assert [(row.best_latency_secs, row.trials, row.failed) for row in rows] == [
        (1.0, 3, 1),
        (None, 2, 1),
    ]
    assert rows[0].workload_name == "matmul"
    assert rows[0].workload_params == {"n": 64}
    assert rows[0].target_json == {"kind": "llvm"}
    assert rows[0].flops == 2.0e6


def test_records_ok_only_lists_error_free_timings_fastest_first(log: TuningLog, job: Job) -> None:
    log.record_batch(
        job.id,
        [
            timed("c", 3.0),
            failed("x", ErrorKind.BUILD),
            timed("a", 1.0, verified=False),
            timed("b", 2.0),
        ],
    )

    every = log.records(job.workload_id, job.target_id)
    fastest = log.records(job.workload_id, job.target_id, ok_only=True)

    assert [record.program_hash for record in every] == ["c", "x", "a", "b"]
    assert [record.program_hash for record in fastest] == ["a", "b", "c"]
    limited = log.records(job.workload_id, job.target_id, ok_only=True, limit=2)
    assert limited == fastest[:2]
    page = log.records(job.workload_id, job.target_id, limit=2, offset=1)
    assert [record.program_hash for record in page] == ["x", "a"]
    assert log.count_records(job.workload_id, job.target_id) == 4


def test_job_reports_status_times_and_counts(log: TuningLog, job: Job) -> None:
    running = JobStore(log).job(job.id)
    assert (running.status, running.trials, running.batch_size) == (JobStatus.RUNNING, 16, 4)
    assert (running.strategy, running.seed, running.finished_at) == ("random", 0, None)
    assert running.started_at is not None
    assert running.started_at.utcoffset() == timedelta(0)

    log.record_batch(job.id, [timed("a", 1.0), failed("b", ErrorKind.CRASH)])
    JobStore(log).end_job(job.id, JobStatus.INTERRUPTED)

    ended = JobStore(log).job(job.id)
    assert (ended.status, ended.trials_done, ended.failed) == (JobStatus.INTERRUPTED, 2, 1)
    assert ended.finished_at is not None
    assert ended.finished_at >= running.started_at


def test_unknown_jobs_and_running_as_an_end_status_are_refused(log: TuningLog, job: Job) -> None:
    with pytest.raises(UserError, match="no tuning job"):
        JobStore(log).job(job.id + 1)
    with pytest.raises(UserError, match="no tuning job"):
        JobStore(log).end_job(job.id + 1, JobStatus.FINISHED)
    with pytest.raises(UserError, match="no tuning job"):
        log.record_batch(job.id + 1, [timed("a", 1.0)])
    with pytest.raises(ValueError, match="RUNNING"):
        JobStore(log).end_job(job.id, JobStatus.RUNNING)


def test_default_db_url_honours_autosched_db(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOSCHED_DB", db_url)
    assert default_db_url() == db_url
    with TuningLog() as log:
        assert log.url == db_url
        log.ensure_device({"cpu": "xeon"})

    monkeypatch.delenv("AUTOSCHED_DB")
    assert default_db_url() == "sqlite:///autosched.db"


def test_default_log_is_a_sqlite_file_in_the_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AUTOSCHED_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    TuningLog().close()
    with sqlite3.connect(tmp_path / "autosched.db") as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_an_unreachable_database_raises_user_error(db_url: str, tmp_path: Path) -> None:
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        missing = url.set(database=str(tmp_path / "no such dir" / "log.db"))
    else:
        missing = url.set(database=f"{url.database}_missing")

    with pytest.raises(UserError, match="cannot open tuning log") as caught:
        TuningLog(missing.render_as_string(hide_password=False))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "nosuchdialect://host/db",
        "mysql://root@127.0.0.1/db",
        "postgresql+psycopg://root:s3cret@127.0.0.1:1/db",
    ],
)
def test_a_bad_url_raises_a_one_line_user_error(url: str) -> None:
    with pytest.raises(UserError) as caught:
        TuningLog(url)
    message = str(caught.value)
    assert "\n" not in message
    assert "Traceback" not in message
    assert "s3cret" not in message
