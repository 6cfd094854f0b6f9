"""Model jobs of the service in the tuning log: an uploaded ONNX model, its tasks and its rounds,
each round an ordinary tuning job of one task in the service's queue (``jobs``).

Contract:
    * Everything a model job's driver knows is here: the model file, which tasks are reused or
      tuned, and what each ended round taught the task scheduler. A restarted server rebuilds
      the scheduler from the rounds and goes on.
    * A round is added with its tuning job in one transaction, at the next free position of its
      model job; two drivers adding the same round add it once. Once the budget is spent, each
      tuned task gets a final round: a tuning job of no trials with a final, all added at once.
    * A model job's status takes the values of a tuning job's; once final it never changes.
    * A model job belongs to the principal that submitted it, as a tuning job does (``jobs``),
      and so do its rounds' jobs; an owner has at most so many model jobs queued or running.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Unpack

from sqlalchemy import Select, func, select, true, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from autosched.errors import NotFound
from autosched.finals.retiming import Finals
from autosched.finals.timings import final_medians
from autosched.log.jobs import OPEN_STATUSES, JobStore, ensure_room, queued_job
from autosched.log.queries import record_of, target_info, workload_ids
from autosched.log.store import LogStore
from autosched.log.tables import (
    BestRecord,
    Candidate,
    Measurement,
    ModelJob,
    ModelJobRound,
    ModelJobTask,
    Target,
    Workload,
    utcnow,
)
from autosched.records import (
    BASELINE_TRACE,
    JobStatus,
    ModelJobProgress,
    ModelRoundRecord,
    ModelTaskProgress,
    SearchSettings,
)


@dataclass(frozen=True)
class ModelJobTaskEntry:
    """A task of a submitted model: its name, weight, workload key (None when not admitted, with
    ``default_schedule`` saying why) and the records of the log it reuses (0: it is tuned)."""

    name: str
    weight: int
    workload_key: str | None
    default_schedule: str | None
    reused_records: int


@dataclass(frozen=True)
class RoundResult:
    """What an ended round taught the task scheduler: the trials its job measured, the task's
    best latency then, and whether the task gets no more rounds (with ``problem`` when its search
    failed)."""

    measured: int
    best_secs: float | None
    task_finished: bool
    problem: str | None = None


class ModelJobStore(LogStore):
    """The model jobs of ``log``: every method is one transaction on its database."""

    def submit(
        self,
        *,
        name: str,
        onnx: bytes,
        inputs: list[dict[str, Any]],
        target_id: int,
        tasks: Sequence[ModelJobTaskEntry],
        finalists: int,
        final_rounds: int,
        owner: str | None = None,
        max_open: int | None = None,
        **search: Unpack[SearchSettings],
    ) -> int:
        """Store a queued model job of ``owner`` (a principal) with its file and tasks; returns
        its id. Each tuned task's final times its ``finalists`` fastest candidates again in
        ``final_rounds`` (0 finalists: the tasks have no finals). The tasks' workloads and the
        target must be stored already.

        Raises:
            OverLimit: ``owner`` has ``max_open`` model jobs queued or running already.
        """
        with self._sessions.begin() as session:
            if owner is not None and max_open is not None:
                ensure_room(
                    session, owner, _open_model_jobs(owner), max_open, "model jobs", lock=True
                )
            job = ModelJob(
                name=name,
                onnx=onnx,
                inputs={"inputs": inputs},
                target_id=target_id,
                finalists=finalists,
                final_rounds=final_rounds,
                status=JobStatus.QUEUED.value,
                owner=owner,
                **search,
            )
            session.add(job)
            session.flush()
            ids = workload_ids(session, [task.workload_key for task in tasks])
            session.add_all(
                ModelJobTask(
                    model_job_id=job.id,
                    position=position,
                    name=task.name,
                    weight=task.weight,
                    workload_id=workload_id,
                    default_schedule=task.default_schedule,
                    reused_records=task.reused_records,
                )
                for position, (task, workload_id) in enumerate(zip(tasks, ids, strict=True))
            )
            return job.id

    def unfinished(self) -> list[int]:
        """The ids of the model jobs that are queued or running, oldest first."""
        with self._sessions.begin() as session:
            query = (
                select(ModelJob.id).where(ModelJob.status.in_(OPEN_STATUSES)).order_by(ModelJob.id)
            )
            return list(session.scalars(query).all())

    def start(self, model_id: int) -> None:
        """Mark a queued model job as running."""
        with self._sessions.begin() as session:
            session.execute(
                update(ModelJob)
                .where(ModelJob.id == model_id, ModelJob.status == JobStatus.QUEUED.value)
                .values(status=JobStatus.RUNNING.value, started_at=utcnow())
            )

    def check_room(self, owner: str, max_open: int) -> None:
        """Refuse early, before an upload is imported, where ``owner`` has ``max_open`` model
        jobs queued or running already (``submit`` counts again as it stores the model job).

        Raises:
            OverLimit: the owner has no room for another model job.
        """
        with self._sessions.begin() as session:
            ensure_room(session, owner, _open_model_jobs(owner), max_open, "model jobs", lock=False)

    def owner(self, model_id: int) -> str | None:
        """The principal the model job belongs to (None: no one's; an admin's to see).

        Raises NotFound if there is no such model job.
        """
        with self._sessions.begin() as session:
            return _model_job(session, model_id).owner

    def onnx(self, model_id: int) -> bytes:
        """The model job's uploaded ONNX file. Raises NotFound if there is no such model job."""
        with self._sessions.begin() as session:
            data = session.scalar(select(ModelJob.onnx).where(ModelJob.id == model_id))
            if data is None:
                raise no_model_job(model_id)
            return data

    def add_round(self, model_id: int, *, position: int, task: int, trials: int) -> int | None:
        """Queue the tuning job of round ``position`` of a running model job, which tunes its
        task at ``task`` for ``trials`` trials in one batch; returns the job's id, or None when
        the model job is not running or the round was added already."""
        ids = self._add_rounds(model_id, position, [task], trials)
        return ids[0] if ids else None

    def add_finals(self, model_id: int, *, position: int, tasks: Sequence[int]) -> list[int]:
        """Queue the finals of the model job's tuned ``tasks`` (positions), at rounds
        ``position`` onwards, all in one transaction: each is a tuning job of no trials whose
        final (``autosched.finals.retiming``) times the task's fastest candidates again side by
        side with its untuned program. Returns the jobs' ids; none when the model job is not
        running, has no finals (0 finalists) or its finals were added already."""
        return self._add_rounds(model_id, position, tasks, 0)

    def _add_rounds(
        self, model_id: int, position: int, tasks: Sequence[int], trials: int
    ) -> list[int]:
        try:
            with self._sessions.begin() as session:
                model = _model_job(session, model_id)
                workloads = dict(
                    session.execute(
                        select(ModelJobTask.position, ModelJobTask.workload_id).where(
                            ModelJobTask.model_job_id == model_id,
                            ModelJobTask.position.in_(tasks),
                        )
                    ).all()
                )
                if (
                    model.status != JobStatus.RUNNING.value
                    or any(workloads.get(task) is None for task in tasks)
                    or not (trials or model.finalists)
                ):
                    return []
                ids = []
                for offset, task in enumerate(tasks):
                    job = queued_job(
                        workloads[task],
                        model.target_id,
                        model.owner,
                        trials=trials,
                        batch_size=max(trials, 1),
                        strategy=model.strategy,
                        seed=model.seed,
                    )
                    session.add(job)
                    session.flush()
                    if not trials:
                        Finals.add(session, job.id, model.finalists, model.final_rounds)
                    session.add(
                        ModelJobRound(
                            model_job_id=model_id,
                            position=position + offset,
                            task=task,
                            job_id=job.id,
                            trials=trials,
                        )
                    )
                    ids.append(job.id)
                return ids
        except IntegrityError:  # another driver added these rounds first
            return []

    def record_round(self, round_id: int, result: RoundResult) -> None:
        """Keep what an ended round taught the task scheduler; a round recorded already keeps
        its first record."""
        with self._sessions.begin() as session:
            session.execute(
                update(ModelJobRound)
                .where(ModelJobRound.id == round_id, ModelJobRound.recorded_at.is_(None))
                .values(
                    measured=result.measured,
                    best_secs=result.best_secs,
                    task_finished=result.task_finished,
                    problem=result.problem,
                    recorded_at=utcnow(),
                )
            )

    def end(
        self,
        model_id: int,
        status: JobStatus,
        *,
        reason: str | None = None,
        output_check: dict[str, Any] | None = None,
    ) -> bool:
        """End a model job that has not ended yet with a final status, why (if it fell short)
        and its output check; False if it had ended already.

        Raises:
            ValueError: ``status`` is not final.
        """
        if not status.final:
            raise ValueError(f"a model job ends with a final status, not {status.name}")
        with self._sessions.begin() as session:
            ended = session.execute(
                update(ModelJob)
                .where(ModelJob.id == model_id, ModelJob.status.in_(OPEN_STATUSES))
                .values(
                    status=status.value,
                    finished_at=utcnow(),
                    reason=reason,
                    output_check=output_check,
                )
            )
            return ended.rowcount > 0

    def cancel(self, model_id: int) -> ModelJobProgress:
        """Stop a model job and its round's tuning job; one that already ended keeps its status.

        Raises NotFound if there is no such model job.
        """
        progress = self.progress(model_id)
        if self.end(model_id, JobStatus.CANCELLED):
            jobs = JobStore(self._log)
            for round_ in progress.rounds:
                if not round_.recorded:
                    jobs.cancel(round_.job_id)
        return self.progress(model_id)

    def progress(self, model_id: int) -> ModelJobProgress:
        """A model job with its tasks and rounds. Raises NotFound if there is no such job."""
        with self._sessions.begin() as session:
            return _progress(session, _model_job(session, model_id))

    def page(
        self, *, limit: int, offset: int, owner: str | None = None
    ) -> tuple[list[ModelJobProgress], int]:
        """A page of model jobs, newest first, and how many there are in all; with ``owner``,
        only that principal's (without: every model job, as an admin sees them)."""
        mine = true() if owner is None else ModelJob.owner == owner
        with self._sessions.begin() as session:
            total = session.scalar(select(func.count(ModelJob.id)).where(mine)) or 0
            rows = session.scalars(
                select(ModelJob)
                .where(mine)
                .order_by(ModelJob.id.desc())
                .limit(limit)
                .offset(offset)
            ).all()
            return [_progress(session, row) for row in rows], total


def _open_model_jobs(owner: str) -> Select:
    """How many model jobs of ``owner`` are queued or running."""
    return select(func.count(ModelJob.id)).where(
        ModelJob.owner == owner, ModelJob.status.in_(OPEN_STATUSES)
    )


def no_model_job(model_id: int) -> NotFound:
    """The error for a model job that is not there (or not the caller's to see: the same
    answer)."""
    return NotFound(f"no model job with id {model_id}")


def _model_job(session: Session, model_id: int) -> ModelJob:
    job = session.get(ModelJob, model_id)
    if job is None:
        raise no_model_job(model_id)
    return job


def _progress(session: Session, job: ModelJob) -> ModelJobProgress:
    target = session.get(Target, job.target_id)
    assert target is not None
    rounds = [
        record_of(
            ModelRoundRecord,
            row,
            recorded=row.recorded_at is not None,
            measured=row.measured or 0,
            task_finished=bool(row.task_finished),
        )
        for row in session.scalars(
            select(ModelJobRound)
            .where(ModelJobRound.model_job_id == job.id)
            .order_by(ModelJobRound.position)
        )
    ]
    measured: dict[int, int] = {
        task: count
        for task, count in session.execute(
            select(ModelJobRound.task, func.count(Measurement.id))
            .join(Candidate, Candidate.job_id == ModelJobRound.job_id)
            .join(Measurement, Measurement.candidate_id == Candidate.id)
            .where(
                ModelJobRound.model_job_id == job.id,
                Candidate.trace_json != BASELINE_TRACE,
                Measurement.imported_at.is_(None),
            )
            .group_by(ModelJobRound.task)
        )
    }
    rounds_of: dict[int, list[ModelRoundRecord]] = defaultdict(list)
    for round_ in rounds:
        rounds_of[round_.task].append(round_)
    tasks = []
    for task, key in session.execute(
        select(ModelJobTask, Workload.key)
        .outerjoin(Workload, Workload.id == ModelJobTask.workload_id)
        .where(ModelJobTask.model_job_id == job.id)
        .order_by(ModelJobTask.position)
    ):
        problem = next((r.problem for r in rounds_of[task.position] if r.problem), None)
        final = next((r.job_id for r in rounds_of[task.position] if not r.trials), None)
        best, baseline = (None if final is None else _side_by_side(session, final)) or (
            _best_secs(session, task.workload_id, job.target_id),
            _baseline_secs(session, task.workload_id, job.target_id),
        )
        tasks.append(
            record_of(
                ModelTaskProgress,
                task,
                workload_key=key,
                rounds=sum(r.trials > 0 for r in rounds_of[task.position]),
                trials=measured.get(task.position, 0),
                best_secs=best,
                baseline_secs=baseline,
                default_schedule=task.default_schedule or problem,
            )
        )
    return record_of(
        ModelJobProgress,
        job,
        target=target_info(target),
        inputs=list(job.inputs.get("inputs", [])),
        status=JobStatus(job.status),
        tasks=tuple(tasks),
        rounds=tuple(rounds),
    )


def _side_by_side(session: Session, job_id: int) -> tuple[float, float] | None:
    """The winner's and the untuned program's re-timed medians in the final of ``job_id``
    (a task's final round), where the untuned program was timed in it."""
    medians = final_medians(session, job_id)
    if medians.winner is None or medians.untuned is None:
        return None
    return medians.winner, medians.untuned


def _best_secs(session: Session, workload_id: int | None, target_id: int) -> float | None:
    if workload_id is None:
        return None
    return session.scalar(
        select(BestRecord.median_secs).where(
            BestRecord.workload_id == workload_id, BestRecord.target_id == target_id
        )
    )


def _baseline_secs(session: Session, workload_id: int | None, target_id: int) -> float | None:
    """The untuned program's latency, measured by any job of the workload on the target."""
    if workload_id is None:
        return None
    return session.scalar(
        select(Measurement.median_secs)
        .join(Candidate, Candidate.id == Measurement.candidate_id)
        .where(
            Candidate.workload_id == workload_id,
            Candidate.target_id == target_id,
            Candidate.trace_json == BASELINE_TRACE,
            Measurement.median_secs.is_not(None),
        )
        .order_by(Measurement.id)
        .limit(1)
    )
