"""Where the search of a workload new to a target starts: the nearest hardware's records of it
(``autosched.fallback``), else the fastest schedules of the nearest shapes of the same operator
tuned on the same target, replayed onto the new shape.

A schedule tuned for matmul 512x512x512 is a good first guess for 384x512x640: the same tiling
structure, loop order, vectorisation and parallelism, with tile sizes that fit the new extents. Its
trace is replayed onto the new workload with each sampling decision taking the valid choice nearest
to its own (``DesignSpace.follow``); a trace whose instructions do not apply is passed over.
Shapes are compared by the summed distance of their numeric parameters in log space; parameters
that are not numbers (the dtype) must be equal.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from autosched.errors import UserError
from autosched.fallback import seed_records
from autosched.log import TuningLog
from autosched.records import RecordView
from autosched.schedule import apply_trace, program_hash, trace_to_json
from autosched.search.space import DesignSpace, design_space
from autosched.target import target_key
from autosched.workload import Workload
from autosched.workloads import get_workload

NEIGHBOURS = 3  # nearest tuned shapes a new shape starts from
RECORDS_PER_NEIGHBOUR = 6  # the fastest records of each that are replayed
SEED_RECORDS = 16


@dataclass(frozen=True)
class NeighbourSeeds:
    """Records replayed onto the new shape (``seeds``: their traces and program hashes are the new
    shape's, their timings the neighbour's), where they came from, in words, and the records that
    could not be replayed, each with the reason (``skipped``)."""

    seeds: list[RecordView]
    source: str | None
    skipped: list[str] = field(default_factory=list)


def shape_distance(a: Mapping[str, object], b: Mapping[str, object]) -> float | None:
    """How far apart two parameter sets of one operator are: the sum of |log(x/y)| over numeric
    parameters; None when they differ in anything else (names, dtype) or are not positive."""
    if a.keys() != b.keys():
        return None
    distance = 0.0
    for name, value in a.items():
        other = b[name]
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if not numeric or not isinstance(other, int | float) or isinstance(other, bool):
            if value != other:
                return None
            continue
        if value <= 0 or other <= 0:
            if value != other:
                return None
            continue
        distance += abs(math.log(value / other))
    return distance


def neighbour_seeds(
    log: TuningLog, workload: Workload, target: dict, space: Callable[[], DesignSpace]
) -> NeighbourSeeds:
    """The fastest error-free records of the ``NEIGHBOURS`` nearest tuned shapes of
    ``workload``'s operator on ``target``, replayed onto ``workload``; at most ``SEED_RECORDS``,
    each program once. ``space`` builds the workload's design space (only when some neighbour
    exists). A seed is measured anew and checked like any candidate before it can become best."""
    wanted = target_key(target)
    near = sorted(
        (distance, row.workload_key, row)
        for row in log.summary()
        if row.workload_name == workload.name
        and row.target_key == wanted
        and row.workload_key != workload.key
        and row.best_latency_secs is not None
        and (distance := shape_distance(workload.params, row.workload_params)) is not None
    )[:NEIGHBOURS]
    if not near:
        return NeighbourSeeds([], None)
    design = space()
    seeds: dict[str, RecordView] = {}
    shapes: list[str] = []
    skipped: list[str] = []
    for _distance, key, row in near:
        try:
            neighbour = get_workload(row.workload_name, dict(row.workload_params))
        except UserError:
            continue
        stored = log.find_workload(key)
        found_target = log.find_target(wanted)
        if neighbour.key != key or stored is None or found_target is None:
            continue  # a user's program of the same name, or another TVM's key: not ours to rebuild
        records = log.records(
            stored.id, found_target.id, ok_only=True, limit=4 * RECORDS_PER_NEIGHBOUR
        )
        shape = " ".join(f"{k}={v}" for k, v in row.workload_params.items() if k != "dtype")
        taken = 0
        for record in records:
            if taken == RECORDS_PER_NEIGHBOUR or len(seeds) == SEED_RECORDS:
                break
            followed = _follow(design, neighbour, record)
            if isinstance(followed, str):
                skipped.append(f"candidate {record.candidate_id} of {shape}: {followed}")
            elif followed.program_hash not in seeds:
                seeds[followed.program_hash] = followed
                taken += 1
        if taken:
            shapes.append(shape)
    source = f"{len(seeds)} schedules of {'; '.join(shapes)}" if seeds else None
    return NeighbourSeeds(list(seeds.values()), source, skipped)


def _follow(design: DesignSpace, neighbour: Workload, record: RecordView) -> RecordView | str:
    """``record``, tuned for ``neighbour``, replayed onto the design space's workload; else why
    it cannot be."""
    try:
        trace = apply_trace(neighbour.mod, record.trace_json).trace
    except Exception as error:  # TVM raises its own error types when a trace does not apply
        return f"its trace no longer replays on its own shape ({_first_line(error)})"
    try:
        sch = design.follow(trace)
    except Exception as error:
        return f"its decisions do not fit this shape ({_first_line(error)})"
    if sch is None:
        return "its decisions do not fit this shape"
    return replace(
        record,
        trace_json=trace_to_json(sch.trace),
        program_hash=program_hash(sch.mod),
        verified=False,
        job_id=None,
    )


def starting_records(
    log: TuningLog,
    workload: Workload,
    workload_id: int,
    target: dict[str, Any],
    machines: Sequence[dict[str, Any]],
) -> tuple[str | None, list[RecordView]]:
    """What a search of a workload the log never measured on ``target`` starts from, and where
    that comes from in words: the nearest hardware's records of the workload
    (``autosched.fallback.seed_records``; ``machines`` match at the device level), else the
    nearest tuned shapes' of its operator on this target (``neighbour_seeds``)."""
    choice, seeds = seed_records(log, workload, workload_id, target, machines)
    if choice is not None and seeds:
        tuned_for = choice.target.target_json
        processor = tuned_for.get("mcpu") or tuned_for.get("arch") or choice.target.key
        return f"{len(seeds)} records of {processor} ({choice.level.value} match)", seeds
    found = neighbour_seeds(log, workload, target, lambda: design_space(workload, target, seed=0))
    return found.source, found.seeds


def _first_line(error: Exception) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), "unknown")
