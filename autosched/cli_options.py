"""Command-line options shared by the commands of `autosched` (``cli`` and ``service_cli``).

Only typer and the standard library are imported here, so that `autosched --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

WorkloadArg = Annotated[str, typer.Argument(help="A built-in workload: `autosched workloads`.")]
ParamOpt = Annotated[
    list[str] | None, typer.Option("-p", "--param", help="A workload parameter, KEY=VALUE.")
]
FileOpt = Annotated[
    Path | None, typer.Option("--file", help="Tune a PrimFunc from this TVMScript file instead.")
]
DbOpt = Annotated[
    str | None,
    typer.Option("--db", help="SQLAlchemy URL of the tuning log [AUTOSCHED_DB; ./autosched.db]"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]
