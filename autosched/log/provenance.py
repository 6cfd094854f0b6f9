"""Where a measurement comes from: the autosched, TVM and LLVM versions and the machine that
measured it, and the job it was measured for, as the JSON kept beside every measurement.

The machine's side (TVM, LLVM, processor, cores, GPU, driver) comes from the fingerprint of the
device that measured it (``autosched.target.device_fingerprint``, taken on that machine); what the
fingerprint does not say is left out.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

# Fingerprint fields that describe the machine, copied into the provenance under ``machine``.
MACHINE_FIELDS = (
    "cpu_model",
    "physical_cores",
    "logical_cores",
    "gpu_name",
    "compute_version",
    "driver_version",
    "platform",
    "hostname",
)


@cache
def autosched_version() -> str:
    """The installed autosched's version (``unknown`` in a tree that is not installed)."""
    try:
        return version("autosched")
    except PackageNotFoundError:
        return "unknown"


def measurement_provenance(
    fingerprint: dict[str, Any] | None, job_id: int | None
) -> dict[str, Any]:
    """The provenance of a measurement stored now by this autosched, measured on the device of
    ``fingerprint`` (None: not known) for job ``job_id`` of this log.

    Returns:
        ``{"autosched", "tvm", "llvm", "machine", "job"}``: versions as strings (None where the
        fingerprint does not say), ``machine`` the fingerprint's fields of ``MACHINE_FIELDS``,
        ``job`` the job's id in the log that measured it.
    """
    device = fingerprint or {}
    return {
        "autosched": autosched_version(),
        "tvm": _text(device.get("tvm_version")),
        "llvm": _text(device.get("llvm_version")),
        "machine": {name: device[name] for name in MACHINE_FIELDS if name in device},
        "job": job_id,
    }


def _text(value: object) -> str | None:
    return None if value is None else str(value)
