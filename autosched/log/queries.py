"""The reads of the tuning log: what is stored of workloads and targets, best records,
measured candidates, the summary and the causes of a job's failures. `TuningLog` answers them;
its own module opens the log and writes to it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import fields
from typing import Any, TypeVar

from sqlalchemy import Select, and_, case, func, select
from sqlalchemy.orm import Session, sessionmaker

from autosched.log.tables import (
    BestRecord,
    Candidate,
    Device,
    FinalistTiming,
    Measurement,
    Target,
    Worker,
    Workload,
)
from autosched.records import (
    ErrorKind,
    RecordView,
    SummaryRow,
    TargetInfo,
    TunedRecord,
    WorkloadInfo,
)

Record = TypeVar("Record")


class LogReads:
    """The queries of a tuning log, each in a transaction of its own on ``_sessions``."""

    _sessions: sessionmaker[Session]

    def find_workload(self, key: str) -> WorkloadInfo | None:
        """Return the workload stored under ``key``, or ``None``."""
        with self._sessions.begin() as session:
            row = session.scalar(select(Workload).where(Workload.key == key))
            return None if row is None else workload_info(row)

    def find_target(self, key: str) -> TargetInfo | None:
        """Return the target stored under ``key``, or ``None``."""
        with self._sessions.begin() as session:
            row = session.scalar(select(Target).where(Target.key == key))
            return None if row is None else target_info(row)

    def best(self, workload_id: int, target_id: int) -> RecordView | None:
        """Return the best record of a workload and target, or ``None`` if there is none yet.

        Of several measurements of the best candidate (one of this log, others imported), the
        one that made it the best is returned.
        """
        with self._sessions.begin() as session:
            row = best_row(session, workload_id, target_id)
            return None if row is None else record_view(*row)

    def tuned_records(self, workload_id: int) -> list[TunedRecord]:
        """The best record of a workload on every target it has one for, ordered by target key,
        each with the fingerprint of the device that measured it."""
        query = (
            select(Target)
            .join(BestRecord, BestRecord.target_id == Target.id)
            .where(BestRecord.workload_id == workload_id)
            .order_by(Target.key)
        )
        tuned: list[TunedRecord] = []
        with self._sessions.begin() as session:
            for target in session.scalars(query).all():
                row = best_row(session, workload_id, target.id)
                if row is None:
                    continue
                device = None if row[1].device_id is None else session.get(Device, row[1].device_id)
                tuned.append(
                    TunedRecord(
                        target_info(target),
                        record_view(*row),
                        None if device is None else device.fingerprint,
                    )
                )
        return tuned

    def machines(self, target_key: str) -> list[dict[str, Any]]:
        """The device fingerprints of the workers ever registered for the target ``target_key``:
        the machines that run it, for the nearest-hardware fallback."""
        devices = (
            select(Worker.device_id)
            .join(Target, Target.id == Worker.target_id)
            .where(Target.key == target_key)
        )
        query = select(Device.fingerprint).where(Device.id.in_(devices)).order_by(Device.id)
        with self._sessions.begin() as session:
            return list(session.scalars(query))

    def records(
        self,
        workload_id: int,
        target_id: int,
        *,
        ok_only: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[RecordView]:
        """Return the measured candidates of a workload and target.

        Args:
            workload_id: The workload.
            target_id: The target.
            ok_only: Only error-free timings, fastest first (verified or not). Otherwise every
                measurement, in the order the candidates were stored.
            limit: At most this many records.
            offset: Skip this many records first.

        Returns:
            The records, in the order described above.
        """
        query = _record_query().where(
            Candidate.workload_id == workload_id, Candidate.target_id == target_id
        )
        if ok_only:
            query = query.where(
                Measurement.error_kind.is_(None), Measurement.median_secs.is_not(None)
            ).order_by(Measurement.median_secs, Candidate.id)
        else:
            query = query.order_by(Candidate.id)
        with self._sessions.begin() as session:
            rows = session.execute(query.limit(limit).offset(offset))
            return [record_view(*row) for row in rows]

    def failure_cause(self, job_id: int) -> str | None:
        """The most frequent kind of failure among a job's measurements, in one line: the kind,
        how many of the job's measurements failed so, and the first line of the latest such
        error; None where none failed."""
        rows = self._job_failures(job_id)
        if not rows:
            return None
        kinds = Counter(kind for kind, _message in rows)
        kind, count = kinds.most_common(1)[0]
        message = next(message for each, message in reversed(rows) if each == kind) or ""
        first_line = message.strip().splitlines()[0] if message.strip() else "no message"
        return f"{kind} ({count} of {len(rows)} failures): {first_line[:300]}"

    def _job_failures(self, job_id: int) -> list[tuple[str, str | None]]:
        query = (
            select(Measurement.error_kind, Measurement.error_msg)
            .join(Candidate, Candidate.id == Measurement.candidate_id)
            .where(Candidate.job_id == job_id, Measurement.error_kind.is_not(None))
            .order_by(Measurement.id)
        )
        with self._sessions.begin() as session:
            return [(str(kind), message) for kind, message in session.execute(query)]

    def count_records(self, workload_id: int, target_id: int) -> int:
        """How many measured candidates a workload and target have."""
        query = (
            select(func.count(Measurement.id))
            .join(Candidate, Candidate.id == Measurement.candidate_id)
            .where(Candidate.workload_id == workload_id, Candidate.target_id == target_id)
        )
        with self._sessions.begin() as session:
            return session.scalar(query) or 0

    def summary(self) -> list[SummaryRow]:
        """Return one row per workload and target that has candidates, ordered by their keys.

        Returns:
            For each pair: the best latency (``None`` without a best record), the number of
            measurements (``trials``), how many of them failed, and the workload's flops.
        """
        counts = (
            select(
                Candidate.workload_id,
                Candidate.target_id,
                func.count(Measurement.id).label("trials"),
                func.count(Measurement.error_kind).label("failed"),
            )
            .outerjoin(Measurement, Measurement.candidate_id == Candidate.id)
            .group_by(Candidate.workload_id, Candidate.target_id)
            .subquery()
        )
        latest_final = (
            select(func.max(FinalistTiming.id).label("id"))
            .group_by(FinalistTiming.candidate_id)
            .subquery()
        )
        retimed = (
            select(FinalistTiming)
            .join(latest_final, latest_final.c.id == FinalistTiming.id)
            .subquery()
        )
        query = (
            select(
                Workload,
                Target,
                BestRecord.median_secs,
                counts.c.trials,
                counts.c.failed,
                retimed.c.median_secs,
                retimed.c.ci_low_secs,
                retimed.c.ci_high_secs,
            )
            .join_from(counts, Workload, Workload.id == counts.c.workload_id)
            .join(Target, Target.id == counts.c.target_id)
            .outerjoin(
                BestRecord,
                and_(
                    BestRecord.workload_id == counts.c.workload_id,
                    BestRecord.target_id == counts.c.target_id,
                ),
            )
            .outerjoin(retimed, retimed.c.candidate_id == BestRecord.candidate_id)
            .order_by(Workload.key, Target.key)
        )
        with self._sessions.begin() as session:
            return [
                SummaryRow(
                    workload_key=workload.key,
                    workload_name=workload.name,
                    workload_params=workload.params,
                    target_key=target.key,
                    target_json=target.target_json,
                    best_latency_secs=best,
                    trials=trials,
                    failed=failed,
                    flops=workload.flops,
                    retimed_secs=median,
                    retimed_low_secs=low,
                    retimed_high_secs=high,
                )
                for workload, target, best, trials, failed, median, low, high in session.execute(
                    query
                )
            ]

    def workload_by_id(self, session: Session, workload_id: int) -> WorkloadInfo:
        """The workload with primary key ``workload_id``, read in ``session``."""
        row = session.get(Workload, workload_id)
        assert row is not None, f"no workload {workload_id}"
        return workload_info(row)


def record_of(record: type[Record], row: object, **computed: Any) -> Record:
    """The ``record`` (a dataclass) of a table's ``row``: each field from the column of the same
    name, but for the ``computed`` fields (renamed or derived), given here."""
    columns = {
        field.name: getattr(row, field.name)
        for field in fields(record)
        if field.name not in computed
    }
    return record(**columns, **computed)


def workload_ids(session: Session, keys: Sequence[str | None]) -> list[int | None]:
    """The id of the stored workload of each of ``keys``, read in ``session`` (None for None); a
    key of no stored workload raises KeyError."""
    given = [key for key in keys if key is not None]
    query = select(Workload.key, Workload.id).where(Workload.key.in_(given))
    ids = dict(session.execute(query).tuples().all())
    return [None if key is None else ids[key] for key in keys]


def workload_info(row: Workload) -> WorkloadInfo:
    return record_of(WorkloadInfo, row)


def target_info(row: Target) -> TargetInfo:
    return record_of(TargetInfo, row)


def best_row(
    session: Session, workload_id: int, target_id: int
) -> tuple[Candidate, Measurement] | None:
    """The best candidate of a workload and target with the measurement that made it the best."""
    query = (
        _record_query()
        .join(BestRecord, BestRecord.candidate_id == Candidate.id)
        .where(BestRecord.workload_id == workload_id, BestRecord.target_id == target_id)
        .order_by(_made_best(), Measurement.id)
        .limit(1)
    )
    row = session.execute(query).one_or_none()
    return None if row is None else (row[0], row[1])


def _made_best() -> Any:
    """An ordering that puts first, of a best candidate's measurements, the one that made it the
    best record (its median), then its other verified timings."""
    return case(
        (
            and_(Measurement.verified.is_(True), Measurement.median_secs == BestRecord.median_secs),
            0,
        ),
        (and_(Measurement.verified.is_(True), Measurement.median_secs.is_not(None)), 1),
        else_=2,
    )


def _record_query() -> Select[tuple[Candidate, Measurement]]:
    return select(Candidate, Measurement).join(
        Measurement, Measurement.candidate_id == Candidate.id
    )


def record_view(candidate: Candidate, measurement: Measurement) -> RecordView:
    """A candidate and its measurement as the rest of autosched reads them."""
    return RecordView(
        candidate_id=candidate.id,
        trace_json=candidate.trace_json,
        program_hash=candidate.program_hash,
        median_secs=measurement.median_secs,
        samples=tuple(measurement.samples),
        error_kind=None if measurement.error_kind is None else ErrorKind(measurement.error_kind),
        error_msg=measurement.error_msg,
        verified=measurement.verified,
        job_id=candidate.job_id,
        measured_at=measurement.finished_at,
        tvm_version=measurement.tvm_version,
        imported=measurement.imported_at is not None,
    )
