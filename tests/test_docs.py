"""The documentation: the site builds strictly, its generated references hold every command,
setting and route of the code, and the README stays one page whose links and commands are real."""

from __future__ import annotations

import html
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup

from autosched.cli.main import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as CI builds it: `mkdocs build --strict`, where any warning fails the build."""
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return folder


def _page_text(site: Path, page: str) -> str:
    """The text of a built page's article, tags stripped."""
    source = (site / page / "index.html").read_text()
    article = source[source.index("<article") : source.index("</article>")]
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", article)).split())


def _commands() -> Iterator[tuple[str, typer.core.TyperCommand | TyperGroup, typer.Context]]:
    """Every command of the `autosched` app with its path and context, groups included."""
    root = typer.main.get_command(app)
    pending = [(root, typer.Context(root, info_name="autosched"))]
    while pending:
        command, context = pending.pop()
        if context.parent is not None:
            yield context.command_path, command, context
        if isinstance(command, TyperGroup):
            for name in command.list_commands(context):
                sub = command.get_command(context, name)
                assert sub is not None
                pending.append((sub, typer.Context(sub, info_name=name, parent=context)))


def test_the_cli_reference_holds_every_command_and_option(site: Path) -> None:
    text = _page_text(site, "reference/cli")
    missing = [
        f"{path} {option}"
        for path, command, context in _commands()
        for option in [path]
        + [opt for param in command.get_params(context) for opt in param.opts if opt != "--help"]
        if option not in text
    ]
    assert missing == []
    assert "autosched log export" in text and "--model-job" in text


def test_the_configuration_reference_holds_every_setting(site: Path) -> None:
    from autosched.server.settings import ENV_PREFIX, Settings

    text = _page_text(site, "reference/configuration")
    missing = []
    for name, info in Settings.model_fields.items():
        alias = info.validation_alias
        variable = alias if isinstance(alias, str) else f"{ENV_PREFIX}{name.upper()}"
        missing += [word for word in (name, variable) if word not in text]
    assert missing == []
    assert "AUTOSCHED_DB" in text and "67108864 (64 MiB)" in text


def test_the_rest_reference_holds_every_route_with_its_token(site: Path) -> None:
    from autosched.server.api.app import create_app
    from autosched.server.settings import Settings

    document = create_app(Settings.model_construct()).openapi()
    text = _page_text(site, "reference/rest")
    routes = [
        f"{method.upper()} {path}" for path, ops in document["paths"].items() for method in ops
    ]
    assert len(routes) > 20
    assert [route for route in routes if route not in text] == []
    assert [name for name in document["components"]["schemas"] if name not in text] == []
    for route, token in [
        ("POST /api/v1/jobs", "client"),
        ("GET /api/v1/jobs", "client, admin"),
        ("POST /api/v1/workers/{worker_id}/heartbeat", "worker"),
        ("GET /api/v1/log/export", "admin"),
        ("GET /healthz", "none"),
    ]:
        found = re.search(rf"{re.escape(route)} ¶ [^¶]*? Token: ([\w, ]+)\.", text)
        assert found is not None and found.group(1) == token, route


def test_the_readme_is_one_page() -> None:
    assert len(README.read_text().splitlines()) <= 200


def _code_blocks(markdown: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", markdown, re.DOTALL | re.MULTILINE)


def test_the_readme_starts_with_the_set_up_commands_ci_runs() -> None:
    first, second = _code_blocks(README.read_text(), r"\w*")[:2]
    assert first.strip() == (
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && "
        "autosched tune matmul -p M=512 -p N=512 -p K=512 --trials 64"
    )
    assert second.strip() == (
        'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[test]" && pytest -q'
    )
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -q -e ".[test]"' in ci and "pytest -q ||" in ci
    assert "mkdocs build --strict" in ci and "--quiet" not in ci.split("mkdocs build")[1][:60]


def test_the_readmes_links_lead_to_files_and_headings() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/reference/") for link in local)
    for link in local:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.is_file(), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(), re.MULTILINE)
            slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
            assert anchor in slugs, link


def _readme_command_lines() -> Iterator[str]:
    """Each `autosched ...` invocation in the README's shell blocks, up to its shell operator."""
    for block in _code_blocks(README.read_text(), "bash"):
        for line in block.splitlines():
            for start in re.finditer(r"(?<![\w./-])autosched ", line):
                yield re.split(r"\s(?:&&|&|\||#)|\)|;", line[start.start() :])[0]


def test_the_readmes_commands_name_real_commands_and_options() -> None:
    commands = {path: (command, context) for path, command, context in _commands()}
    lines = list(_readme_command_lines())
    assert len(lines) > 15
    for line in lines:
        words = shlex.split(line)
        path = "autosched"
        while words[1:] and f"{path} {words[1]}" in commands:
            path = f"{path} {words.pop(1)}"
        assert path in commands, line
        command, context = commands[path]
        options = {opt for param in command.get_params(context) for opt in param.opts}
        options |= {opt for param in command.get_params(context) for opt in param.secondary_opts}
        for word in words[1:]:
            if word.startswith("-"):
                assert word.split("=")[0] in options, f"{word} of: {line}"
