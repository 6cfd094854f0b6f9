"""Targets as plain JSON dicts: parsing what the user typed, detecting the host, canonical keys.

Also the fingerprint of the machine a measurement ran on. TVM ``Target`` objects are made only at
the edge, by :func:`to_tvm_target`. Target JSON from outside sets only the attributes of
`CLIENT_TARGET_ATTRIBUTES`.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import socket
from pathlib import Path
from typing import Any

import psutil
import tvm
from tvm.target import codegen

from autosched.errors import UserError
from autosched.machine.cpu import cpu_flags

_HOST_WORDS = ("", "llvm", "host")
_VECTOR_EXTENSIONS = ("avx", "amx")
_ACCEPTED = "'llvm' (or 'host'), 'cuda', or a JSON object such as '{\"kind\": \"llvm\"}'"
CLIENT_TARGET_ATTRIBUTES = frozenset(
    {
        "kind", "tag", "keys", "host", "mtriple", "mcpu", "mattr", "num-cores", "arch",
        "max_num_threads", "max_threads_per_block", "max_shared_memory_per_block",
        "thread_warp_size",
    }
)  # fmt: skip
"""The attributes target JSON from outside may set: those of `host_target` and the CUDA target
this module detects, and those TVM adds to their canonical form (``keys``, an empty ``tag``), a
``host`` (an object of these attributes itself) included. TVM hands the others to the compile of
the process that builds for the target: LLVM's ``cl-opt`` options, for one, run LLVM's own
debugging passes (``-print-after-all`` writes the whole module after every pass)."""
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_.+\-]{1,64}")


def host_target() -> dict:
    """The LLVM target of this machine: its triple, its CPU as LLVM names it, its physical cores,
    and (``mattr``) the vector extensions of that CPU that this machine may not use."""
    target = {
        "kind": "llvm",
        "mtriple": codegen.llvm_get_system_triple(),
        "mcpu": codegen.llvm_get_system_cpu(),
        "num-cores": _physical_cores(),
    }
    disabled = withheld_features(target, cpu_flags())
    if disabled:
        target["mattr"] = [f"-{feature}" for feature in disabled]
    return target


def withheld_features(target: dict, flags: frozenset[str] | None) -> list[str]:
    """The LLVM features to turn off so that ``target`` (with its own ``mattr``) uses no vector
    extension (AVX, AVX-512, AMX) outside ``flags``, the CPU flags Linux reports.

    LLVM names the CPU by its family and model; a virtual machine can withhold extensions that
    model has (a Zen 4 guest without AVX-512), and a program using them dies of SIGILL. Turning
    off a root (``avx512f``) turns off what depends on it, so the list stays short. Empty where
    ``flags`` is None (no ``/proc/cpuinfo`` to read) or nothing is withheld.
    """
    if flags is None:
        return []
    present = {_flag_name(flag) for flag in flags}
    disabled: list[str] = []
    for _ in range(64):  # each pass turns one more feature off; a CPU has far fewer
        own = list(target.get("mattr", []))
        features = codegen.llvm_get_cpu_features(
            to_tvm_target({**target, "mattr": own + [f"-{name}" for name in disabled]})
        )
        missing = sorted(
            str(name)
            for name in features
            if str(name).startswith(_VECTOR_EXTENSIONS) and _flag_name(str(name)) not in present
        )
        if not missing:
            break
        disabled.append(min(missing, key=len))  # the root of its family: avx512f, amx-tile, ...
    return disabled


def _flag_name(feature: str) -> str:
    """A feature as LLVM (``amx-tile``, ``sse4.1``) and Linux (``amx_tile``, ``sse4_1``) spell it,
    in one spelling."""
    return feature.replace("-", "").replace("_", "").replace(".", "")


def parse_target(text: str | None) -> dict:
    """A target dict from what the user typed: nothing, a word, or a JSON object.

    ``None``, ``""``, ``"llvm"`` and ``"host"`` mean this machine's CPU; ``"cuda"`` the local GPU.

    Raises:
        UserError: an unknown word, malformed JSON, a target TVM refuses, or no CUDA GPU.
    """
    word = (text or "").strip()
    if word.lower() in _HOST_WORDS:
        return host_target()
    if word.lower() == "cuda":
        return _cuda_target()
    if not word.startswith("{"):
        raise UserError(f"unknown target {word!r}; use {_ACCEPTED}")
    try:
        target = json.loads(word)
    except json.JSONDecodeError as err:
        raise UserError(f"target is not valid JSON: {err}") from None
    if not isinstance(target, dict):
        raise UserError(f"target must be a JSON object; use {_ACCEPTED}")
    check_client_target(target)
    _check_llvm_cpu(to_tvm_target(target))
    return target


def check_client_target(target: dict, *, host: bool = True) -> None:
    """Refuse target JSON from outside that sets an attribute not in `CLIENT_TARGET_ATTRIBUTES`,
    names (a CPU, a feature, a key) with anything but letters, digits and ``_.+-``, a tag, or a
    ``host`` that is not such an object itself (``host`` False: a host's own host).

    Raises:
        UserError: the first attribute refused, in one line.
    """
    for name, value in target.items():
        if name not in CLIENT_TARGET_ATTRIBUTES or (name == "host" and not host):
            raise UserError(
                f"invalid target: {name!r} is not an attribute autosched takes from a client; "
                f"it takes {', '.join(sorted(CLIENT_TARGET_ATTRIBUTES))}"
            )
        if name == "host":
            if not isinstance(value, dict):
                raise UserError("invalid target: a host must be a target JSON object")
            check_client_target(value, host=False)
        elif name == "tag":
            if value != "":
                raise UserError("invalid target: a tag names a target of TVM's; give attributes")
        else:
            for word in value if isinstance(value, list) else [value]:
                if isinstance(word, str) and not _PLAIN_WORD.fullmatch(word):
                    raise UserError(f"invalid target: {name} may not be {word[:40]!r}")


def to_tvm_target(target: dict) -> tvm.target.Target:
    """The TVM ``Target`` of a target dict.

    Raises:
        UserError: TVM refuses the dict (unknown kind, unknown or ill-typed attribute).
    """
    try:
        return tvm.target.Target(target)
    except Exception as err:  # TVM raises ValueError, TypeError or its own errors
        message = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
        raise UserError(f"invalid target: {message}") from None


def canonical_target(target: dict) -> dict:
    """The complete form TVM gives the target, as plain JSON data with sorted keys.

    Equivalent dicts (defaults spelled out or left implicit, keys in any order) give equal results,
    and the result is its own canonical form.
    """
    return _plain(to_tvm_target(target).export())


def target_key(target: dict) -> str:
    """A short hash of the canonical target: the same on every machine for the same target."""
    text = json.dumps(canonical_target(target), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def target_kind(target: dict) -> str:
    """The kind of the target, e.g. ``"llvm"`` or ``"cuda"``."""
    return str(to_tvm_target(target).kind.name)


def thread_env(target: dict) -> dict[str, str]:
    """The environment of a process that times programs of ``target``: on a CPU target, TVM's
    thread pool as wide as the target's cores. Left alone, TVM takes half the logical CPUs (it
    assumes two hyperthreads a core), one thread on a 2-vCPU machine whose vCPUs are two cores;
    the pool reads the variable once, as it starts, so it must be set before the process runs
    a parallel program."""
    cores = target.get("num-cores")
    if target.get("kind") != "llvm" or not isinstance(cores, int) or cores < 1:
        return {}
    return {"TVM_NUM_THREADS": str(cores)}


def target_family(target: dict) -> str:
    """The family of targets that share one cost model: the kind and the processor it names.

    ``llvm:znver5``, ``llvm:generic`` (no ``mcpu``), ``cuda:sm_90``. Core counts and limits do
    not split a family: which schedules are fast depends mostly on the microarchitecture. Reads
    the dict alone, so it also serves targets stored in a log.
    """
    kind = str(target.get("kind", "unknown"))
    processor = target.get("arch") if kind == "cuda" else target.get("mcpu")
    return f"{kind}:{processor or 'generic'}"


def device_fingerprint(target: dict) -> dict:
    """Where a measurement on ``target`` runs, for its provenance.

    Always ``kind``, ``hostname``, ``platform``, ``tvm_version`` and ``llvm_version`` (LLVM's
    major version, None without LLVM); for CPU targets also
    ``cpu_model``, ``logical_cores`` and ``physical_cores``; for CUDA ``gpu_name``,
    ``compute_version`` and ``driver_version``.

    Raises:
        UserError: a CUDA target on a machine without a CUDA GPU.
    """
    kind = target_kind(target)
    fingerprint: dict[str, object] = {
        "kind": kind,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "tvm_version": tvm.__version__,
        "llvm_version": codegen.llvm_version_major(allow_none=True),
    }
    if kind == "cuda":
        device = _cuda_device()
        fingerprint["gpu_name"] = device.device_name
        fingerprint["compute_version"] = device.compute_version
        fingerprint["driver_version"] = device.driver_version
    else:
        fingerprint["cpu_model"] = _cpu_model()
        fingerprint["logical_cores"] = psutil.cpu_count(logical=True) or os.cpu_count() or 1
        fingerprint["physical_cores"] = _physical_cores()
    return fingerprint


def _check_llvm_cpu(target: tvm.target.Target) -> None:
    """TVM takes any ``mcpu``; LLVM would only warn, at every build, of one it does not know."""
    config = target.export()
    mcpu = config.get("mcpu")
    mtriple = config.get("mtriple") or codegen.llvm_get_system_triple()
    if target.kind.name == "llvm" and mcpu and not codegen.llvm_is_valid_cpu(mcpu, mtriple):
        raise UserError(f"invalid target: LLVM knows no CPU {mcpu!r} for {mtriple}")


def _cuda_device() -> tvm.runtime.Device:
    device = tvm.cuda(0)
    if not device.exist:
        raise UserError("no CUDA GPU found")
    return device


def _cuda_target() -> dict:
    """The local GPU with the limits MetaSchedule checks kernels against (as TVM detects them)."""
    device = _cuda_device()
    return {
        "kind": "cuda",
        "arch": "sm_" + device.compute_version.replace(".", ""),
        "max_shared_memory_per_block": device.max_shared_memory_per_block,
        "max_threads_per_block": device.max_threads_per_block,
        "thread_warp_size": device.warp_size,
    }


def _physical_cores() -> int:
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def _cpu_model() -> str:
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return platform.processor() or "unknown"


def _plain(value: Any) -> Any:
    """TVM containers as JSON data: maps as dicts with sorted keys, arrays as lists."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    return [_plain(item) for item in value]
