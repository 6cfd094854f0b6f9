"""MkDocs hook: the reference pages, written from the code as the site builds.

A page holds a marker (an HTML comment such as ``<!-- reference: cli -->``) where its reference
goes: ``settings`` is the table of the service's pydantic settings (``server/settings.py``),
``cli`` every command of the Typer app that ``[project.scripts]`` names, ``rest`` every route of the
OpenAPI document of ``create_app``. Nothing generated is kept in the repository, so it cannot go
stale; the hand-written text around a marker is what GitHub shows.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import annotated_types
import typer
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page
from pydantic.fields import FieldInfo
from typer.core import TyperGroup

MARKER = re.compile(r"<!-- reference: (\w+) -->")

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)


def on_page_markdown(markdown: str, /, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace each reference marker of a page with the reference it names."""

    def reference(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in REFERENCES:
            raise ValueError(f"{page.file.src_uri}: no reference named {name!r}")
        return REFERENCES[name]()

    return MARKER.sub(reference, markdown)


def _text(text: str) -> str:
    """Help text as Markdown: ``<`` and ``*`` outside code spans are literal characters."""
    pieces: list[str] = []
    last = 0
    for match in _CODE_SPAN.finditer(text):
        pieces.append(_escape(text[last : match.start()]))
        pieces.append(match.group(0))
        last = match.end()
    pieces.append(_escape(text[last:]))
    return "".join(pieces)


def _escape(text: str) -> str:
    return text.replace("<", "&lt;").replace("*", r"\*")


def _cell(text: str) -> str:
    """Text for one cell of a Markdown table: one line, pipes escaped."""
    return _text(" ".join(text.split())).replace("|", r"\|")


def _table_head(*columns: str) -> list[str]:
    """The first two lines of a Markdown table of ``columns``."""
    return ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]


# --- configuration: the service's settings ---------------------------------------------------


def settings_reference() -> str:
    """A table of the service's settings: field, environment variable, default, range, meaning."""
    from autosched.server.settings import ENV_PREFIX, Settings

    rows = _table_head("setting", "environment variable", "default", "range", "description")
    for name, info in Settings.model_fields.items():
        alias = info.validation_alias
        variable = alias if isinstance(alias, str) else f"{ENV_PREFIX}{name.upper()}"
        rows.append(
            f"| `{name}` | `{variable}` | {_default(name, info)} | {_range(info)} "
            f"| {_cell(info.description or '')} |"
        )
    return "\n".join(rows) + "\n"


def _default(name: str, info: FieldInfo) -> str:
    value = info.default
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{int(value)}`"
    if name.endswith("_bytes") and isinstance(value, int):
        return f"`{value}` ({_bytes(value)})"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


def _bytes(count: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count} bytes"


def _range(info: FieldInfo) -> str:
    bounds: list[str] = []
    for rule in info.metadata:
        if isinstance(rule, annotated_types.Ge):
            bounds.append(f"≥ {rule.ge}")
        elif isinstance(rule, annotated_types.Gt):
            bounds.append(f"> {rule.gt}")
        elif isinstance(rule, annotated_types.Le):
            bounds.append(f"≤ {rule.le}")
        elif isinstance(rule, annotated_types.Lt):
            bounds.append(f"< {rule.lt}")
    return ", ".join(bounds)


# --- the command line ---------------------------------------------------------------------------


def cli_reference() -> str:
    """Every command of the `autosched` program: its help, usage, arguments and options."""
    from autosched.cli.main import app

    root = typer.main.get_command(app)
    sections = [
        _command_section(command, context)
        for command, context in _commands(root, typer.Context(root, info_name="autosched"))
    ]
    return "\n".join(sections)


def _commands(
    command: typer.core.TyperCommand | TyperGroup, context: typer.Context
) -> Iterator[tuple[typer.core.TyperCommand | TyperGroup, typer.Context]]:
    """The command and its sub-commands, depth first, in the order the app lists them."""
    if context.parent is not None:
        yield command, context
    if isinstance(command, TyperGroup):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                yield from _commands(sub, typer.Context(sub, info_name=name, parent=context))


def _command_section(command: typer.core.TyperCommand | TyperGroup, context: typer.Context) -> str:
    path = context.command_path
    lines = [f"## `{path}`", ""]
    if command.help:
        lines += [_help(command.help), ""]
    usage = " ".join(command.collect_usage_pieces(context))
    lines += ["```text", f"{path} {usage}".rstrip(), "```", ""]
    params = [param for param in command.get_params(context) if "--help" not in param.opts]
    for kind, title in (("argument", "Arguments"), ("option", "Options")):
        records = [
            record
            for param in params
            if param.param_type_name == kind and not getattr(param, "hidden", False)
            if (record := param.get_help_record(context)) is not None
        ]
        if records:
            lines += [f"{title}:", ""]
            lines += [f"- `{name}`: {_text(' '.join(text.split()))}" for name, text in records]
            lines.append("")
    if isinstance(command, TyperGroup):
        subs = [
            f"[`{path} {name}`](#{_anchor(f'{path} {name}')})"
            for name in command.list_commands(context)
        ]
        lines += ["Commands: " + ", ".join(subs) + ".", ""]
    return "\n".join(lines)


def _help(help_text: str) -> str:
    """A command's docstring as Markdown paragraphs (Click's ``\\b`` markers dropped)."""
    paragraphs = [
        " ".join(line.strip() for line in block.splitlines() if line.strip() != "\b")
        for block in inspect.cleandoc(help_text).split("\n\n")
    ]
    return "\n\n".join(_text(paragraph) for paragraph in paragraphs if paragraph)


def _anchor(title: str) -> str:
    """The id MkDocs's table of contents gives a heading of this text."""
    return re.sub(r"[^\w\- ]", "", title).strip().lower().replace(" ", "-")


# --- the REST API -------------------------------------------------------------------------------


def rest_reference() -> str:
    """Every route of the service's OpenAPI document, then every schema its bodies use."""
    from autosched.server.api.app import create_app
    from autosched.server.settings import Settings

    app = create_app(Settings.model_construct())  # defaults only: the document ignores the env
    document = app.openapi()
    roles = _route_roles()
    errors: dict[str, str] = {}
    operations: list[str] = []
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            operations.append(
                _operation(method.upper(), path, operation, roles.get((method.upper(), path)))
            )
            for code, response in operation.get("responses", {}).items():
                if not code.startswith("2"):
                    errors.setdefault(code, response.get("description", ""))
    lines = ["## Errors", "", *_table_head("status", "meaning")]
    lines += [f"| {code} | {_cell(errors[code])} |" for code in sorted(errors)]
    lines += ["", "## Routes", "", *operations, "## Schemas", ""]
    for name, schema in sorted(document["components"]["schemas"].items()):
        lines.append(_schema(name, schema))
    return "\n".join(lines)


def _route_roles() -> dict[tuple[str, str], tuple[str, ...]]:
    """The token roles each route lets through, by method and path: those that every
    authorization dependency of the route accepts (the ``authorize`` closures of
    ``server/api/deps.py``, each holding its ``roles``), read from the routers of
    ``server/api/routes/``."""
    import importlib
    import pkgutil

    from fastapi.routing import APIRoute

    from autosched.server.api import routes
    from autosched.server.api.app import API_PREFIX

    found: dict[tuple[str, str], tuple[str, ...]] = {}
    for module in pkgutil.iter_modules(routes.__path__):
        router = importlib.import_module(f"{routes.__name__}.{module.name}").router
        for route in router.routes:
            if not isinstance(route, APIRoute):
                continue
            accepted = _roles(route.dependant)
            for method in route.methods:
                for path in (route.path, API_PREFIX + route.path):
                    found[(method, path)] = accepted
    return found


def _roles(dependant: Any) -> tuple[str, ...]:
    """The roles every authorization dependency under ``dependant`` accepts, in their order."""
    accepted: list[str] | None = None
    pending = [dependant]
    while pending:
        current = pending.pop()
        pending.extend(current.dependencies)
        call: Callable[..., Any] | None = current.call
        if getattr(call, "__name__", "") != "authorize":
            continue
        roles = [str(role.value) for role in inspect.getclosurevars(call).nonlocals["roles"]]
        accepted = roles if accepted is None else [role for role in accepted if role in roles]
    return tuple(accepted or ())


def _operation(
    method: str, path: str, operation: dict[str, Any], roles: tuple[str, ...] | None
) -> str:
    """One route: its summary, the tokens it takes, its parameters, body and responses."""
    tags = ", ".join(f"`{tag}`" for tag in operation.get("tags", []))
    lines = [f"### `{method} {path}`", "", f"**{operation.get('summary', '')}** ({tags})", ""]
    lines += [f"Token: {', '.join(roles) if roles else 'none'}.", ""]
    if description := operation.get("description"):
        lines += [_help(description), ""]
    if params := operation.get("parameters"):
        lines += _table_head("parameter", "in", "type", "required", "description")
        for param in params:
            schema = param.get("schema", {})
            text = param.get("description") or schema.get("description", "")
            lines.append(
                f"| `{param['name']}` | {param['in']} | {_type(schema)} "
                f"| {'yes' if param.get('required') else 'no'} | {_cell(text)} |"
            )
        lines.append("")
    if body := operation.get("requestBody"):
        for media, content in body.get("content", {}).items():
            lines += [f"Body (`{media}`): {_type(content.get('schema', {}))}", ""]
    done: list[str] = []
    failed: list[str] = []
    for code, response in operation.get("responses", {}).items():
        if not code.startswith("2"):
            failed.append(code)
            continue
        contents = list(response.get("content", {}).values())
        done.append(f"{code} {_type(contents[0].get('schema', {}))}" if contents else code)
    lines += [f"Responses: {', '.join(done)}; errors: {', '.join(sorted(failed)) or 'none'}.", ""]
    return "\n".join(lines)


def _type(schema: dict[str, Any]) -> str:
    """A JSON schema's type in a few words, a reference linked to its schema."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    if "anyOf" in schema:
        return " or ".join(_type(option) for option in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(value)}`" for value in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        return f"object of {_type(extra)}" if isinstance(extra, dict) else "object"
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    low, high = (_number(schema.get(bound)) for bound in ("minimum", "maximum"))
    bounds = f" ({low} to {high})" if low is not None and high is not None else ""
    if low is not None and high is None:
        bounds = f" (≥ {low})"
    return f"{kind}{bounds}" if kind else "any"


def _number(value: float | None) -> float | None:
    """A bound as written: 1, not 1.0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _schema(name: str, schema: dict[str, Any]) -> str:
    lines = [f"### {name}", ""]
    if description := schema.get("description"):
        lines += [_help(description), ""]
    properties: dict[str, dict[str, Any]] = schema.get("properties", {})
    required = set(schema.get("required", []))
    if properties:
        lines += _table_head("field", "type", "required", "default", "description")
        for field, spec in properties.items():
            default = f"`{json.dumps(spec['default'])}`" if "default" in spec else ""
            lines.append(
                f"| `{field}` | {_type(spec)} | {'yes' if field in required else 'no'} "
                f"| {default} | {_cell(spec.get('description', ''))} |"
            )
        lines.append("")
    elif "enum" in schema:
        lines += [f"One of {_type(schema)}.", ""]
    return "\n".join(lines)


REFERENCES: dict[str, Callable[[], str]] = {
    "settings": settings_reference,
    "cli": cli_reference,
    "rest": rest_reference,
}
"""The references a page may name in its marker."""
