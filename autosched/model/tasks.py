"""A model's tuning tasks: its Relax module (made ready for inference as it was loaded, see
``autosched.model.load``) legalized and fused as TVM's ``compile_relax`` does (``LegalizeOps``,
``AnnotateTIROpPattern``, ``FoldConstant``, ``FuseOps``, ``FuseTIR``), on a CPU with its 3x3
convolutions as Winograd's (``autosched.model.winograd``) and its weights
marked layout-free (``AttachAttrLayoutFreeBuffers``, as TVM's ``cpu_weight_prepack`` does: a
schedule may store a weight in a layout of its own, packed once as the model is built), then
MetaSchedule's task extraction; each fused PrimFunc becomes a `Workload` of the log, keyed as
every workload is, with its weight (how many times one run of the model calls it). On a CPU a
task is marked ``autosched.cold_cache``: its candidates are timed with the caches flushed before
each call, as the kernel runs in the model, its weights coming from memory on every call (timed
warm, a model's kernels sum to far less than the model takes).

A task's PrimFunc travels as IR JSON and passes ``autosched.admission`` like any program from a
file. TVM marks fused functions with attributes the admission refuses (``op_pattern``) and
blocks with hints of schedules (``schedule_rule``, TOPI's softmax ``axis``); they are dropped
from the tuned workload, and its parameters are renamed ``p0``, ``p1``, ... so that the same
layer in two models is one workload (a schedule's trace names blocks, not parameters, so it
replays onto TVM's own function as extracted). A task that is still not admitted (a block
annotation, a call the admission refuses) keeps TVM's default schedule and says why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import tvm
from tvm import relax
from tvm.relax import pipeline as relax_pipeline
from tvm.s_tir import meta_schedule as ms

from autosched.admission import COLD_CACHE, FUNCTION_ATTRS, program_json
from autosched.errors import UserError
from autosched.model.load import Model
from autosched.model.winograd import winograd_convolutions
from autosched.target import to_tvm_target
from autosched.workload import Workload, workload_from_ir_json

# Relax operators that stay in a fused module: calls of the kernels and of the VM's builtins.
_LOWERED_OPS = frozenset(
    {
        "relax.call_tir",
        "relax.call_tir_inplace",
        "relax.call_dps_packed",
        "relax.call_pure_packed",
        "relax.call_builtin_with_ctx",
        "relax.null_value",
        "relax.shape_of",
    }
)


_SCHEDULE_HINTS = frozenset({"schedule_rule", "axis"})
"""Block annotations that only steer schedules: MetaSchedule's choice of rules, and the axis that
TOPI's softmax names for its hand-written schedules."""


@dataclass(frozen=True)
class ModelTask:
    """One fused kernel of a model.

    ``tvm_mod`` is the PrimFunc as MetaSchedule extracts it, the module TVM's databases key its
    schedule by (None in a process that only plans and records tasks, the service's, whose child
    extracts and compiles them: ``isolated``); ``workload`` its admitted form that the log tunes
    (None, with ``problem``, when it is not admitted: it keeps the default schedule).
    """

    name: str
    weight: int
    tvm_mod: tvm.IRModule | None
    workload: Workload | None
    problem: str | None = None

    @property
    def key(self) -> str | None:
        return None if self.workload is None else self.workload.key


def fuse(mod: tvm.IRModule, target: dict) -> tvm.IRModule:
    """``mod`` with its operators legalized into TIR and fused, as ``compile_relax`` fuses them
    before it applies a database (so the extracted tasks are the kernels it looks up). On a CPU,
    3x3 convolutions are first rewritten as Winograd's (``autosched.model.winograd``), and each
    kernel's parameters bound to constants are marked ``layout_free_buffers``.

    Raises:
        UserError: an operator has no legalization into TIR (named), or a pass fails.
    """
    tvm_target = to_tvm_target(target)
    try:
        dispatch = relax_pipeline.library_dispatch_passes(tvm_target)
    except (ValueError, AttributeError):
        dispatch = []
    passes = [*dispatch]
    if target["kind"] == "llvm":
        passes += [relax.transform.FoldConstant(), winograd_convolutions]
    passes += [
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
    if target["kind"] == "llvm":
        passes.append(relax.transform.AttachAttrLayoutFreeBuffers())
    try:
        with tvm_target, tvm.transform.PassContext(opt_level=3):
            fused = tvm.transform.Sequential(passes)(mod)
    except Exception as error:  # TVM's pass errors come in its own types
        raise UserError(f"TVM cannot fuse the model: {_first_line(error)}") from None
    left = _unlegalized_ops(fused)
    if left:
        raise UserError(f"operators TVM cannot lower to TIR: {', '.join(sorted(left))}")
    return fused


def extract_tasks(model: Model, target: dict) -> list[ModelTask]:
    """The tuning tasks of ``model`` on ``target``, heaviest calls first; tasks whose admitted
    workloads are the same program are one task, their weights summed.

    Raises:
        UserError: an operator cannot be lowered (see `fuse`).
    """
    fused = fuse(model.mod, target)
    extracted = ms.relax_integration.extract_tasks(fused, to_tvm_target(target))
    tasks: dict[str, ModelTask] = {}
    unadmitted: list[ModelTask] = []
    for task in extracted:
        tvm_mod = _normalize_mod(task.dispatched[0])
        workload, problem = _workload(task.task_name, tvm_mod, cold=target["kind"] == "llvm")
        if workload is None:
            unadmitted.append(ModelTask(task.task_name, int(task.weight), tvm_mod, None, problem))
            continue
        seen = tasks.get(workload.key)
        weight = int(task.weight) + (seen.weight if seen else 0)
        tasks[workload.key] = ModelTask(
            seen.name if seen else task.task_name, weight, tvm_mod, workload
        )
    return sorted([*tasks.values(), *unadmitted], key=lambda task: -task.weight)


def _normalize_mod(mod: tvm.IRModule) -> tvm.IRModule:
    """The module as MetaSchedule's database keys it (its one function named ``main``)."""
    return tvm.get_global_func("tvm.s_tir.meta_schedule.normalize_mod")(mod)


def _workload(
    name: str, tvm_mod: tvm.IRModule, *, cold: bool
) -> tuple[Workload | None, str | None]:
    """The admitted workload of a task's PrimFunc (timed cache-cold if ``cold``), or why it is
    not admitted."""
    func = _without_hints(next(func for _, func in tvm_mod.functions_items()))
    if cold:
        func = func.with_attr(COLD_CACHE, True)
    try:
        return workload_from_ir_json(_canonical_json(func), name=name), None
    except UserError as error:
        return None, str(error)


def _canonical_json(func: tvm.tirx.PrimFunc) -> str:
    """The IR JSON of ``func`` with its parameters named ``p0``, ``p1``, ... (TVM names them
    after the Relax variables they were bound to, which differ between models that share a layer)
    and without the blocks' ``schedule_rule`` hints (TVM's custom rule for a block; the tuned
    workload is searched with the generic rules)."""
    document = json.loads(program_json(func))
    nodes = document["nodes"]

    def add(node: dict) -> int:
        nodes.append(node)
        return len(nodes) - 1

    for node in list(nodes):
        if node["type"] == "tirx.PrimFunc":
            for position, param in enumerate(nodes[node["data"]["params"]]["data"]):
                nodes[param]["data"]["name"] = add({"type": "ffi.String", "data": f"p{position}"})
        if node["type"] == "s_tir.SBlock":
            entries = nodes[node["data"]["annotations"]]["data"]
            kept = [
                index
                for key, value in zip(entries[0::2], entries[1::2], strict=True)
                if nodes[key]["data"] not in _SCHEDULE_HINTS
                for index in (key, value)
            ]
            if len(kept) < len(entries):
                node["data"]["annotations"] = add({"type": "ffi.Map", "data": kept})
    return json.dumps(document)


def _without_hints(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """``func`` without the function attributes of TVM's passes that the admission refuses
    (``op_pattern`` and the like), hints that do not change what it computes."""
    for key in list(func.attrs.keys()) if func.attrs is not None else []:
        if key not in FUNCTION_ATTRS:
            func = func.without_attr(key)
    return func


def _unlegalized_ops(mod: tvm.IRModule) -> set[str]:
    """Names of the Relax operators left in ``mod``'s Relax functions after legalization."""
    left: set[str] = set()

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            name = expr.op.name
            if name.startswith("relax.") and name not in _LOWERED_OPS:
                left.add(name.removeprefix("relax."))

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return left


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(error).__name__
