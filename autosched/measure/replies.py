"""Replies of measuring processes as data: JSON that the parent rebuilds into the type a request's
``execute`` declares, never a pickle, since a measuring process runs programs from outside and
unpickling what it sends would run its code in the parent.

Types a reply may take: None, bool, int, float, str, bytes (base64), ``list[T]``,
``tuple[T, ...]``, tuples of fixed types, ``T | None``, ``dict`` of JSON, and frozen dataclasses
of these.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import types
import typing
from typing import Any

MAX_REPLY_BYTES = 512 << 20
"""The largest reply a parent reads (a model's compiled library is the largest)."""


class BadReply(Exception):
    """A reply that is not what the request declares."""


def encode(status: str, value: Any) -> bytes:
    """A reply as bytes: ``status`` ("ready", "ok" or "error") and its value."""
    return json.dumps([status, _plain(value)], allow_nan=True).encode()


def decode(data: bytes, result_type: Any) -> tuple[str, Any]:
    """The status and value of a reply, the value rebuilt as ``result_type`` (a status other
    than "ok" carries a string or nothing).

    Raises:
        BadReply: the bytes are not such a reply.
    """
    try:
        status, value = json.loads(data)
    except (ValueError, TypeError, RecursionError):
        raise BadReply("the measuring process sent a malformed reply") from None
    if status != "ok":
        return str(status), None if value is None else str(value)[:4000]
    return status, _rebuild(value, result_type)


def result_type(request: object) -> Any:
    """The type ``request.execute`` declares it returns (Any where it declares none)."""
    try:
        return typing.get_type_hints(type(request).execute).get("return", Any)
    except (NameError, TypeError):
        return Any


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return {field.name: _plain(getattr(value, field.name)) for field in fields}
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


def _rebuild(value: Any, kind: Any) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return value
    if kind is None or kind is type(None):
        return _expect(value, value is None, kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [arg for arg in args if arg is not type(None)]
        for option in options:
            try:
                return _rebuild(value, option)
            except BadReply:
                continue
        raise BadReply(f"the measuring process sent {type(value).__name__}, not {kind}")
    if kind is bool:
        return _expect(value, isinstance(value, bool), kind)
    if kind is int:
        return _expect(value, isinstance(value, int) and not isinstance(value, bool), kind)
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(_expect(value, ok, kind))
    if kind is str:
        return _expect(value, isinstance(value, str), kind)
    if kind is bytes:
        try:
            return base64.b64decode(_expect(value, isinstance(value, str), kind), validate=True)
        except ValueError:
            raise BadReply("the measuring process sent malformed bytes") from None
    if origin in (list, tuple) or kind in (list, tuple):
        items = _expect(value, isinstance(value, list), kind)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(items) != len(args):
                raise BadReply(f"the measuring process sent {len(items)} items, not {len(args)}")
            return tuple(_rebuild(item, arg) for item, arg in zip(items, args, strict=True))
        item_type = args[0] if args else Any
        rebuilt = [_rebuild(item, item_type) for item in items]
        return tuple(rebuilt) if origin is tuple or kind is tuple else rebuilt
    if origin is dict or kind is dict:
        return _expect(value, isinstance(value, dict), kind)
    if dataclasses.is_dataclass(kind):
        fields = _expect(value, isinstance(value, dict), kind)
        hints = typing.get_type_hints(kind)
        names = [field.name for field in dataclasses.fields(kind) if field.init]
        if set(fields) != set(names):
            raise BadReply(f"the measuring process sent a malformed {kind.__name__}")
        return kind(**{name: _rebuild(fields[name], hints[name]) for name in names})
    raise BadReply(f"a measuring process cannot return {kind}")


def _expect(value: Any, ok: bool, kind: Any) -> Any:
    if not ok:
        raise BadReply(f"the measuring process sent {type(value).__name__}, not {kind}")
    return value
