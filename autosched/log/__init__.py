"""The tuning log: a SQL record of workloads, targets, measured candidates, tuning jobs, the
service's queue, shared cost models and API tokens, in SQLite or PostgreSQL.

``db`` opens and migrates the database; ``store.TuningLog`` holds workloads, targets and
measurements (each with its ``provenance``) and answers the ``queries``; ``jobs``, ``leases``,
``costmodels`` and ``tokens`` are stores over the same database; ``portable`` exports a log to a
file and imports one; ``tables`` describes the tables and ``migrations`` creates them. The
finals' re-timed samples and leases live in ``autosched.finals``.
"""

from autosched.log.db import default_db_url
from autosched.log.store import TuningLog

__all__ = ["TuningLog", "default_db_url"]
