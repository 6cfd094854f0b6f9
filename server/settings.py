"""Settings of the tuning service, from ``AUTOSCHED_*`` environment variables and command flags.

Unsafe combinations are refused here, before anything listens: serving without auth is only
allowed on a loopback address, and tokens set in the environment must be long enough to be secret.
The variables are listed, with their defaults, in the README's table.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from autosched.admission import DEFAULT_MAX_PROGRAM_BYTES
from autosched.errors import UserError
from autosched.log.tokens import MIN_TOKEN_CHARS, Role
from autosched.model.onnx_bounds import DEFAULT_MAX_TENSOR_BYTES
from autosched.protocol import MAX_TRIALS, problem_line

ENV_PREFIX = "AUTOSCHED_"


class Settings(BaseSettings):
    """How the service runs; each field ``name`` is read from ``AUTOSCHED_<NAME>``.

    ``db_url`` is ``AUTOSCHED_DB``. ``client_token`` and ``worker_token`` are tokens the server
    accepts for that role besides those made by `autosched token create` (a deployment's shared
    secrets, e.g. in docker-compose).

    Raises:
        UserError: serving without auth off loopback, or an environment token that is too short.
        pydantic.ValidationError: a value of the wrong type or out of range (`load_settings`
            turns it into a UserError).
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_ignore_empty=True, frozen=True, populate_by_name=True
    )

    db_url: str = Field(
        "sqlite:///autosched.db", validation_alias="AUTOSCHED_DB", description="The tuning log."
    )
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, ge=1, le=65535, description="Port to listen on.")
    no_auth: bool = Field(False, description="Serve without tokens (loopback hosts only).")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="Largest request body accepted.")
    max_model_bytes: int = Field(
        64 << 20, ge=1024, description="Largest model file a model upload may send."
    )
    lease_secs: float = Field(60.0, gt=0, description="How long a lease holds unheard.")
    worker_timeout_secs: float = Field(60.0, gt=0, description="How long a silent worker lives.")
    claim_secs: float = Field(30.0, gt=0, description="How long an engine's claim on a job holds.")
    max_program_bytes: int = Field(
        DEFAULT_MAX_PROGRAM_BYTES, ge=1, description="Buffer bytes a submitted program may hold."
    )
    max_tensor_bytes: int = Field(
        DEFAULT_MAX_TENSOR_BYTES, ge=1, description="Bytes a tensor of an uploaded model may hold."
    )
    model_memory_bytes: int = Field(
        8 << 30, ge=1 << 30, description="Address space of a process importing or building a model."
    )
    model_secs: float = Field(600.0, gt=0, description="Time a model's import or compile may take.")
    header_timeout_secs: float = Field(
        10.0, gt=0, description="Time a client has to send a request's headers."
    )
    max_job_trials: int = Field(
        20_000, ge=1, le=MAX_TRIALS, description="Most trials a job or model job may ask for."
    )
    max_client_jobs: int = Field(
        16, ge=1, description="Most queued or running jobs a client may have (model rounds apart)."
    )
    max_client_model_jobs: int = Field(
        4, ge=1, description="Most queued or running model jobs a client may have."
    )
    client_token: SecretStr | None = Field(None, description="A client token to accept.")
    worker_token: SecretStr | None = Field(None, description="A worker token to accept.")

    @model_validator(mode="after")
    def _safe(self) -> Settings:
        if self.no_auth and not is_loopback(self.host):
            raise UserError(
                f"--no-auth is only allowed on a loopback host (127.0.0.1, ::1, localhost), "
                f"not {self.host}"
            )
        for role, token in self.env_tokens().items():
            if len(token) < MIN_TOKEN_CHARS:
                raise UserError(
                    f"{ENV_PREFIX}{role.name}_TOKEN needs at least {MIN_TOKEN_CHARS} characters"
                )
        return self

    def env_tokens(self) -> dict[Role, str]:
        """The tokens set in the environment, by role."""
        tokens = {Role.CLIENT: self.client_token, Role.WORKER: self.worker_token}
        return {role: token.get_secret_value() for role, token in tokens.items() if token}


def load_settings(**overrides: Any) -> Settings:
    """The settings from the environment, with ``overrides`` (flags) that are not None winning.

    Raises:
        UserError: a variable does not parse or is out of range, or the settings are unsafe.
    """
    try:
        return Settings(**{name: value for name, value in overrides.items() if value is not None})
    except ValidationError as error:
        problems = error.errors()
        for problem in problems:  # name the variable, not the field
            problem["loc"] = tuple(_variable(str(part)) for part in problem["loc"])
        raise UserError(problem_line(problems)) from None


def _variable(field: str) -> str:
    """The environment variable of a field (a location pydantic reports)."""
    info = Settings.model_fields.get(field)
    if info is None:  # reported under its alias already
        return field
    if isinstance(info.validation_alias, str):
        return info.validation_alias
    return f"{ENV_PREFIX}{field.upper()}"


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
