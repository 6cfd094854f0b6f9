"""The bodies of moving tuning logs between services: what importing a portable log file
brought in."""

from __future__ import annotations

from pydantic import BaseModel


class TallyPublic(BaseModel):
    """Lines of one kind in an imported log file: stored anew, or there already."""

    new: int
    existing: int


class LogImportPublic(BaseModel):
    """What importing a portable log file brought in (``autosched log import``)."""

    workloads: TallyPublic
    targets: TallyPublic
    devices: TallyPublic
    measurements: TallyPublic
    best_records_offered: int
    other_tvm: int
    rekeyed: int
