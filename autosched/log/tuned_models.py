"""Whole models tuned for a target and their tasks, in the tuning log: recorded by
``autosched.model.tuning`` once a model's compiled outputs matched its framework's, listed by
`autosched log models`. The tasks' measurements are the workloads' own, in ``store``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select

from autosched.log.queries import best_row, record_of, record_view, workload_ids
from autosched.log.store import LogStore
from autosched.log.tables import Target, TunedModel, TunedModelTask, Workload, utcnow
from autosched.records import BASELINE_TRACE, compiled_schedule


@dataclass(frozen=True)
class ModelTaskEntry:
    """A task of a model: its name, workload key (None when not admitted), weight, and why it
    keeps TVM's default schedule if it does; ``best_secs`` is its workload's best on the
    model's target, when listed."""

    name: str
    workload_key: str | None
    weight: int
    default_schedule: str | None
    best_secs: float | None = None
    untuned_best: bool = False  # the workload's best record is its untuned program, when listed

    @property
    def schedule(self) -> str:
        """What the task compiles with (``autosched.records.compiled_schedule``)."""
        return compiled_schedule(self.default_schedule, self.untuned_best)


@dataclass(frozen=True)
class TunedModelView:
    """A tuned model as `autosched log models` lists it."""

    key: str
    name: str
    format: str
    inputs: list[dict[str, Any]]
    target_json: dict[str, Any]
    estimated_secs: float
    untuned_secs: float
    reference: str
    max_abs_error: float
    tuned_at: datetime
    tasks: tuple[ModelTaskEntry, ...]
    # the compiled model timed whole: its median and 95% interval (None: not timed so)
    measured_secs: float | None = None
    measured_low_secs: float | None = None
    measured_high_secs: float | None = None


class TunedModelStore(LogStore):
    """The tuned models of ``log``: every method is one transaction."""

    def record(
        self,
        *,
        key: str,
        name: str,
        format: str,
        inputs: list[dict[str, Any]],
        target_id: int,
        estimated_secs: float,
        untuned_secs: float,
        reference: str,
        max_abs_error: float,
        tasks: Sequence[ModelTaskEntry],
        measured: tuple[float, float, float] | None = None,
    ) -> None:
        """Record the model ``key`` as tuned for the target, replacing an earlier record of it
        (its tasks with it), with its latency timed whole where it was (``measured``: median,
        low and high of its interval, in seconds). The tasks' workloads must be stored
        already."""
        with self._log.sessions.begin() as session:
            row = session.scalar(
                select(TunedModel).where(TunedModel.key == key, TunedModel.target_id == target_id)
            )
            values = {
                "name": name,
                "format": format,
                "inputs": {"inputs": inputs},
                "estimated_secs": estimated_secs,
                "untuned_secs": untuned_secs,
                "measured_secs": None if measured is None else measured[0],
                "measured_low_secs": None if measured is None else measured[1],
                "measured_high_secs": None if measured is None else measured[2],
                "reference": reference,
                "max_abs_error": max_abs_error,
                "tuned_at": utcnow(),
            }
            if row is None:
                row = TunedModel(key=key, target_id=target_id, **values)
                session.add(row)
                session.flush()
            else:
                for field, value in values.items():
                    setattr(row, field, value)
                session.execute(delete(TunedModelTask).where(TunedModelTask.model_id == row.id))
            ids = workload_ids(session, [task.workload_key for task in tasks])
            session.add_all(
                TunedModelTask(
                    model_id=row.id,
                    workload_id=workload_id,
                    name=task.name,
                    weight=task.weight,
                    default_schedule=task.default_schedule,
                )
                for task, workload_id in zip(tasks, ids, strict=True)
            )

    def list(self) -> list[TunedModelView]:
        """Every tuned model with its tasks and their best latencies, the latest first."""
        with self._log.sessions.begin() as session:
            models = session.execute(
                select(TunedModel, Target)
                .join(Target, Target.id == TunedModel.target_id)
                .order_by(TunedModel.tuned_at.desc(), TunedModel.id.desc())
            ).all()
            views = []
            for model, target in models:
                rows = session.execute(
                    select(TunedModelTask, Workload)
                    .outerjoin(Workload, Workload.id == TunedModelTask.workload_id)
                    .where(TunedModelTask.model_id == model.id)
                    .order_by(TunedModelTask.weight.desc(), TunedModelTask.id)
                ).all()
                tasks = []
                for task, workload in rows:
                    found = None if workload is None else best_row(session, workload.id, target.id)
                    best = None if found is None else record_view(*found)
                    tasks.append(
                        ModelTaskEntry(
                            task.name,
                            None if workload is None else workload.key,
                            task.weight,
                            task.default_schedule,
                            None if best is None else best.median_secs,
                            best is not None and best.trace_json == BASELINE_TRACE,
                        )
                    )
                views.append(
                    record_of(
                        TunedModelView,
                        model,
                        inputs=list(model.inputs.get("inputs", [])),
                        target_json=dict(target.target_json),
                        tasks=tuple(tasks),
                    )
                )
            return views
