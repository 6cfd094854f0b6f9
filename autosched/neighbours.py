"""Where the search of a workload new to a target starts: the nearest hardware's records of it
(``autosched.fallback``), else the fastest schedules of the nearest shapes of the same operator
tuned on the same target, replayed onto the new shape.

A schedule tuned for matmul 512x512x512 is a good first guess for 384x512x640: the same tiling
structure, loop order, vectorisation and parallelism, with tile sizes that fit the new extents. Its
trace is replayed onto the new workload with each sampling decision taking the valid choice nearest
to its own (``DesignSpace.follow``); a trace whose instructions do not apply is passed over. Where
a loop is longer or shorter than in the neighbour, its outermost tile factor takes the difference:
the same inner tiles, more or fewer of them (another factor taking it found nothing faster:
``benchmarks/neighbour_growths.py``).
Shapes are compared by the summed distance of their numeric parameters in log space; parameters
that are not numbers (the dtype) must be equal.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

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

Item = TypeVar("Item")


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


@dataclass(frozen=True)
class TunedNeighbour:
    """A tuned shape of the operator: its workload, its parameters in words (``shape``) and its
    fastest error-free records on the target, fastest first."""

    workload: Workload
    shape: str
    records: list[RecordView]


def nearest_tuned(log: TuningLog, workload: Workload, target: dict) -> list[TunedNeighbour]:
    """The ``NEIGHBOURS`` nearest shapes of ``workload``'s operator tuned on ``target``, nearest
    first, each with its ``4 * RECORDS_PER_NEIGHBOUR`` fastest records; a user's program of the
    same name, or one another TVM keyed differently, is left out (it cannot be rebuilt here)."""
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
    found_target = log.find_target(wanted)
    neighbours = []
    for _distance, key, row in near:
        try:
            neighbour = get_workload(row.workload_name, dict(row.workload_params))
        except UserError:
            continue
        stored = log.find_workload(key)
        if neighbour.key != key or stored is None or found_target is None:
            continue
        records = log.records(
            stored.id, found_target.id, ok_only=True, limit=4 * RECORDS_PER_NEIGHBOUR
        )
        shape = " ".join(f"{k}={v}" for k, v in row.workload_params.items() if k != "dtype")
        neighbours.append(TunedNeighbour(neighbour, shape, records))
    return neighbours


def neighbour_seeds(
    log: TuningLog, workload: Workload, target: dict, space: Callable[[], DesignSpace]
) -> NeighbourSeeds:
    """The fastest records of the nearest tuned shapes (`nearest_tuned`), the first
    ``RECORDS_PER_NEIGHBOUR`` of each that replay, followed onto ``workload``; at most
    ``SEED_RECORDS``, each program once, taken from the neighbours in turn, nearest first.
    ``space`` builds the workload's design space (only when some neighbour exists). A seed is
    measured anew and checked like any candidate before it can become best."""
    neighbours = nearest_tuned(log, workload, target)
    if not neighbours:
        return NeighbourSeeds([], None)
    design = space()
    followed: list[list[RecordView]] = []
    shapes: list[str] = []
    skipped: list[str] = []
    for neighbour in neighbours:
        programs: dict[str, RecordView] = {}
        replayed = 0
        for record in neighbour.records:
            if replayed == RECORDS_PER_NEIGHBOUR or len(programs) >= SEED_RECORDS:
                break
            variants = follow_record(design, neighbour.workload, record)
            if isinstance(variants, str):
                skipped.append(f"candidate {record.candidate_id} of {neighbour.shape}: {variants}")
                continue
            replayed += 1
            for variant in variants.values():
                programs.setdefault(variant.program_hash, variant)
        if programs:
            followed.append(list(programs.values()))
            shapes.append(neighbour.shape)
    seeds: dict[str, RecordView] = {}
    for variant in in_turn(followed):
        if len(seeds) == SEED_RECORDS:
            break
        seeds.setdefault(variant.program_hash, variant)
    source = f"{len(seeds)} schedules of {'; '.join(shapes)}" if seeds else None
    return NeighbourSeeds(list(seeds.values()), source, skipped)


def follow_record(
    design: DesignSpace, neighbour: Workload, record: RecordView, growths: Sequence[int] = (0,)
) -> dict[int, RecordView] | str:
    """``record``, tuned for ``neighbour``, replayed onto the design space's workload with a loop
    of another extent growing at each of ``growths`` (tile factors from the outermost,
    `DesignSpace.follow`) that fits, by growth; else why it cannot be."""
    try:
        trace = apply_trace(neighbour.mod, record.trace_json).trace
    except Exception as error:  # TVM raises its own error types when a trace does not apply
        return f"its trace no longer replays on its own shape ({_first_line(error)})"
    variants = {}
    reason = "its decisions do not fit this shape"
    for grow_at in growths:
        try:
            sch = design.follow(trace, grow_at)
        except Exception as error:
            reason = f"its decisions do not fit this shape ({_first_line(error)})"
            continue
        if sch is not None:
            variants[grow_at] = replace(
                record,
                trace_json=trace_to_json(sch.trace),
                program_hash=program_hash(sch.mod),
                verified=False,
                job_id=None,
            )
    return variants or reason


def in_turn(lists: Sequence[Sequence[Item]]) -> Iterator[Item]:
    """The first of each list, then the second of each, and so on."""
    for index in range(max(map(len, lists), default=0)):
        yield from (items[index] for items in lists if index < len(items))


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
