"""The package's shape: imports point down, the client and the worker stay light, and the installed
package list is the tree's."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "autosched"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _importers(folder: Path, prefixes: tuple[str, ...]) -> list[str]:
    """Modules under ``folder`` that import a module starting with one of ``prefixes``."""
    return sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in folder.rglob("*.py")
        for name in _imports(path)
        if name.startswith(prefixes)
    )


def test_the_library_never_imports_the_service_built_on_it() -> None:
    service = ("autosched.server", "autosched.workers", "server", "workers")
    assert _importers(LIBRARY, service) == []


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("measure", ("autosched.log", "sqlalchemy", "autosched.search", "autosched.tuner")),
        ("search", ("autosched.log", "sqlalchemy", "autosched.tuner")),
        ("costmodel", ("autosched.search", "autosched.tuner")),
        ("log", ("autosched.search", "autosched.measure", "autosched.tuner", "autosched.protocol")),
        ("protocol", ("autosched.log", "sqlalchemy", "fastapi", "tvm", "autosched.tuner")),
    ],
)
def test_layers_import_only_what_lies_below_them(folder: str, forbidden: tuple[str, ...]) -> None:
    # costmodel may read the log (the shared models are trained from it), not the search
    # the wire protocol loads in clients and workers: no SQL, TVM or FastAPI
    assert _importers(LIBRARY / folder, forbidden) == []


def _loaded_after(module: str) -> set[str]:
    """The modules a fresh interpreter, started as autosched's processes start (PyTorch kept
    out), has loaded after importing ``module``."""
    script = (
        "import sys; from autosched.torch_guard import keep_torch_out; keep_torch_out(); "
        f"import {module}; print('\\n'.join(sorted(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(result.stdout.split())


@pytest.mark.slow
def test_the_http_client_loads_neither_sql_nor_the_log_nor_tvm() -> None:
    loaded = _loaded_after("autosched.client.http")
    assert "autosched.client.http" in loaded and "autosched.protocol" in loaded
    assert not {name for name in loaded if name.startswith(("sqlalchemy", "autosched.log", "tvm"))}


@pytest.mark.slow
def test_the_worker_daemon_loads_no_sql() -> None:
    loaded = _loaded_after("autosched.workers.daemon")
    assert "autosched.measure" in loaded
    assert not {name for name in loaded if name.startswith(("sqlalchemy", "autosched.log"))}


def test_the_installed_packages_are_the_trees_and_squat_on_no_generic_name() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {folder: package for package, folder in setuptools["package-dir"].items()}
    assert mapped == {"server": "autosched.server", "workers": "autosched.workers"}

    def package(init: Path) -> str:
        top, *rest = init.parent.relative_to(ROOT).parts
        return ".".join((mapped.get(top, top), *rest))

    in_tree = {
        package(init)
        for top in ("autosched", *mapped)
        for init in (ROOT / top).rglob("__init__.py")
    }
    # the others are folders of data and of Alembic's scripts, without an __init__.py
    folders = {
        package(path / "__init__.py")
        for top in ("autosched", *mapped)
        for path in (ROOT / top).rglob("*")
        if path.is_dir()
    }
    listed = set(setuptools["packages"])
    assert in_tree <= listed and listed - in_tree <= folders, listed - in_tree - folders


@pytest.mark.slow
def test_every_service_command_reaches_the_cli_through_its_entry_point() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "autosched", "--help"], capture_output=True, text=True, check=True
    )
    for command in ("tune", "export", "serve", "engine", "submit", "status", "token", "worker"):
        assert f" {command} " in result.stdout
