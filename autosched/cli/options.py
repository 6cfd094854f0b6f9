"""Command-line options shared by the commands of `autosched`, the service's among them.

Only typer and the standard library are imported here, so that `autosched --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from autosched.log import TuningLog

WorkloadArg = Annotated[str, typer.Argument(help="A built-in workload: `autosched workloads`.")]
ParamOpt = Annotated[
    list[str] | None, typer.Option("-p", "--param", help="A workload parameter, KEY=VALUE.")
]
FileOpt = Annotated[
    Path | None,
    typer.Option(
        "--file",
        help="A PrimFunc from this TVMScript file instead: the file is Python, run on this "
        "machine (TVM's parser evaluates it); a .json file is TVM IR JSON, data only.",
    ),
]
DbOpt = Annotated[
    str | None,
    typer.Option("--db", help="SQLAlchemy URL of the tuning log [AUTOSCHED_DB; ./autosched.db]"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]
DEFAULT_SERVER = "http://127.0.0.1:8000"
ServerOpt = Annotated[
    str, typer.Option("--server", envvar="AUTOSCHED_SERVER", help="URL of the autosched server.")
]
TokenOpt = Annotated[
    str | None,
    typer.Option("--token", envvar="AUTOSCHED_TOKEN", help="A client token of the server."),
]


def open_log(db: str | None, *, must_exist: bool, read_only: bool = False) -> TuningLog:
    """The tuning log at ``db`` (or the default); with ``must_exist``, a missing SQLite file is a
    one-line error rather than a new empty log. A ``read_only`` command's log must exist and be
    up to date: nothing is created or migrated."""
    from sqlalchemy.engine import make_url

    from autosched.errors import UserError
    from autosched.log import TuningLog, default_db_url

    url = db or default_db_url()
    if must_exist or read_only:
        try:
            parsed = make_url(url)
        except Exception as error:
            raise UserError(f"not a database URL: {url!r}") from error
        path = parsed.database
        if parsed.get_backend_name() == "sqlite" and path and not Path(path).exists():
            raise UserError(f"no tuning log at {path}; run `autosched tune` first or pass --db")
    return TuningLog(url, migrate=not read_only)


UnsafeNoSandboxOpt = Annotated[
    bool,
    typer.Option(
        "--unsafe-no-sandbox",
        envvar="AUTOSCHED_UNSAFE_NO_SANDBOX",
        help="Build and run programs from others without bubblewrap's sandbox, where it is "
        "missing: they could then read this machine's files and reach its network.",
    ),
]
