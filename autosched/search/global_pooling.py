"""A CPU schedule rule for global pooling in channels-last tensors: a sketch MetaSchedule lacks.

A global pooling (a squeeze-and-excite mean, a classifier head's average pool) reduces every
pixel of an NHWC tensor to one value a channel. TVM writes its loop nest with the channels
outside the pixels, so each channel's reduction strides across the whole tensor; MetaSchedule's
sketches (the plain nest, `rfactor` of the pixels) all keep that order, and no tile size or
compute location a search samples reads the tensor in its own order.

`GlobalPooling` adds one sketch beside them for such a reduction: the pixels split into parts
(`rfactor`), one part a task of the thread pool, each part read in memory order with the
channels innermost and vectorized, the parts' partial results then reduced. The search samples
the number of parts and the vector's width.
"""

from __future__ import annotations

import math
from itertools import pairwise

from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule import TuneContext
from tvm.s_tir.meta_schedule.schedule_rule import PyScheduleRule, ScheduleRule
from tvm.s_tir.schedule import SBlockRV
from tvm.s_tir.stmt import SBlockRealize
from tvm.tirx import IntImm, IterVar, Var

MIN_PIXELS_A_CORE = 16
"""The fewest pixels a core reduces for the sketch to be offered: a smaller reduction (a
pooling window) finds its parallelism in the kept axes, as MetaSchedule schedules it."""

MAX_VECTOR = 64
"""The widest vector the search may pick for the channels (MetaSchedule's own bound)."""


@derived_object
class GlobalPooling(PyScheduleRule):
    """Adds, for a reduction whose innermost kept axis is innermost in every tensor it touches
    and whose other kept axes are too small to occupy the cores, the sketch this module's
    docstring describes; leaves every other block as it is."""

    def __init__(self, cores: int = 0) -> None:
        self.cores = cores

    def _initialize_with_tune_context(self, context: TuneContext) -> None:
        if not self.cores:
            cores = context.target.attrs.get("num-cores") if context.target else None
            self.cores = max(int(cores or 1), 1)

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        if not self._applies(sch.copy(), block):  # a copy: its queries stay off the trace
            return [sch]
        pooled = sch.copy()
        pooled.seed(sch.fork_seed())
        try:
            _pool(pooled, block, self._parts())
        except Exception:  # TVM refuses a primitive with its own error types
            return [sch]
        return [sch, pooled]

    def clone(self) -> ScheduleRule:
        return GlobalPooling(self.cores)

    def _parts(self) -> list[int]:
        """The numbers of parts the search picks among: one, two and four tasks a core."""
        return [self.cores * tasks for tasks in (1, 2, 4)]

    def _applies(self, sch: Schedule, block: SBlockRV) -> bool:
        extents = _pooling_extents(sch, block)
        if extents is None:
            return False
        kept, pixels = extents
        return kept < self.cores and pixels >= MIN_PIXELS_A_CORE * self.cores


def _pooling_extents(sch: Schedule, block: SBlockRV) -> tuple[int, int] | None:
    """For a pooling ``block``, the product of its kept axes but the channels, and of its
    reduced axes; None for any other block.

    A pooling here: a reduction with an init, one loop an axis in a perfect nest, its kept axes
    outside its reduced ones (as TE writes it), of constant extents, and its last kept axis (the
    channels) the last index of every tensor it reads and writes.
    """
    nest = [sch.get(loop) for loop in sch.get_loops(block)]
    if not nest or any(not outer.body.same_as(inner) for outer, inner in pairwise(nest)):
        return None
    realize = nest[-1].body
    if not isinstance(realize, SBlockRealize) or realize.block.init is None:
        return None
    axes: list[IterVar] = list(realize.block.iter_vars)
    if len(axes) != len(nest) or not all(
        isinstance(value, Var) and value.same_as(loop.loop_var)
        for value, loop in zip(realize.iter_values, nest, strict=True)
    ):
        return None
    kinds = [int(axis.iter_type) for axis in axes]
    kept = kinds.count(IterVar.DataPar)
    reduced = len(kinds) - kept
    if not (kept and reduced) or kinds != [IterVar.DataPar] * kept + [IterVar.CommReduce] * reduced:
        return None
    if not all(isinstance(loop.extent, IntImm) for loop in nest):
        return None
    channel = axes[kept - 1].var
    if not all(
        isinstance(access.region[-1].min, Var) and access.region[-1].min.same_as(channel)
        for access in (*realize.block.reads, *realize.block.writes)
    ):
        return None
    extents = [int(loop.extent) for loop in nest]
    return math.prod(extents[: kept - 1]), math.prod(extents[kept:])


def _pool(sch: Schedule, block: SBlockRV, parts: list[int]) -> None:
    """The sketch on ``block``: the pixels fused and split in a sampled number of parts, each a
    parallel task reducing its pixels into a row of partial results, channels innermost and
    vectorized by a sampled width; the block itself then sums the parts' rows."""
    loops = sch.get_loops(block)
    kept = sum(int(axis.iter_type) == IterVar.DataPar for axis in sch.get(block).iter_vars)
    pixels = sch.fuse(*loops[kept:])
    count = sch.sample_categorical(parts, [1 / len(parts)] * len(parts))
    part, pixels = sch.split(pixels, [count, None])
    partial = sch.rfactor(part, factor_axis=0)
    *outer, channels, part, pixels = sch.get_loops(partial)
    width = sch.sample_perfect_tile(channels, n=2, max_innermost_factor=MAX_VECTOR)
    channel_tiles, lanes = sch.split(channels, width)
    sch.reorder(part, *outer, pixels, channel_tiles, lanes)
    sch.parallel(part)
    sch.vectorize(lanes)
