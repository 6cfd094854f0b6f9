"""Admission of schedule traces: a trace is data that only TVM's trace replay reads, and replaying
it must not put into an admitted program what admission refuses there.

A trace is admitted when its JSON is small and shallow (checked iteratively, before TVM reads
it), every instruction is one MetaSchedule's own rules and postprocessors emit (none of the
``Unsafe*`` primitives, none that rewrites a block's buffer regions), and every annotation it
attaches is one of MetaSchedule's own, with a plain value: ``pragma_import_llvm``,
``pragma_import_c`` and every other annotation a code generator acts on are refused. Every replay
(`autosched.schedule.apply_trace`) checks first, wherever the trace came from.
"""

from __future__ import annotations

import json
from typing import Any

from autosched.errors import UserError

MAX_TRACE_CHARS = 4 << 20
MAX_TRACE_DEPTH = 64
MAX_TRACE_ITEMS = 1 << 20

INSTRUCTIONS = frozenset(
    {
        "GetSBlock", "GetLoops", "GetChildBlocks", "GetProducers", "GetConsumers",
        "GetOutputBlocks", "SamplePerfectTile", "SamplePartitionedTile", "SampleCategorical",
        "SampleComputeLocation", "Split", "LoopPartition", "Fuse", "Merge", "Reorder",
        "AddUnitLoop", "Parallel", "Vectorize", "Bind", "Unroll", "CacheRead", "CacheWrite",
        "ReindexCacheRead", "ReindexCacheWrite", "CacheInplace", "CacheIndex", "ReIndex",
        "ComputeAt", "ReverseComputeAt", "ComputeInline", "ReverseComputeInline",
        "DecomposeReduction", "DecomposePadding", "PadEinsum", "RFactor", "Blockize", "Tensorize",
        "StorageAlign", "SetScope", "TransformLayout", "TransformBlockLayout", "SetAxisSeparator",
        "Annotate", "Unannotate", "EnterPostproc",
    }
)  # fmt: skip
"""The schedule primitives a trace may use: those of MetaSchedule's search, which keep a
program's meaning (TVM checks each as it applies it)."""

ANNOTATIONS = frozenset(
    {
        "meta_schedule.parallel", "meta_schedule.vectorize", "meta_schedule.unroll_explicit",
        "meta_schedule.unroll_implicit", "meta_schedule.tiling_structure",
        "meta_schedule.cooperative_fetch", "meta_schedule.auto_tensorize",
        "meta_schedule.auto_tensorize_init", "meta_schedule.layout_rewrite_preproc",
        "meta_schedule.thread_extent_low_inclusive", "meta_schedule.thread_extent_high_inclusive",
        "meta_schedule.random_compute_producer", "pragma_auto_unroll_max_step",
        "pragma_unroll_explicit", "software_pipeline_stage", "software_pipeline_order",
        "software_pipeline_async_stages",
    }
)  # fmt: skip
"""The annotations a trace may attach: MetaSchedule's marks for its postprocessors, unrolling
hints and software pipelining; never one that imports code (``pragma_import_llvm``)."""

_MAX_STRING = 256  # an annotation's text value: a tiling structure or a tensor intrinsic's name


def check_trace(text: str) -> list[Any]:
    """The JSON of the trace ``text``, once it passes the checks of this module.

    Raises:
        UserError: it does not; the message says why, in one line.
    """
    if len(text) > MAX_TRACE_CHARS:
        raise UserError(f"a trace is over {MAX_TRACE_CHARS} characters")
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        raise UserError("a trace must be JSON text") from None
    _check_shape(document)
    if not (isinstance(document, list) and len(document) == 2 and isinstance(document[0], list)):
        raise UserError("a trace must be a list of its instructions and its decisions")
    for instruction in document[0]:
        _check_instruction(instruction)
    return document


def _check_shape(document: Any) -> None:
    """At most ``MAX_TRACE_DEPTH`` levels of lists and ``MAX_TRACE_ITEMS`` values in all, of
    JSON's plain types (no objects), walked without recursion."""
    stack = [(document, 1)]
    items = 0
    while stack:
        value, depth = stack.pop()
        items += 1
        if items > MAX_TRACE_ITEMS:
            raise UserError(f"a trace holds over {MAX_TRACE_ITEMS} values")
        if isinstance(value, list):
            if depth > MAX_TRACE_DEPTH:
                raise UserError(f"a trace is nested over {MAX_TRACE_DEPTH} levels deep")
            stack.extend((item, depth + 1) for item in value)
        elif not (value is None or isinstance(value, (bool, int, float, str))):
            raise UserError("a trace may hold lists, numbers and strings only")


def _check_instruction(instruction: Any) -> None:
    if not (isinstance(instruction, list) and len(instruction) == 4):
        raise UserError("a trace's instruction must be [kind, inputs, attributes, outputs]")
    kind, inputs, attrs, _outputs = instruction
    if kind not in INSTRUCTIONS:
        raise UserError(f"a trace may not use the instruction {str(kind)[:64]!r}")
    if kind in ("Annotate", "Unannotate"):
        key = attrs[0] if isinstance(attrs, list) and attrs else None
        if key not in ANNOTATIONS:
            raise UserError(f"a trace may not attach the annotation {str(key)[:64]!r}")
        if kind == "Annotate":
            value = inputs[1] if isinstance(inputs, list) and len(inputs) == 2 else None
            if not _plain_value(value):
                raise UserError(f"a trace's annotation {key} must have a plain value")


def _plain_value(value: Any) -> bool:
    """A number or truth value, a random variable's name, a short quoted string, or a list of
    numbers."""
    if value is None:
        return False
    if isinstance(value, (bool, int, float)):
        return True
    if isinstance(value, str):
        return len(value) <= _MAX_STRING
    return isinstance(value, list) and all(
        isinstance(item, int) and not isinstance(item, bool) for item in value
    )
