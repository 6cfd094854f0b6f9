"""Whole models in the tuning service: an uploaded ONNX file made a model job (imported, its tasks
extracted, the reuse rule applied, all stored in the log), the driver that advances every model
job round by round, and the compiled library of a model job.

Each round of a model job is an ordinary tuning job of one task in the service's queue, so it
shares the workers with every other job. The driver keeps no state the log does not: after each
round it rebuilds the task scheduler from the rounds stored, so a restarted server goes on where
the log says the model job stands. Once the budget is spent, each tuned task's fastest candidates
are timed again side by side with its untuned program (a final round per task, as `autosched
tune` does for a model, unless the model job has 0 finalists), then the model is compiled with
its tasks' best schedules, its outputs are checked against ONNX Runtime where the server can run
the target, and a model whose outputs match is recorded as tuned (as `autosched tune` records
one).

Only ONNX files are accepted: they are data. TVMScript files are evaluated by TVM's parser and
PyTorch .pt2 files unpickled, so neither comes from the network. The server imports and compiles
a model, and runs it for the output check, in child processes under limits
(``autosched.model.isolated``): here it only plans, stores and records.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autosched.background import BackgroundLoop
from autosched.errors import Conflict, NotFound, ServiceUnavailable, TooLarge, UserError
from autosched.exports.manifest import artefact_header
from autosched.log import TuningLog
from autosched.log.jobs import JobStore
from autosched.log.model_jobs import ModelJobStore, ModelJobTaskEntry, RoundResult
from autosched.log.subjects import ensure_target
from autosched.machine.cpu import cpu_flags
from autosched.model import SERVICE_REFUSALS
from autosched.model.compile import TaskSchedule, best_schedules
from autosched.model.isolated import (
    ModelLimits,
    ModelSource,
    build_model,
    import_model,
)
from autosched.model.load import InputSpec
from autosched.model.onnx_bounds import TensorBounds
from autosched.model.scheduler import TaskScheduler
from autosched.model.tasks import ModelTask
from autosched.model.tuning import (
    CANNOT_SCHEDULE,
    ModelTuneReport,
    plan_tasks,
    record_tuned_model,
    task_outcomes,
)
from autosched.protocol import ModelJobCreate
from autosched.records import JobProgress, JobStatus, ModelJobProgress, RecordView
from autosched.server.settings import Settings
from autosched.target import canonical_target, host_target, parse_target, withheld_features

logger = logging.getLogger(__name__)

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_TARGET_KEY = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Upload:
    """An uploaded model file that passed the checks that need no parsing: its model's name (a
    file-system-safe form of the file's), the name its problems are told under, its bytes."""

    name: str
    label: str
    data: bytes


def admit_upload(filename: str | None, data: bytes, *, max_bytes: int) -> Upload:
    """The checks of an uploaded model file that come before anything else.

    Raises:
        TooLarge: the file is over ``max_bytes``.
        UserError: the file is empty, or a ``.py`` or ``.pt2`` file (refused with why).
    """
    if len(data) > max_bytes:
        raise TooLarge(f"the model file is over the limit of {max_bytes} bytes")
    suffix = Path(filename or "").suffix.lower()
    if suffix in SERVICE_REFUSALS:
        raise UserError(SERVICE_REFUSALS[suffix])
    if not data:
        raise UserError("the model file is empty; send an ONNX file")
    return Upload(_model_name(filename), filename or "the model file", data)


def submit_model(
    log: TuningLog,
    upload: Upload,
    fields: ModelJobCreate,
    target: dict,
    *,
    max_input_bytes: int,
    limits: ModelLimits,
    owner: str | None = None,
    max_open: int | None = None,
) -> int:
    """Make an admitted upload a queued model job of ``owner`` for ``target``; returns its id.

    The file is imported and its tasks extracted (in a child under ``limits``) before anything
    is stored; then the tasks' workloads and the model job with its file are.

    Raises:
        UserError: the file is not a self-contained ONNX model, an operator is not supported
            (named), an input's shape is not static and ``fields.inputs`` do not fix it, a tensor
            is over the bounds, or the inputs hold over ``max_input_bytes``.
        TooLarge: importing it needs more memory than ``limits`` give.
        OverLimit: ``owner`` has ``max_open`` model jobs queued or running already.
    """
    target = canonical_target(target)
    source = ModelSource(upload.data, upload.name, upload.label, tuple(fields.inputs))
    model = import_model(source, target, limits)
    inputs_bytes = sum(_bytes(spec) for spec in model.inputs)
    if inputs_bytes > max_input_bytes:
        raise UserError(
            f"the model's inputs hold {inputs_bytes} bytes, over the limit of "
            f"{max_input_bytes} (AUTOSCHED_MAX_PROGRAM_BYTES)"
        )
    tasks = model.model_tasks()
    plan = plan_tasks(log, tasks, target, fields.trials)
    entries = [
        ModelJobTaskEntry(
            name=task.name,
            weight=task.weight,
            workload_key=task.key,
            default_schedule=plan.failed.get(index),
            reused_records=plan.reused.get(index, 0),
        )
        for index, task in enumerate(tasks)
    ]
    return ModelJobStore(log).submit(
        name=upload.name,
        onnx=upload.data,
        inputs=[spec.as_json() for spec in model.inputs],
        target_id=ensure_target(log, target).id,
        **fields.search(),
        tasks=entries,
        finalists=fields.finalists,
        final_rounds=fields.final_rounds,
        owner=owner,
        max_open=max_open,
    )


def model_library(
    log: TuningLog, model_id: int, target_text: str | None, *, limits: ModelLimits
) -> tuple[str, bytes]:
    """The model job's model compiled with the log's best schedules of its tasks on the target
    (by default the model job's; else a target key, target JSON, or the model job's kind), as
    the bytes of a Relax VM library (``.so``) and its file name; imported and compiled in
    children under ``limits``.

    Raises:
        NotFound: no such model job, or a target it was not tuned for.
        Conflict: the model job failed its output check.
        UserError: the target is malformed, or TVM cannot build the model for it.
        TooLarge: importing or compiling it needs more memory than ``limits`` give.
    """
    progress = ModelJobStore(log).progress(model_id)
    if progress.status is JobStatus.FAILED:
        raise Conflict(f"model job {model_id} failed ({progress.reason}); it has no library")
    target = _library_target(log, progress, target_text)
    source = _stored_source(log, progress)
    tasks = import_model(source, target, limits).model_tasks()
    records = _records(best_schedules(log, tasks, target))
    built = build_model(source, target, limits, records, check=False, library=True)
    assert built.library is not None
    return f"{progress.name}.so", built.library


def model_manifest(
    log: TuningLog, model_id: int, target_text: str | None, *, limits: ModelLimits
) -> dict[str, object]:
    """The manifest of the model job's library (`model_library`, same target): what
    ``autosched.runtime`` runs it by (its threads as tuned, its inputs and outputs), the target,
    the output check and the uploaded file's name and SHA-256, by which a client names the local
    copy of it that its framework runs beside the library. The model is imported in a child.

    Raises:
        NotFound, Conflict, UserError, TooLarge: as `model_library`.
    """
    progress = ModelJobStore(log).progress(model_id)
    if progress.status is JobStatus.FAILED:
        raise Conflict(f"model job {model_id} failed ({progress.reason}); it has no library")
    target = _library_target(log, progress, target_text)
    source = _stored_source(log, progress)
    imported = import_model(source, target, limits)
    header = artefact_header("model", Path(f"{progress.name}.so"), target, cold=False)
    return {
        **header,
        "model": progress.name,
        "format": imported.format_name,
        "target": canonical_target(target),
        "inputs": [spec.as_json() for spec in imported.inputs],
        "outputs": list(imported.outputs),
        "check": progress.output_check,
        "source": {"name": source.name, "sha256": hashlib.sha256(source.data).hexdigest()},
        "model_job": progress.id,
    }


def model_limits(settings: Settings) -> ModelLimits:
    """The limits of the children that import and compile models, as the settings say."""
    return ModelLimits(
        memory_bytes=settings.model_memory_bytes,
        secs=settings.model_secs,
        bounds=TensorBounds(settings.max_tensor_bytes, settings.max_program_bytes),
    )


class ModelDriver(BackgroundLoop):
    """Advances every unfinished model job of a tuning log; run it in a thread with
    `start`/`stop`, beside the search engine that drives the rounds' tuning jobs.

    Args:
        log: the tuning log.
        limits: of the children that import, compile and check the models.
        poll_secs: pause between rounds of the loop.
    """

    name = "model-driver"

    def __init__(self, log: TuningLog, *, limits: ModelLimits, poll_secs: float = 0.5) -> None:
        self._log = log
        self._limits = limits
        self._models = ModelJobStore(log)
        self._jobs = JobStore(log)
        self._poll_secs = poll_secs

    def step(self) -> None:
        """One pass over the unfinished model jobs; one that fails is marked failed, with why."""
        for model_id in self._models.unfinished():
            try:
                self.advance(model_id)
            except ServiceUnavailable:  # the log is gone for now: not the model's fault
                raise
            except UserError as error:
                self._models.end(model_id, JobStatus.FAILED, reason=_line(error))
            except Exception as error:  # one broken model job must not stop the others
                logger.exception("model job %d failed; it is marked failed", model_id)
                reason = f"the server failed to drive it: {_line(error)}"
                self._models.end(model_id, JobStatus.FAILED, reason=reason)

    def advance(self, model_id: int) -> None:
        """Record the rounds that ended; then submit the next round, or once the budget is spent
        (or no task is left to tune), conclude the model job."""
        self._models.start(model_id)
        progress = self._models.progress(model_id)
        if progress.status.final:
            return
        tunable = [t.position for t in progress.tasks if t.workload_key and not t.reused_records]
        scheduler = TaskScheduler(
            [progress.tasks[position].weight for position in tunable],
            progress.trials,
            progress.batch_size,
        )
        tuned: set[int] = set()  # the tasks whose rounds measured something
        for round_ in progress.rounds:
            if not round_.trials:  # a task's final, after its last round
                continue
            if round_.recorded:
                result = RoundResult(
                    round_.measured, round_.best_secs, round_.task_finished, round_.problem
                )
            else:
                job = self._jobs.job(round_.job_id)
                if not job.status.final:
                    return
                result = _round_result(job)
                self._models.record_round(round_.id, result)
            index = tunable.index(round_.task)
            if result.problem is None:
                scheduler.record(index, result.measured, result.best_secs)
                if result.measured:
                    tuned.add(round_.task)
            if result.task_finished:
                scheduler.finish(index)
        planned = scheduler.next_round()
        if planned is not None:
            self._models.add_round(
                model_id,
                position=len(progress.rounds),
                task=tunable[planned.index],
                trials=planned.trials,
            )
            return
        if self._finals_ended(progress, sorted(tuned)):
            self._conclude(progress)

    def _finals_ended(self, progress: ModelJobProgress, tuned: Sequence[int]) -> bool:
        """Whether the final of every ``tuned`` task has ended: the finals are queued together
        once the budget is spent, and each makes its re-timed winner the task's best record,
        which the compiled model then uses. A model job of 0 finalists has none."""
        finals = [round_ for round_ in progress.rounds if not round_.trials]
        if finals:
            ended = [self._jobs.job(round_.job_id) for round_ in finals]
            if not all(job.status.final for job in ended):
                return False
            for round_, job in zip(finals, ended, strict=True):
                self._models.record_round(round_.id, RoundResult(0, job.best_latency_secs, True))
            return True
        if not (tuned and progress.finalists):
            return True
        self._models.add_finals(progress.id, position=len(progress.rounds), tasks=tuned)
        return False

    def _conclude(self, progress: ModelJobProgress) -> None:
        """Compile the model with its tasks' best schedules, check its outputs where this
        machine runs the target, record it as tuned and end the model job."""
        started = time.perf_counter()
        target = progress.target.target_json
        failed = {t.position: t.default_schedule for t in progress.tasks if t.default_schedule}
        source = _stored_source(self._log, progress)
        model = import_model(source, target, self._limits)
        tasks = _same_tasks(model.model_tasks(), progress)
        schedules, outcomes = task_outcomes(
            self._log,
            tasks,
            target,
            failed=failed,
            allocation={t.position: t.trials for t in progress.tasks},
            reused={t.position: t.reused_records for t in progress.tasks},
        )
        unchecked = why_not_checked_here(target)
        built = build_model(
            source,
            target,
            self._limits,
            _records(schedules),
            check=unchecked is None,
            library=False,
        )
        if unchecked is not None:
            check = {"ran": False, "reference": model.reference_name, "reason": unchecked}
            self._models.end(progress.id, JobStatus.FINISHED, output_check=check)
            return
        if built.check is None:
            reason = built.mismatch or "the output check did not run"
            check = {"ran": True, "reference": model.reference_name, "reason": reason}
            self._models.end(progress.id, JobStatus.FAILED, reason=reason, output_check=check)
            return
        report = ModelTuneReport(
            model.name, target, outcomes, built.check, time.perf_counter() - started
        )
        record_tuned_model(self._log, model, progress.target.id, report)
        check = {"ran": True, **built.check.as_json()}
        self._models.end(progress.id, JobStatus.FINISHED, output_check=check)

    def run(self, stop: threading.Event) -> None:
        """Run passes until ``stop`` is set, waiting out outages of the log's database."""
        self.run_rounds(stop, self.step, self._poll_secs)


def _round_result(job: JobProgress) -> RoundResult:
    """What an ended round's tuning job teaches the task scheduler."""
    if job.status is JobStatus.FINISHED:
        # A job that ended short of its budget has exhausted its design space.
        return RoundResult(job.trials_done, job.best_latency_secs, job.stop_reason is not None)
    if job.status is JobStatus.FAILED:
        problem = f"{CANNOT_SCHEDULE}: its tuning job {job.id} failed"
    else:
        problem = f"its tuning job {job.id} was {job.status.value}"
    return RoundResult(job.trials_done, job.best_latency_secs, True, problem)


def _same_tasks(tasks: Sequence[ModelTask], progress: ModelJobProgress) -> list[ModelTask]:
    """The tasks extracted again, checked to be those the model job was submitted with.

    Raises:
        UserError: they differ (the server's TVM changed since).
    """
    if [task.key for task in tasks] != [task.workload_key for task in progress.tasks]:
        raise UserError(
            "the model's tasks are not those it was submitted with (has TVM changed?); "
            "submit it again"
        )
    return list(tasks)


def why_not_checked_here(target: dict) -> str | None:
    """Why the server cannot run the model compiled for ``target`` to check its outputs, or
    None when it can (an LLVM target of this machine's triple and CPU, using no vector extension
    this machine withholds)."""
    if target.get("kind") != "llvm":
        return (
            f"the target is {target.get('kind')}; the server checks outputs on its own CPU, "
            "for llvm targets"
        )
    host = host_target()
    for attribute in ("mtriple", "mcpu"):
        wanted = target.get(attribute) or host[attribute]
        if wanted != host[attribute]:
            return f"the target's {attribute} is {wanted}, the server's CPU {host[attribute]}"
    withheld = withheld_features(target, cpu_flags())
    if withheld:
        return f"the target uses {', '.join(withheld)}, which the server's CPU does not offer"
    return None


def _library_target(log: TuningLog, progress: ModelJobProgress, text: str | None) -> dict:
    if text is None or text.strip() == progress.target.kind:
        return progress.target.target_json
    text = text.strip()
    if text.startswith("{"):
        return canonical_target(parse_target(text))
    if _TARGET_KEY.fullmatch(text):
        stored = log.find_target(text)
        if stored is None:
            raise NotFound(f"no target {text} in the tuning log")
        return stored.target_json
    raise NotFound(
        f"model job {progress.id} was tuned for {progress.target.kind}, not {text}; "
        "give a target key or target JSON to compile it for another"
    )


def _stored_source(log: TuningLog, progress: ModelJobProgress) -> ModelSource:
    """The model job's file in the log, with the input shapes it was submitted with."""
    given = tuple(
        f"{spec['name']}={'x'.join(str(d) for d in spec['shape'])}:{spec['dtype']}"
        for spec in progress.inputs
    )
    data = ModelJobStore(log).onnx(progress.id)
    return ModelSource(data, progress.name, f"model job {progress.id}", given)


def _records(schedules: Sequence[TaskSchedule]) -> dict[str, RecordView]:
    """The record each scheduled task compiles with, by its workload's key."""
    return {
        schedule.task.key: schedule.record
        for schedule in schedules
        if schedule.task.key is not None and schedule.record is not None
    }


def _model_name(filename: str | None) -> str:
    """A file-system-safe name of the model after its uploaded file's name."""
    stem = Path(filename or "").stem
    return _SAFE_NAME.sub("_", stem).strip("._")[:100] or "model"


def _bytes(spec: InputSpec) -> int:
    """The bytes of an input (8 per element for a dtype numpy does not know)."""
    try:
        itemsize = np.dtype(spec.dtype).itemsize
    except TypeError:
        itemsize = 8
    return math.prod(spec.shape) * itemsize


def _line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(error).__name__
