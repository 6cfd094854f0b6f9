"""Errors that reach the user as one clear line (exit code 2 on the CLI, 4xx over HTTP)."""


class UserError(Exception):
    """Bad input from the user: an unknown workload, a bad parameter, an unknown target, ...

    The message is one line that says what is wrong and, where it helps, what would be right.
    """


class Cancelled(Exception):
    """Work stopped on request (Ctrl-C, SIGTERM) at a safe point; what was committed stays."""


class ServiceUnavailable(Exception):
    """The tuning service could not be reached or failed (a network error, a 5xx): retry later."""
