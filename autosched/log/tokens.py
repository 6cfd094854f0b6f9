"""Bearer tokens of the REST API, kept in the tuning log as sha256 hashes with a role.

A plain token exists only in the answer to ``create`` (or in the environment that ``add`` reads it
from); the log keeps its hash, so a leaked database does not leak usable tokens.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from enum import Enum

from sqlalchemy import select

from autosched.errors import UserError
from autosched.log.store import LogStore
from autosched.log.tables import ApiToken, utcnow

MIN_TOKEN_CHARS = 32  # ``create`` makes 43 characters (256 random bits)


class Role(str, Enum):
    """What a token may do: clients submit jobs and read and cancel their own; workers lease and
    report candidates; admins export and import the whole tuning log, and read and cancel every
    job."""

    CLIENT = "client"
    WORKER = "worker"
    ADMIN = "admin"


LOCAL_PRINCIPAL = "local"
"""Whom a server without auth (``--no-auth``, loopback only) serves: every request acts for it."""


def env_token_name(role: Role) -> str:
    """The name a token set in the environment is stored under: its variable's."""
    return f"AUTOSCHED_{role.name}_TOKEN"


@dataclass(frozen=True)
class Credential:
    """A stored token, as a request presents it: its id, role and name."""

    id: int
    role: Role
    name: str

    @property
    def principal(self) -> str:
        """Whom the token acts for: the jobs it submits belong to this principal, and only its
        tokens see them. The tokens set in the environment (stored under their variable's name)
        are one principal whatever their value, so a deployment that changes its secret keeps its
        jobs; every other token is a principal of its own."""
        if self.name == env_token_name(self.role):
            return self.name
        return f"token:{self.id}"


class TokenStore(LogStore):
    """The API tokens of a tuning log.

    Contract:
        * ``create`` and ``add`` are single transactions; ``add`` is idempotent.
        * ``authenticate`` accepts a token only while it is stored and not revoked.
        * Thread safety: as ``TuningLog``; one store may be shared by threads.
    """

    def create(self, role: Role, name: str) -> str:
        """Make a new random token of ``role``; returns it, the only time it is ever shown.

        Raises:
            UserError: ``name`` is the one the environment's token of ``role`` is stored under
                (it would act for the environment's principal).
        """
        if name == env_token_name(role):
            raise UserError(f"the name {name} is kept for the token set in {name}; choose another")
        token = secrets.token_urlsafe(32)
        self.add(role, name, token)
        return token

    def add(self, role: Role, name: str, token: str) -> None:
        """Accept ``token`` (chosen elsewhere, e.g. set in a deployment's environment) as ``role``.

        Adding a token that is already stored with the same role changes nothing.

        Raises:
            UserError: the token is shorter than ``MIN_TOKEN_CHARS``, or is stored with another
                role.
        """
        if len(token) < MIN_TOKEN_CHARS:
            raise UserError(f"a {role.value} token needs at least {MIN_TOKEN_CHARS} characters")
        values = {
            "name": name,
            "role": role.value,
            "token_hash": _hash(token),
            "created_at": utcnow(),
        }
        with self._log.sessions.begin() as session:
            session.execute(
                self._log.insert(ApiToken)
                .values(**values)
                .on_conflict_do_nothing(index_elements=["token_hash"])
            )
            stored = session.scalars(
                select(ApiToken.role).where(ApiToken.token_hash == values["token_hash"])
            ).one()
        if stored != role.value:
            raise UserError(f"this token is already a {stored} token; use another one")

    def authenticate(self, token: str) -> Credential | None:
        """The stored token ``token``, or ``None`` if it is unknown or revoked."""
        query = select(ApiToken.id, ApiToken.role, ApiToken.name).where(
            ApiToken.token_hash == _hash(token), ApiToken.revoked_at.is_(None)
        )
        with self._log.sessions.begin() as session:
            found = session.execute(query).one_or_none()
        return None if found is None else Credential(found.id, Role(found.role), found.name)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
