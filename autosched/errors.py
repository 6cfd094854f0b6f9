"""Errors that reach the user as one clear line: exit code 2 on the CLI, a 4xx over HTTP.

The service maps them to HTTP in one place (``autosched.server.api.app``): ``UserError`` is a
422, ``NotFound`` a 404, ``Conflict`` a 409, ``TooLarge`` a 413 and ``OverLimit`` a 429. Code
below the routes raises these, never HTTP.
"""


class UserError(Exception):
    """Bad input from the user: an unknown workload, a bad parameter, an unknown target, ...

    The message is one line that says what is wrong and, where it helps, what would be right.
    """


class NotFound(UserError):
    """What the request names is not there: no such job, workload, worker or lease."""


class Forbidden(UserError):
    """The caller may not act on what the request names (a worker registered by another token)."""


class Conflict(UserError):
    """The request is valid but the state of things refuses it (e.g. a name that means several)."""


class TooLarge(UserError):
    """What the request sends is over a limit of the server (an uploaded model file)."""


class OverLimit(UserError):
    """The request would take the caller past a per-client limit of the server (its jobs in the
    queue); it may retry once some of them have ended."""


class Cancelled(Exception):
    """Work stopped on request (Ctrl-C, SIGTERM) at a safe point; what was committed stays."""


class ServiceUnavailable(Exception):
    """The tuning service could not be reached or failed (a network error, a 5xx): retry later,
    after ``retry_after`` seconds where the service said so."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class DatabaseUnavailable(ServiceUnavailable):
    """The tuning log's database cannot be reached for now (it restarts, the network is down).

    The service answers 503 with Retry-After, and its background loops wait it out."""
