"""The tuning log's database: its URL, the SQLAlchemy engine for it, and its schema migrations.

SQLite connections get WAL, foreign keys and a busy timeout, and take the write lock when a
transaction begins; a read-only engine opens the file read-only (URI ``mode=ro``), so that it
writes nothing, not even the header of an empty file. PostgreSQL goes through psycopg 3.
Opening a log migrates it to the newest schema with Alembic, one process at a time.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import URL, Engine, create_engine, event, inspect, make_url, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, ExceptionContext
from sqlalchemy.exc import ArgumentError, InterfaceError, OperationalError

from autosched.errors import DatabaseUnavailable, UserError

_SQLITE_BUSY_TIMEOUT_MS = 30_000
# Alembic keeps the running migration's context in module globals: one migration per process.
# Checking a schema takes it too: the first connections to a fresh SQLite file switch it to WAL,
# which two at once cannot.
_MIGRATION_LOCK = threading.RLock()
# Any constant works; it only has to be the same for every process that migrates a log.
_PG_MIGRATION_LOCK = 0x6175746F73636864
# The table holding the log's schema revision. Alembic's default, ``alembic_version``, belongs to
# Optuna's RDB storage, whose studies live in the same database; logs written before the rename
# are moved over when opened.
VERSION_TABLE = "autosched_version"
_LEGACY_VERSION_TABLE = "alembic_version"
_LEGACY_REVISIONS = ("0001", "0002")

Insert = Callable[[Any], Any]
"""A dialect's INSERT construct, which offers ``on_conflict_do_nothing``/``_update``."""

INSERTS: dict[str, Insert] = {
    "postgresql": postgresql.insert,
    "sqlite": sqlite.insert,
}


def default_db_url() -> str:
    """The tuning log's URL: ``$AUTOSCHED_DB``, else ``autosched.db`` in the working directory."""
    return os.environ.get("AUTOSCHED_DB") or "sqlite:///autosched.db"


def create_log_engine(url: str, *, read_only: bool = False) -> Engine:
    """Create the engine for ``url``; SQLite connections get WAL, foreign keys, a busy timeout
    (``read_only``: the file opened read-only, its journal mode left as it is).

    Raises:
        UserError: a malformed URL, or a backend other than SQLite and PostgreSQL.
    """
    try:
        parsed = make_url(url)
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        if parsed.get_backend_name() not in INSERTS:
            raise UserError(
                f"unsupported tuning log database {parsed.get_backend_name()!r} in {display(url)};"
                " use sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
            )
        if read_only and parsed.get_backend_name() == "sqlite" and parsed.database:
            parsed = _read_only_sqlite(parsed)
        engine = create_engine(parsed, pool_pre_ping=True)
    except ArgumentError as exc:  # also raised for an unknown driver (NoSuchModuleError)
        raise UserError(f"bad tuning log URL {display(url)}: {one_line(str(exc))}") from exc
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _configure_read_only if read_only else _configure_sqlite)
        event.listen(engine, "begin", _begin_immediate)
    event.listen(engine, "handle_error", _unavailable)
    return engine


def _unavailable(context: ExceptionContext) -> DatabaseUnavailable | None:
    """A lost or refused connection becomes DatabaseUnavailable, which callers wait out; any other
    database error stays what it is."""
    error = context.sqlalchemy_exception
    lost = context.is_disconnect or (
        context.dialect is not None
        and context.dialect.name == "postgresql"
        and isinstance(error, OperationalError | InterfaceError)
    )
    if not lost:
        return None
    reason = one_line(str(getattr(error, "orig", None) or context.original_exception))
    return DatabaseUnavailable(f"the tuning log's database is unavailable: {reason}")


def _read_only_sqlite(url: URL) -> URL:
    """``url`` opening its file read-only: SQLite's URI filename ``file:PATH?mode=ro``."""
    path = url.database or ""
    if path.startswith("file:") or path == ":memory:":
        return url
    return url.set(database=f"file:{quote(path)}", query={**url.query, "mode": "ro", "uri": "true"})


def _configure_read_only(dbapi_connection: Any, _record: object) -> None:
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()


def _configure_sqlite(dbapi_connection: Any, _record: object) -> None:
    # SQLAlchemy's documented recipe: the sqlite3 module must not issue BEGIN on its own (lazily,
    # DEFERRED, not before DDL); the "begin" event below does it instead.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def _begin_immediate(connection: Connection) -> None:
    # IMMEDIATE takes the write lock up front, so a transaction that reads and then writes never
    # fails with SQLITE_BUSY half-way; with WAL, readers in other connections are not blocked.
    connection.exec_driver_sql("BEGIN IMMEDIATE")


# Tables another tool may keep in the log's database: Optuna's RDB storage (TPE's studies).
_OPTUNA_TABLES = frozenset({"studies", "trials", "version_info", _LEGACY_VERSION_TABLE})
_OPTUNA_PREFIXES = ("study_", "trial_")


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", "autosched.log:migrations")
    return config


def check_schema(engine: Engine, *, migrate: bool) -> None:
    """Refuse a database holding tables that are neither autosched's nor Optuna's; then bring an
    autosched log up to date (``migrate``), or only check that it is (a read-only command).

    Raises:
        UserError: foreign tables; without ``migrate``, no tuning log or one of another schema.
    """
    from autosched.log.tables import Base

    with _MIGRATION_LOCK:
        with engine.connect() as connection:
            tables = set(inspect(connection).get_table_names())
            ours = {*Base.metadata.tables, VERSION_TABLE}
            foreign = sorted(
                name
                for name in tables - ours - _OPTUNA_TABLES
                if not name.startswith(_OPTUNA_PREFIXES)
            )
            if foreign:
                named = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
                raise UserError(
                    f"the database holds tables that are not a tuning log's ({named}); "
                    "give a database of its own"
                )
            if not migrate:
                revision = None
                if VERSION_TABLE in tables:
                    revision = connection.execute(
                        text(f"SELECT version_num FROM {VERSION_TABLE}")
                    ).scalar()
                head = _head_revision()
                if revision is None:
                    raise UserError(
                        "the database holds no tuning log yet; run autosched tune first"
                    )
                if revision != head:
                    raise UserError(
                        f"the tuning log has schema {revision}, this autosched reads {head}; a "
                        "command that writes (autosched tune, serve) upgrades it"
                    )
                return
        upgrade_schema(engine)


def upgrade_schema(engine: Engine) -> None:
    """Bring the log to the head schema, in one transaction: a database without a tuning log gets
    the head schema at once (the models' tables, as the migrations would leave them, which
    ``tests/test_log.py`` checks), an existing log runs the Alembic migrations it lacks."""
    _upgrade(engine, create_fresh=True)


def run_migrations(engine: Engine) -> None:
    """Run the Alembic migrations up to head, in one transaction, a fresh database included."""
    _upgrade(engine, create_fresh=False)


def _upgrade(engine: Engine, *, create_fresh: bool) -> None:
    config = _config()
    with _MIGRATION_LOCK, engine.connect() as connection:
        sqlite_connection = (
            connection.connection.driver_connection if engine.dialect.name == "sqlite" else None
        )
        if sqlite_connection is not None:
            # SQLite alters a table by copying it; foreign keys must be off while it does, and
            # only outside a transaction can they be turned off (SQLite's ALTER TABLE recipe).
            sqlite_connection.execute("PRAGMA foreign_keys = OFF")
        try:
            with connection.begin():
                if connection.dialect.name == "postgresql":
                    # Processes opening a fresh database at once would both create the tables.
                    connection.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
                    )
                if create_fresh and _holds_no_log(connection):
                    _create_head_schema(connection)
                    return
                _adopt_legacy_version_table(connection)
                config.attributes["connection"] = connection
                config.attributes["version_table"] = VERSION_TABLE
                command.upgrade(config, "head")
                if sqlite_connection is not None:
                    violations = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                    if violations:
                        raise CommandError(f"foreign keys broken by the migration: {violations}")
        finally:
            if sqlite_connection is not None:
                sqlite_connection.execute("PRAGMA foreign_keys = ON")


def _holds_no_log(connection: Connection) -> bool:
    """Whether the database holds none of a tuning log's tables, of any schema version."""
    from autosched.log.tables import Base

    return not {*Base.metadata.tables, VERSION_TABLE} & set(inspect(connection).get_table_names())


def _create_head_schema(connection: Connection) -> None:
    """Create the head schema's tables and record the head revision, as Alembic would."""
    from autosched.log.tables import Base

    Base.metadata.create_all(connection)
    _record_revision(connection, _head_revision())


def _head_revision() -> str:
    """The revision the migrations end at: the schema of this autosched."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None, "the migrations have no head"
    return head


def _record_revision(connection: Connection, revision: str) -> None:
    """Create VERSION_TABLE as Alembic does and record ``revision`` in it."""
    connection.execute(
        text(
            f"CREATE TABLE {VERSION_TABLE} (version_num VARCHAR(32) NOT NULL, "
            f"CONSTRAINT {VERSION_TABLE}_pkc PRIMARY KEY (version_num))"
        )
    )
    connection.execute(
        text(f"INSERT INTO {VERSION_TABLE} (version_num) VALUES (:revision)"),
        {"revision": revision},
    )


def _adopt_legacy_version_table(connection: Connection) -> None:
    """Move a log's revision out of ``alembic_version`` (where logs kept it before Optuna's studies
    joined them) into VERSION_TABLE."""
    tables = set(inspect(connection).get_table_names())
    if _LEGACY_VERSION_TABLE not in tables or VERSION_TABLE in tables:
        return
    legacy = text(f"SELECT version_num FROM {_LEGACY_VERSION_TABLE}")
    revisions = [row[0] for row in connection.execute(legacy)]
    if len(revisions) != 1 or revisions[0] not in _LEGACY_REVISIONS:
        return  # Optuna's own revision: not ours to move
    _record_revision(connection, revisions[0])
    connection.execute(text(f"DROP TABLE {_LEGACY_VERSION_TABLE}"))


def display(url: str) -> str:
    """The URL with any password masked, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return repr(url)


def one_line(message: str) -> str:
    return " ".join(message.split()) or "unknown error"
