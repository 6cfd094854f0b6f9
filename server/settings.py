"""Settings of the API server, from the environment and the `autosched serve` flags.

Unsafe combinations are refused here, before anything listens: serving without auth is only allowed
on a loopback address, and tokens set in the environment must be long enough to be secret.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from autosched.errors import UserError
from autosched.log import default_db_url
from autosched.log.tokens import MIN_TOKEN_CHARS, Role

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")
_NUMBERS: dict[str, tuple[str, type[int] | type[float]]] = {
    "max_body_bytes": ("AUTOSCHED_MAX_BODY_BYTES", int),
    "lease_secs": ("AUTOSCHED_LEASE_SECS", float),
    "worker_timeout_secs": ("AUTOSCHED_WORKER_TIMEOUT_SECS", float),
    "claim_secs": ("AUTOSCHED_CLAIM_SECS", float),
}


@dataclass(frozen=True)
class Settings:
    """How the API server runs.

    Environment variables (flags of `autosched serve` override them):
        ``AUTOSCHED_DB``: the tuning log's URL.
        ``AUTOSCHED_NO_AUTH``: ``1`` to serve without tokens (loopback hosts only).
        ``AUTOSCHED_MAX_BODY_BYTES``: the largest request body accepted (default 1 MiB).
        ``AUTOSCHED_CLIENT_TOKEN``, ``AUTOSCHED_WORKER_TOKEN``: tokens the server accepts for
            that role in addition to those made by `autosched token create` (a deployment's
            shared secrets, e.g. in docker-compose).
        ``AUTOSCHED_LEASE_SECS``: how long a lease holds without a heartbeat (default 60).
        ``AUTOSCHED_WORKER_TIMEOUT_SECS``: how long a silent worker counts as alive (default 60).
        ``AUTOSCHED_CLAIM_SECS``: how long the search engine's claim on a job holds (default 30).
    """

    db_url: str = field(default_factory=default_db_url)
    host: str = "127.0.0.1"
    port: int = 8000
    no_auth: bool = False
    max_body_bytes: int = 1 << 20
    lease_secs: float = 60.0
    worker_timeout_secs: float = 60.0
    claim_secs: float = 30.0
    env_tokens: Mapping[Role, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.no_auth and not is_loopback(self.host):
            raise UserError(
                f"--no-auth is only allowed on a loopback host (127.0.0.1, ::1, localhost), "
                f"not {self.host}"
            )
        if not 1 <= self.port <= 65535:
            raise UserError(f"port must be within 1..65535, not {self.port}")
        if self.max_body_bytes < 1024:
            raise UserError(
                f"the body size limit must be at least 1024 bytes, not {self.max_body_bytes}"
            )
        for name in ("lease_secs", "worker_timeout_secs", "claim_secs"):
            if not getattr(self, name) > 0:
                raise UserError(f"{name} must be positive, not {getattr(self, name)}")
        for role, token in self.env_tokens.items():
            if len(token) < MIN_TOKEN_CHARS:
                raise UserError(
                    f"AUTOSCHED_{role.name}_TOKEN needs at least {MIN_TOKEN_CHARS} characters"
                )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``env`` (default ``os.environ``); ``overrides`` that are not None win.

        Raises:
            UserError: a variable does not parse, or the settings are unsafe (see the class).
        """
        env = os.environ if env is None else env
        values: dict[str, Any] = {
            "no_auth": _flag(env, "AUTOSCHED_NO_AUTH"),
            "env_tokens": {
                role: env[f"AUTOSCHED_{role.name}_TOKEN"]
                for role in Role
                if env.get(f"AUTOSCHED_{role.name}_TOKEN")
            },
        }
        if env.get("AUTOSCHED_DB"):
            values["db_url"] = env["AUTOSCHED_DB"]
        for name, (variable, kind) in _NUMBERS.items():
            if env.get(variable):
                values[name] = _number(env, variable, kind)
        known = {f.name for f in fields(cls)}
        values.update({k: v for k, v in overrides.items() if v is not None and k in known})
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"unknown settings: {', '.join(unknown)}")
        return cls(**values)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _flag(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value not in _TRUE + _FALSE:
        raise UserError(f"{name} must be 1 or 0, not {env[name]!r}")
    return value in _TRUE


def _number(env: Mapping[str, str], name: str, kind: type[int] | type[float]) -> float:
    try:
        return kind(env[name])
    except ValueError:
        raise UserError(f"{name} must be a number, not {env[name]!r}") from None
