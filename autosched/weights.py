"""Weights transformed ahead: a workload's stages that only transform a constant weight (the kernel
transform of a Winograd convolution, say), taken out of the program that is timed, as a deployed
model computes them once, when it loads its weights.

A workload marks such a stage with the block annotation `WEIGHT_TRANSFORM`. The stages move out of
the program only where the weight is among its layout-free buffers (the user said it is constant,
``-p weights=...``); the timed program then takes the transformed weight in place of the weight.
The program that is checked and exported still takes the weight as the workload does.
"""

from __future__ import annotations

from tvm.ir import IRModule
from tvm.s_tir import SBlock
from tvm.tirx import Stmt, Var

from autosched.schedule import loop_nests, with_nests

WEIGHT_TRANSFORM = "autosched.weight_transform"
"""The block annotation (value 1) of a stage that reads only constant weights or other such
stages' results: with its weight declared constant, it runs ahead, outside the timed program."""


def transform_weights_ahead(mod: IRModule) -> IRModule:
    """``mod`` without the stages marked `WEIGHT_TRANSFORM` whose weights are layout-free: ``main``
    takes their result, which the rest of the program reads, in place of the weight. Unchanged where
    no stage is marked or a marked stage reads a parameter that is not layout-free (not constant).

    Raises:
        ValueError: a marked stage shares its loop nest with unmarked blocks or reads another
            stage's result, or the marked stages do not turn one weight into one buffer that the
            rest of the program reads (and it reads no weight they read).
    """
    func = mod["main"]
    if "layout_free_buffers" not in (func.attrs or {}):
        return mod  # no constant weight: nothing runs ahead (and no schedule is made to find out)
    stages = loop_nests(mod)
    ahead = {i for i, (_, blocks) in enumerate(stages) if any(map(_marked, blocks))}
    if not ahead:
        return mod
    if not all(_marked(block) for i in ahead for block in stages[i][1]):
        raise ValueError("a weight transform shares its loops with other stages")
    written = _buffers(stages, ahead, "writes")
    read = _buffers(stages, ahead, "reads")
    weights = {param for param in func.params if param in read}
    free = {func.params[int(i)] for i in func.attrs.get("layout_free_buffers", [])}
    if not weights <= free:
        return mod
    if not read <= written | weights:
        raise ValueError("a weight transform reads more than weights and other weight transforms")
    rest = set(range(len(stages))) - ahead
    read_after = _buffers(stages, rest, "reads")
    consumed = written & read_after
    if len(weights) != 1 or len(consumed) != 1 or weights & read_after:
        raise ValueError(
            "the weight transforms must turn one weight into one buffer the program reads"
        )
    (weight,), (result,) = weights, consumed
    return with_nests(
        mod,
        [nest for i, (nest, _) in enumerate(stages) if i in rest],
        [buffer for buffer in func.body.block.alloc_buffers if buffer not in written],
        [result if param.same_as(weight) else param for param in func.params],
    )


def _marked(block: SBlock) -> bool:
    return int(block.annotations.get(WEIGHT_TRANSFORM, 0)) == 1


def _buffers(stages: list[tuple[Stmt, list[SBlock]]], chosen: set[int], access: str) -> set[Var]:
    """The buffers the blocks of the ``chosen`` stages read or write (``access``)."""
    return {
        region.source for i in chosen for block in stages[i][1] for region in getattr(block, access)
    }
