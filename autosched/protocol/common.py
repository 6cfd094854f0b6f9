"""What every part of the wire protocol shares: the limits on requests, the checked scalar types,
the base of request bodies (and of those that submit a job), the workload and target every answer
names, the problem every refusal answers with, and the one rule that converts bodies to and from
``autosched.records``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, StrictInt, TypeAdapter

from autosched.records import SearchSettings
from autosched.search.registry import STRATEGY_NAMES

MAX_ID = 2**31 - 1  # ids and seeds are 32-bit integers in the database
MAX_TRIALS = 100_000
MAX_BATCH = 4096
MAX_LEASE = 1024
MAX_PAGE = 1000
MAX_PROGRAM_JSON = 8 << 20  # characters; the request body limit is usually lower
# Request fields take JSON numbers and booleans as they are: "8" or true is no integer.
Id = Annotated[StrictInt, Field(ge=1, le=MAX_ID)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Latency = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Strategy = Literal[STRATEGY_NAMES]  # type: ignore[valid-type]  # the registry's names

Body = TypeVar("Body", bound=BaseModel)
Record = TypeVar("Record")


def problem_line(problems: Sequence[Mapping[str, Any]], *, skip: int = 0) -> str:
    """The first of pydantic's validation ``problems`` as one line: where, and what is wrong.

    ``skip`` leaves out the first parts of each location (FastAPI's ``body`` or ``query``).
    """
    first = problems[0]
    if first["type"] == "json_invalid":
        line = f"the request body is not valid JSON: {first.get('ctx', {}).get('error', '')}"
    else:
        where = ".".join(str(part) for part in first["loc"][skip:]) or "the request body"
        line = f"{where}: {str(first['msg']).removeprefix('Value error, ')}"
    return line if len(problems) == 1 else f"{line} (and {len(problems) - 1} more)"


# Conversions to and from the in-process records: a field of a body is the record's attribute of
# the same name, a nested body the nested record; only renamed and derived fields are written out.


def read(body: type[Body], record: object, **computed: Any) -> Body:
    """``body`` read from ``record``: each field from the attribute of the same name (a field the
    record lacks keeps its default), nested bodies from nested records, but for the ``computed``
    fields (renamed or derived), given here."""
    fields = {
        name: getattr(record, name)
        for name in body.model_fields
        if name not in computed and hasattr(record, name)
    }
    return body.model_validate(fields | computed, from_attributes=True)


def to_record(body: BaseModel, record: type[Record]) -> Record:
    """The ``record`` (a dataclass of ``autosched.records``) that ``body`` carries, from its fields
    of the same names; nested records and tuples are rebuilt, fields the record lacks left out."""
    return _adapter(record).validate_python(body.model_dump())


@functools.cache
def _adapter(record: type[Record]) -> TypeAdapter[Record]:
    return TypeAdapter(record)


class FromRecord(BaseModel):
    """A response body that mirrors a record of ``autosched.records`` field for field."""

    model_config = ConfigDict(from_attributes=True)

    @classmethod
    def of(cls: type[Body], record: object) -> Body:
        """The body of ``record``, as ``read`` reads it."""
        return read(cls, record)


class RequestBody(BaseModel):
    """Request bodies refuse fields they do not know, so a typo is an error, not a default."""

    model_config = ConfigDict(extra="forbid")


class SearchRequest(RequestBody):
    """A request body that submits a job, which declares ``SearchSettings``'s fields."""

    def search(self) -> SearchSettings:
        """How the job searches, from the body's fields of the same names."""
        fields = {name: getattr(self, name) for name in SearchSettings.__annotations__}
        return cast(SearchSettings, fields)


# What answers name.


class WorkloadPublic(FromRecord):
    key: str
    name: str
    params: dict[str, Any]
    flops: float | None


class TargetPublic(FromRecord):
    key: str
    kind: str
    target_json: dict[str, Any]


# Refusals and health.


class Problem(BaseModel):
    """Every refusal and failure: one line saying what is wrong (and, where it helps, what would
    be right)."""

    detail: str


PROBLEMS: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem, "description": description}
    for code, description in {
        401: "No bearer token, or an unknown or revoked one (WWW-Authenticate: Bearer).",
        403: "A token of the other role, or another worker's token.",
        404: "What the request names is not in the tuning log.",
        409: "A target kind with no live worker, or several targets; a model job that failed.",
        413: "A body, or an uploaded model file, over the server's limit.",
        422: "Bad input: a body or parameter that does not validate, or a program not admitted.",
        503: "The tuning log's database is unreachable; retry after Retry-After seconds.",
    }.items()
}
"""The refusals every route may answer with, for the OpenAPI document."""


class HealthPublic(BaseModel):
    status: Literal["ok"] = "ok"
