"""What API requests name, made concrete: workloads to build, targets to tune for or look up, and
the best schedule of a workload on a target.

Bad input raises UserError (a 422); what the log lacks raises NotFound (404), and a name that
means several things, or none that live workers run, Conflict (409).
"""

from __future__ import annotations

import json
import re
from typing import Any

from autosched.admission import admit_program, program_json
from autosched.errors import Conflict, NotFound, UserError
from autosched.exports.kernels import best_schedule as nearest_best
from autosched.log import TuningLog
from autosched.log.leases import LeaseQueue
from autosched.protocol import BestPublic, RecordPublic, TargetPublic, WorkloadIn, WorkloadPublic
from autosched.records import TargetInfo, WorkloadInfo
from autosched.target import parse_target, target_key, to_tvm_target
from autosched.workload import Workload, resolve_workload, workload_from_ir_json
from autosched.workloads import get_workload

_TARGET_KEY = re.compile(r"[0-9a-f]{32}")


def build_workload(spec: WorkloadIn, *, max_bytes: int) -> Workload:
    """The workload a job submission describes, admitted as every program from outside is (see
    ``autosched.admission``), its buffers within ``max_bytes``.

    Raises:
        UserError: an unknown workload or parameter, a bad value, or a program not admitted.
    """
    if spec.ir_json is not None:
        return workload_from_ir_json(spec.ir_json, name=spec.name or "custom", max_bytes=max_bytes)
    assert spec.name is not None  # WorkloadIn checks that one of them is given
    workload = get_workload(spec.name, spec.params)
    admit_program(program_json(workload.func), max_bytes=max_bytes)
    return workload


def job_target(leases: LeaseQueue, target: str | dict[str, Any]) -> dict[str, Any]:
    """The exact target a job is tuned for: a full target as given, or that of a kind's workers.

    Raises:
        UserError: an unknown kind, or a target TVM refuses.
        Conflict: no live worker of the kind runs, or its workers run several different targets.
    """
    if isinstance(target, dict):
        return parse_target(json.dumps(target))
    if target.lstrip().startswith("{"):
        return parse_target(target)
    kind = _kind(target)
    live = leases.worker_targets(kind)
    if not live:
        raise Conflict(
            f"no live {kind} worker to take the exact target from; start one, "
            "or give the full target JSON"
        )
    if len(live) > 1:
        names = ", ".join(_describe(t) for t in live)
        raise Conflict(
            f"live {kind} workers run {len(live)} different targets ({names}); "
            "give the full target JSON of one"
        )
    return live[0]


def stored_workload(log: TuningLog, key: str) -> WorkloadInfo:
    """The workload stored under ``key``; NotFound if there is none."""
    workload = log.find_workload(key)
    if workload is None:
        raise NotFound(f"no workload {key} in the tuning log")
    return workload


def tuned_target(
    log: TuningLog, leases: LeaseQueue, workload: WorkloadInfo, text: str
) -> TargetInfo:
    """The stored target that ``text`` names for ``workload``: a target key, target JSON, or a kind.

    A kind names the target of that kind the workload was tuned for; if there are several, the
    one the live workers of that kind run.

    Raises:
        UserError: malformed target JSON, or an unknown kind.
        NotFound: no such target is stored. Conflict: a kind names several.
    """
    text = text.strip()
    if text.startswith("{"):
        key = target_key(parse_target(text))
    elif _TARGET_KEY.fullmatch(text):
        key = text
    else:
        kind = _kind(text)
        tuned = [
            row.target_key
            for row in log.summary()
            if row.workload_key == workload.key and row.target_json.get("kind") == kind
        ]
        if len(tuned) > 1:
            live = {target_key(t) for t in leases.worker_targets(kind)}
            tuned = [k for k in tuned if k in live] or tuned
        if not tuned:
            raise NotFound(f"{workload.name} was not tuned for any {kind} target")
        if len(tuned) > 1:
            raise Conflict(
                f"{workload.name} was tuned for {len(tuned)} {kind} targets; "
                f"name one by its key: {', '.join(tuned)}"
            )
        key = tuned[0]
    target = log.find_target(key)
    if target is None:
        raise NotFound(f"no target {key} in the tuning log")
    return target


def best_schedule(log: TuningLog, workload: WorkloadInfo, target: TargetInfo) -> BestPublic:
    """The best verified schedule of ``workload`` on ``target``, replayed; NotFound if none yet.

    A best record whose trace no longer replays on this TVM (one imported from another version)
    is passed over for the fastest verified record that does.
    """
    if log.best(workload.id, target.id) is None:
        raise NotFound(f"no verified schedule of {workload.name} for target {target.key} yet")
    resolved = resolve_workload(workload.ref)
    try:
        best = nearest_best(log, resolved, target.target_json)
    except UserError as error:
        raise NotFound(str(error)) from None
    return BestPublic(
        workload=WorkloadPublic.of(workload),
        target=TargetPublic.of(target),
        record=RecordPublic.of(best.record),
        tvmscript=best.schedule.mod["main"].script(),
    )


def nearest_schedule(
    log: TuningLog, leases: LeaseQueue, workload: WorkloadInfo, text: str
) -> BestPublic:
    """The best schedule of ``workload`` on the target ``text`` names, or when it has none the
    nearest hardware's (``autosched.fallback``), with the level that matched.

    ``text`` is a target key, target JSON, or a kind (the target its live workers run, else the
    one the workload was tuned for). The machines of the target's workers match at the
    ``device`` level.

    Raises:
        UserError: malformed target JSON, or an unknown kind.
        NotFound: no record at any level (or an unknown target key). Conflict: a kind names
            several targets.
    """
    text = text.strip()
    if text.startswith("{"):
        asked = parse_target(text)
    elif _TARGET_KEY.fullmatch(text):
        stored = log.find_target(text)
        if stored is None:
            raise NotFound(f"no target {text} in the tuning log")
        asked = stored.target_json
    else:
        live = leases.worker_targets(_kind(text))
        asked = live[0] if len(live) == 1 else tuned_target(log, leases, workload, text).target_json
    resolved = resolve_workload(workload.ref)
    try:
        best = nearest_best(
            log, resolved, asked, fallback=True, machines=log.machines(target_key(asked))
        )
    except UserError as error:
        raise NotFound(str(error)) from None
    matched = log.find_target(target_key(best.tuned_for or best.target))
    assert matched is not None  # the record came from the log
    return BestPublic(
        workload=WorkloadPublic.of(workload),
        target=TargetPublic.of(matched),
        record=RecordPublic.of(best.record),
        tvmscript=best.schedule.mod["main"].script(),
        level=best.level.value,
    )


def _kind(word: str) -> str:
    """A target kind TVM knows, e.g. ``llvm`` or ``cuda``; UserError otherwise."""
    kind = word.strip().lower()
    to_tvm_target({"kind": kind})
    return kind


def _describe(target: dict[str, Any]) -> str:
    return str(target.get("mcpu") or target.get("arch") or target_key(target))
