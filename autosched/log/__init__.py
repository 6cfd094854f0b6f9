"""The tuning log: a SQL record of workloads, targets, tuning jobs and measured candidates.

``TuningLog`` is the only entry point; the tables (``models``) and migrations are internal.
"""

from autosched.log.store import (
    JobInfo,
    JobStatus,
    TargetInfo,
    TuningLog,
    WorkloadInfo,
    default_db_url,
)

__all__ = ["JobInfo", "JobStatus", "TargetInfo", "TuningLog", "WorkloadInfo", "default_db_url"]
