"""A tuned model compiled: the best schedule of each task in one MetaSchedule database, which
TVM's ``MetaScheduleApplyDatabase`` applies to the fused model (tasks without a schedule, or
whose schedule TVM cannot build, keep the default); weights a schedule stores in a layout of its
own are packed once, as the model is built (``SplitLayoutRewritePreproc``, then ``FoldConstant``
on the bound weights, as TVM's ``cpu_weight_prepack`` does); the Relax VM executable, its outputs
checked against the framework's own on random inputs. The files a model exports to are written
by ``autosched.exports.models``.

Nothing here tunes or writes to the log; schedules are read from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_backend
from tvm.relax.backend.cuda import pipeline as cuda_backend
from tvm.s_tir import dlight as dl
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import Database, MemoryDatabase, TuningRecord

from autosched.errors import UserError
from autosched.log import TuningLog
from autosched.model.load import InputSpec, Model
from autosched.model.tasks import ModelTask, fuse
from autosched.records import RecordView
from autosched.schedule import apply_trace
from autosched.target import canonical_target, target_key, to_tvm_target
from autosched.workload import mismatch

CHECK_SEED = 0


@dataclass(frozen=True)
class TaskSchedule:
    """The schedule a task compiles with: its best record in the log, or none (the default
    schedule) with the reason."""

    task: ModelTask
    record: RecordView | None
    reason: str | None = None


@dataclass(frozen=True)
class OutputCheck:
    """How the compiled model's outputs compared with the reference's on random inputs."""

    reference: str
    outputs: int
    max_abs_error: float

    def as_json(self) -> dict[str, object]:
        return {
            "reference": self.reference,
            "outputs": self.outputs,
            "max_abs_error": self.max_abs_error,
        }


class OutputMismatch(Exception):
    """The compiled model computes something else than its framework: the model is not tuned."""


def best_schedules(log: TuningLog, tasks: Sequence[ModelTask], target: dict) -> list[TaskSchedule]:
    """Each task's best verified record on ``target`` in ``log``; a task without one, or whose
    workload is not admitted, keeps the default schedule."""
    stored_target = log.find_target(target_key(canonical_target(target)))
    schedules = []
    for task in tasks:
        if task.workload is None:
            schedules.append(TaskSchedule(task, None, task.problem))
            continue
        stored = log.find_workload(task.workload.key)
        best = (
            None
            if stored is None or stored_target is None
            else log.best(stored.id, stored_target.id)
        )
        reason = None if best is not None else "no verified schedule in the log"
        schedules.append(TaskSchedule(task, best, reason))
    return schedules


def fill_database(database: Database, schedules: Sequence[TaskSchedule], target: dict) -> int:
    """Commit each scheduled task's best trace to ``database``, keyed by the task's function as
    TVM extracts it; returns how many were committed."""
    tvm_target = to_tvm_target(target)
    committed = 0
    for schedule in schedules:
        tvm_mod = schedule.task.tvm_mod
        if schedule.record is None:
            continue
        if tvm_mod is None:
            raise ValueError(f"task {schedule.task.name} was not extracted in this process")
        func = next(func for _, func in tvm_mod.functions_items())
        sch = apply_trace(tvm_mod, schedule.record.trace_json)
        if not sch.trace.insts:
            # The untuned program measured fastest. TVM's databases pass over a trace that
            # schedules nothing, so it is recorded as one that only looks up the root block.
            sch.get_sblock("root")
        database.commit_tuning_record(
            TuningRecord(
                sch.trace,
                database.commit_workload(tvm_mod),
                list(schedule.record.samples),
                tvm_target,
                ArgInfo.from_prim_func(func),
            )
        )
        committed += 1
    return committed


def compile_model(
    model: Model, schedules: Sequence[TaskSchedule], target: dict
) -> relax.VMExecutable:
    """The model built for ``target`` with the tasks' schedules applied (see
    `compile_schedules`)."""
    return compile_schedules(model, schedules, target)[0]


CANNOT_BUILD = "TVM cannot build its schedule"
"""The start of the reason a task keeps the default schedule when its tuned one does not build."""


def compile_schedules(
    model: Model, schedules: Sequence[TaskSchedule], target: dict
) -> tuple[relax.VMExecutable, list[TaskSchedule]]:
    """The model built for ``target`` with the tasks' schedules applied, and the schedules it
    was built with.

    Should the model not build, each tuned schedule is applied to its task and built alone; one
    that TVM cannot apply, split its weights' packing off or build is dropped (its task keeps
    TVM's default schedule, the reason `CANNOT_BUILD` and TVM's error), and the model is built
    again without them.

    Raises:
        UserError: the model does not build with TVM's default schedules either; the error names
            the kernels TVM cannot build.
    """
    _backend(to_tvm_target(target))
    try:
        return _build(model, _database(schedules, target), target), list(schedules)
    except Exception as error:  # TVM's errors come in its own types
        failure = error
    checked = [_buildable(schedule, target) for schedule in schedules]
    if all(after is before for after, before in zip(checked, schedules, strict=True)):
        raise _unbuildable(model, target, failure)
    try:
        return _build(model, _database(checked, target), target), checked
    except Exception as error:  # TVM's errors come in its own types
        raise _unbuildable(model, target, error) from None


def _database(schedules: Sequence[TaskSchedule], target: dict) -> Database:
    database = MemoryDatabase()
    fill_database(database, schedules, target)
    return database


def _buildable(schedule: TaskSchedule, target: dict) -> TaskSchedule:
    """``schedule`` if its trace applies to its task and the kernel it makes builds alone (its
    weights' packing split off as the model's build splits it), else the default schedule with
    TVM's reason."""
    if schedule.record is None or schedule.task.tvm_mod is None:
        return schedule
    try:
        sch = apply_trace(schedule.task.tvm_mod, schedule.record.trace_json)
        relax.transform.SplitLayoutRewritePreproc()(sch.mod)
        tvm.compile(sch.mod, target=to_tvm_target(target))
    except Exception as error:  # TVM's errors come in its own types
        return replace(schedule, record=None, reason=f"{CANNOT_BUILD}: {_one_line(error)}")
    return schedule


def _unbuildable(model: Model, target: dict, error: BaseException) -> UserError:
    """The one-line error of a model that does not build: TVM's error, and the kernels of its
    untuned module that do not build alone."""
    if isinstance(error, UserError):
        return error
    tvm_target = to_tvm_target(target)
    failing = []
    try:
        mod = scheduled_module(model, MemoryDatabase(), target)
    except Exception:  # the error before the kernels: TVM's own message says it
        mod = tvm.IRModule()
    for gvar, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            try:
                tvm.compile(tvm.IRModule({"main": func}), target=tvm_target)
            except Exception:  # this kernel is one that does not build
                failing.append(gvar.name_hint)
    kernels = f" (kernels that do not build: {', '.join(failing)})" if failing else ""
    return UserError(f"{model.path}: TVM cannot build the model: {_one_line(error)}{kernels}")


def compile_untuned(model: Model, target: dict) -> relax.VMExecutable:
    """The model built with TVM's default schedules: the reference of a Relax file."""
    return compile_schedules(model, [], target)[0]


def scheduled_module(model: Model, database: Database, target: dict) -> tvm.IRModule:
    """The fused model with the schedules of ``database`` applied and its weights packed into
    the layouts those schedules chose; on a GPU, kernels without a schedule get DLight's."""
    tvm_target = to_tvm_target(target)
    fused = fuse(model.mod, target)
    with tvm_target, database, tvm.transform.PassContext(opt_level=3):
        mod = relax.transform.MetaScheduleApplyDatabase()(fused)
        if "gpu" in tvm_target.keys:
            mod = dl.ApplyDefaultSchedule(
                dl.gpu.Matmul(),
                dl.gpu.GEMV(),
                dl.gpu.Reduction(),
                dl.gpu.GeneralReduction(),
                dl.gpu.Fallback(),
            )(mod)
        # A kernel that stores a weight in its own layout starts by packing it: split that off
        # into a function of its own, which folds on the bound weight and is then dropped.
        mod = _weight_packing_split(mod)
        mod = relax.transform.FoldConstant()(mod)
        return relax.transform.DeadCodeElimination(["main"])(mod)


def _weight_packing_split(mod: tvm.IRModule) -> tvm.IRModule:
    """``SplitLayoutRewritePreproc`` on the kernels that a schedule of the database applies to,
    the others set aside while it runs: the pass splits every kernel of the module, and fails on
    one with no block under its root block (TVM's cumsum, in GPT-2 and LLaMA: "There should be a
    compute block if there is only one subtree under the root"). Only a schedule packs a weight,
    and MetaSchedule schedules only kernels made of blocks."""
    aside = {
        gvar: func
        for gvar, func in mod.functions_items()
        if isinstance(func, tvm.tirx.PrimFunc)
        and not (func.attrs is not None and func.attrs.get("tirx.is_scheduled"))
    }
    kept = mod.clone()
    for gvar in aside:
        del kept[gvar]
    split = relax.transform.SplitLayoutRewritePreproc()(kept)
    for gvar, func in aside.items():
        split[gvar] = func
    return split


# The lowering of each target kind (its package does not export its dataflow lowering passes).
_BACKENDS = {"llvm": cpu_backend, "cuda": cuda_backend}


def _backend(tvm_target: tvm.target.Target) -> object:
    """The lowering passes' module of the target's kind.

    Raises:
        UserError: the kind has none here.
    """
    backend = _BACKENDS.get(tvm_target.kind.name)
    if backend is None:
        kinds = " and ".join(sorted(_BACKENDS))
        raise UserError(f"models are built for {kinds} targets, not {tvm_target.kind.name}")
    return backend


def _build(model: Model, database: Database, target: dict) -> relax.VMExecutable:
    """The model built with the schedules of ``database``; raises TVM's error as it comes."""
    tvm_target = to_tvm_target(target)
    backend = _backend(tvm_target)
    lowering = tvm.transform.Sequential(
        [*backend.dataflow_lower_passes(tvm_target), *backend.finalize_passes(tvm_target)]
    )
    mod = scheduled_module(model, database, target)
    with tvm_target, tvm.transform.PassContext(opt_level=3):
        return relax.build(mod, target=tvm_target, relax_pipeline=lowering)


def run_model(executable: tvm.runtime.Module, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run ``main`` of a built model (an executable or a loaded library) on the CPU."""
    device = tvm.cpu()
    vm = relax.VirtualMachine(executable, device)
    result = vm["main"](*(tvm.runtime.tensor(array, device) for array in inputs))
    return [np.asarray(out.numpy()) for out in _flatten(result)]


def _flatten(value: Any) -> list[tvm.runtime.Tensor]:
    """The tensors of a VM result: a tensor, or (nested) tuples of them."""
    if isinstance(value, tvm.runtime.Tensor):
        return [value]
    return [tensor for item in value for tensor in _flatten(item)]


def random_model_inputs(inputs: Sequence[InputSpec], seed: int = CHECK_SEED) -> list[np.ndarray]:
    """Uniform floats in [-1, 1), small integers (within [0, 4]: indices and sizes stay valid)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in inputs:
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            arrays.append(rng.uniform(-1.0, 1.0, spec.shape).astype(dtype))
        elif dtype.kind in "iu":
            arrays.append(rng.integers(0, 5, spec.shape).astype(dtype))
        elif dtype.kind == "b":
            arrays.append(rng.integers(0, 2, spec.shape).astype(dtype))
        else:
            raise UserError(f"cannot make random inputs of dtype {spec.dtype} for {spec.name}")
    return arrays


def check_outputs(model: Model, executable: tvm.runtime.Module, target: dict) -> OutputCheck:
    """Compare the compiled model's outputs with the reference's on random inputs.

    Raises:
        OutputMismatch: an output differs beyond its dtype's tolerance, or their numbers differ.
    """
    inputs = random_model_inputs(model.inputs)
    got = run_model(executable, inputs)
    if model.reference is not None:
        expected = model.reference(inputs)
    else:
        expected = run_model(compile_untuned(model, target), inputs)
    if len(got) != len(expected):
        raise OutputMismatch(
            f"{model.name}: the compiled model returns {len(got)} outputs, "
            f"{model.reference_name} {len(expected)}"
        )
    worst = 0.0
    for index, (out, ref) in enumerate(zip(got, expected, strict=True)):
        problem = mismatch(out, np.asarray(ref).astype(out.dtype, copy=False))
        if problem is not None:
            problem = problem.replace("the reference", model.reference_name)
            raise OutputMismatch(f"{model.name}: output {index} of the compiled model {problem}")
        if out.size:
            worst = max(worst, float(np.max(np.abs(out.astype(np.float64) - ref))))
    return OutputCheck(model.reference_name, len(got), worst)


def _one_line(error: BaseException) -> str:
    """TVM's error on one line: its message runs over several, with the check that failed."""
    return " ".join(str(error).split())[:300] or type(error).__name__
