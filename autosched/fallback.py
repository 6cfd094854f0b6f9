"""Nearest-hardware fallback: when the tuning log has no record of a workload on the exact target,
the best record of the closest target it has, and which level matched.

Levels, nearest first (``FallbackLevel``):

- ``exact``: the target itself.
- ``device``: a record measured on the same machine (same host name, processor or GPU model and
  core count, whatever the versions), for another target of the same kind.
- ``processor``: a record for the same processor model: the same ``mcpu`` (CUDA: ``arch``), or
  measured on a machine with the same CPU (GPU) model name.
- ``isa``: a record for the same instruction-set family, whose trace uses nothing this target
  lacks. For LLVM targets: the same architecture (the triple's first part), every ISA feature
  that a tensor intrinsic named in the trace needs (``dot_16x4_vnni`` needs ``avx512vnni``, ...)
  is one of this target's LLVM CPU features, and the vector width the trace relies on fits this
  target's. The width a trace relies on is its widest ``T.vectorized`` loop times the widest
  element type of the workload's buffers, capped at the vector width of the target it was tuned
  for: a trace tuned for ``znver4`` (512-bit AVX-512) that vectorizes 16 float32 lanes relies on
  512 bits and is not taken for ``znver3`` (256-bit AVX2), while one that vectorizes 8 lanes is.
  Vector widths come from the LLVM features: ``avx512f`` 512 bits, ``avx`` 256, ``sse``/``neon``
  128. For CUDA targets: the same major compute capability, at most this target's minor one.

Within a level the fastest record wins (``autosched.exports.kernels.best_schedule`` can instead
measure the best records of that level here and keep the fastest). Records from another TVM
version are replayed onto this one before they are offered: a trace that no longer applies is
reported and passed over.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

import tvm
from tvm.target import codegen

from autosched.records import RecordView, TargetInfo, TunedRecord
from autosched.target import target_key, to_tvm_target
from autosched.workload import Workload

if TYPE_CHECKING:
    from autosched.log import TuningLog


class FallbackLevel(str, Enum):
    """How near the target of a record is to the one asked for."""

    EXACT = "exact"
    DEVICE = "device"
    PROCESSOR = "processor"
    ISA = "isa"


LEVELS: tuple[FallbackLevel, ...] = tuple(FallbackLevel)

# ISA features a tensor intrinsic needs, by a word of its name (LLVM's feature names).
_INTRINSIC_FEATURES: dict[str, frozenset[str]] = {
    "avx512": frozenset({"avx512f", "avx512bw"}),
    "vnni": frozenset({"avx512vnni"}),
    "amx": frozenset({"amx-tile", "amx-int8"}),
    "sdot": frozenset({"dotprod"}),
    "udot": frozenset({"dotprod"}),
    "hdot": frozenset({"dotprod"}),
    "neon": frozenset({"neon"}),
    "sve": frozenset({"sve"}),
    "sme": frozenset({"sme"}),
}
# The widest vector register each feature gives, in bits.
_VECTOR_BITS = (("avx512f", 512), ("avx", 256), ("sse", 128), ("neon", 128))
_VECTORIZED = re.compile(r"T\.vectorized\((?:[^,()]+,\s*)?(\d+)\)")
_X86 = {"x86_64", "amd64", "i386", "i686"}
_AUTO_TENSORIZE = "meta_schedule.auto_tensorize"


@dataclass(frozen=True)
class Fallback:
    """A record offered for a target: the level it matched at and the target it was tuned for."""

    level: FallbackLevel
    target: TargetInfo
    record: RecordView


@dataclass
class FallbackSearch:
    """The records of the nearest level that has any, fastest first, and the traces passed over
    because they no longer replay on this TVM (``skipped``: one line each)."""

    found: list[Fallback] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def machine_identity(fingerprint: dict[str, Any] | None) -> tuple[str, ...] | None:
    """What makes a device fingerprint the same machine, whatever the versions it ran."""
    if not fingerprint:
        return None
    processor = fingerprint.get("gpu_name") or fingerprint.get("cpu_model")
    if processor is None:
        return None
    cores = fingerprint.get("physical_cores") or fingerprint.get("compute_version")
    return (str(fingerprint.get("hostname")), str(processor), str(cores))


def nearest(
    workload: Workload,
    target: dict[str, Any],
    tuned: Sequence[TunedRecord],
    machines: Sequence[dict[str, Any]],
    replays: Callable[[RecordView], str | None],
) -> FallbackSearch:
    """The records of ``tuned`` (best records of ``workload``, one per target) at the nearest
    level to ``target`` that has any, fastest first.

    Args:
        workload: the workload the records are of.
        target: the target asked for.
        tuned: the workload's best records on every target the log has.
        machines: fingerprints of the machines that run ``target`` here (this one, or the
            service's workers of it): their records match at the ``device`` level.
        replays: None if a record's trace replays onto this TVM, else why not (one line).
    """
    wanted = target_key(target)
    identities = {machine_identity(m) for m in machines} - {None}
    models = {m.get("gpu_name") or m.get("cpu_model") for m in machines} - {None}
    search = FallbackSearch()
    problems: dict[str, str | None] = {}
    for level in LEVELS:
        for item in sorted(tuned, key=_latency):
            if not _matches(level, target, wanted, item, identities, models):
                continue
            if item.target.key not in problems:
                problems[item.target.key] = replays(item.record)
                if problems[item.target.key] is not None:
                    search.skipped.append(f"{item.target.key}: {problems[item.target.key]}")
            if problems[item.target.key] is not None:
                continue
            if level is FallbackLevel.ISA and not _vector_fits(
                workload, item.record.trace_json, item.target.target_json, target
            ):
                continue
            search.found.append(Fallback(level, item.target, item.record))
        if search.found:
            return search
    return search


def _latency(item: TunedRecord) -> float:
    median = item.record.median_secs
    return float("inf") if median is None else median


def _matches(
    level: FallbackLevel,
    target: dict[str, Any],
    wanted: str,
    item: TunedRecord,
    identities: set[tuple[str, ...] | None],
    models: set[Any],
) -> bool:
    """Whether a record matches at ``level``, the ``isa`` level's vector width apart (that needs
    the trace replayed)."""
    theirs = item.target.target_json
    if level is FallbackLevel.EXACT:
        return item.target.key == wanted
    if item.target.key == wanted or theirs.get("kind") != target.get("kind"):
        return False
    if level is FallbackLevel.DEVICE:
        return machine_identity(item.device) in identities
    if level is FallbackLevel.PROCESSOR:
        device = item.device or {}
        model = device.get("gpu_name") or device.get("cpu_model")
        same_processor = _processor(target) is not None and _processor(theirs) == _processor(target)
        return same_processor or (model is not None and model in models)
    return _features_fit(item.record.trace_json, theirs, target)


def _processor(target: dict[str, Any]) -> str | None:
    value = target.get("arch") if target.get("kind") == "cuda" else target.get("mcpu")
    return None if value is None else str(value)


def isa_fits(workload: Workload, trace_json: str, tuned_for: dict[str, Any], target: dict) -> bool:
    """Whether a trace of ``workload`` tuned for ``tuned_for`` uses nothing ``target`` lacks (see
    the module's description of the ``isa`` level)."""
    return _features_fit(trace_json, tuned_for, target) and _vector_fits(
        workload, trace_json, tuned_for, target
    )


def _features_fit(trace_json: str, tuned_for: dict[str, Any], target: dict[str, Any]) -> bool:
    kind = target.get("kind")
    if kind == "cuda":
        return _cuda_fits(tuned_for, target)
    if kind != "llvm" or _architecture(tuned_for) != _architecture(target):
        return False
    return intrinsic_features(trace_json) <= llvm_features(target)


def _vector_fits(
    workload: Workload, trace_json: str, tuned_for: dict[str, Any], target: dict[str, Any]
) -> bool:
    if target.get("kind") != "llvm":
        return True
    relied_on = min(trace_vector_bits(workload, trace_json), vector_bits(llvm_features(tuned_for)))
    return relied_on <= vector_bits(llvm_features(target))


def llvm_features(target: dict[str, Any]) -> frozenset[str]:
    """The LLVM CPU features of an LLVM target (its ``mtriple``, ``mcpu`` and ``mattr``)."""
    return frozenset(codegen.llvm_get_cpu_features(to_tvm_target(target)))


def vector_bits(features: frozenset[str]) -> int:
    """The widest vector register the features give, in bits (0: none known)."""
    return next((bits for feature, bits in _VECTOR_BITS if feature in features), 0)


def intrinsic_features(trace_json: str) -> frozenset[str]:
    """The ISA features the tensor intrinsics a trace tensorizes with need: the names in its
    ``Tensorize`` instructions and ``meta_schedule.auto_tensorize`` annotations."""
    document = json.loads(trace_json)
    instructions = document[0] if isinstance(document, list) and document else []
    needed: set[str] = set()
    for instruction in instructions if isinstance(instructions, list) else []:
        texts = _strings(instruction)
        kind = texts[0] if texts else ""
        if kind != "Tensorize" and _AUTO_TENSORIZE not in texts:
            continue
        for text in texts:
            lowered = text.lower()
            for word, features in _INTRINSIC_FEATURES.items():
                if word in lowered:
                    needed |= features
    return frozenset(needed)


def trace_vector_bits(workload: Workload, trace_json: str) -> int:
    """The widest vectorized loop of the replayed trace times the widest element type of the
    workload's buffers, in bits (0: nothing vectorized)."""
    from autosched.schedule import apply_trace

    script = apply_trace(workload.mod, trace_json).mod.script()
    lanes = max((int(extent) for extent in _VECTORIZED.findall(script)), default=0)
    element = max((tvm.DataType(dtype).bits for _shape, dtype in workload.args), default=0)
    return lanes * element


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _architecture(target: dict[str, Any]) -> str:
    triple = str(target.get("mtriple") or codegen.llvm_get_system_triple())
    arch = triple.split("-")[0].lower()
    return "x86_64" if arch in _X86 else arch


def _cuda_fits(tuned_for: dict[str, Any], target: dict[str, Any]) -> bool:
    theirs, ours = _sm(tuned_for), _sm(target)
    return theirs is not None and ours is not None and theirs[0] == ours[0] and theirs <= ours


def _sm(target: dict[str, Any]) -> tuple[int, int] | None:
    match = re.fullmatch(r"sm_(\d+?)(\d)a?", str(target.get("arch", "")))
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def replay_problem(
    workload: Workload, target: dict[str, Any]
) -> Callable[[RecordView], str | None]:
    """``replays`` for `nearest`: None when a record's trace replays onto ``workload`` with this
    TVM, else TVM's reason in one line."""
    from autosched.intrinsics import use_tensor_intrinsics
    from autosched.schedule import apply_trace

    use_tensor_intrinsics(target)

    def problem(record: RecordView) -> str | None:
        try:
            apply_trace(workload.mod, record.trace_json)
        except Exception as error:  # TVM raises its own error types
            reason = " ".join(str(error).split())[:200]
            return f"its trace no longer replays on TVM {tvm.__version__}: {reason}"
        return None

    return problem


# Records of the nearest target that seed a job on a target the log never measured.
SEED_RECORDS = 16


def seed_records(
    log: TuningLog,
    workload: Workload,
    workload_id: int,
    target: dict[str, Any],
    machines: Sequence[dict[str, Any]],
) -> tuple[Fallback | None, list[RecordView]]:
    """What a job on ``target``, for which the log holds no record of the workload, starts its
    search from: the nearest other target's (`nearest`) fastest verified records that replay on
    this TVM, at most `SEED_RECORDS`, with the match they come from (None: no match, no seeds)."""
    wanted = target_key(target)
    tuned = [item for item in log.tuned_records(workload_id) if item.target.key != wanted]
    if not tuned:
        return None, []
    replays = replay_problem(workload, target)
    search = nearest(workload, target, tuned, machines, replays)
    if not search.found:
        return None, []
    choice = search.found[0]
    records = [
        record
        for record in log.records(
            workload_id, choice.target.id, ok_only=True, limit=4 * SEED_RECORDS
        )
        if record.verified and replays(record) is None
    ]
    return choice, records[:SEED_RECORDS]
