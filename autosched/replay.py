"""A recorded tuning log used as a measurement backend, so searches run without hardware time.

`ReplayMeasurer` answers each candidate with what the log recorded for its program, a prediction,
or a refusal; it builds and runs nothing. `check_not_source` keeps its answers out of that log.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import make_url

from autosched.errors import UserError
from autosched.log import TuningLog
from autosched.measure.local import Measurer
from autosched.records import ErrorKind, MeasureResult, RecordView, WorkloadRef
from autosched.schedule import apply_trace, program_hash
from autosched.target import target_key
from autosched.workload import Workload, resolve_workload

# Latencies in seconds for candidates of a workload, in the order of the traces; None: no guess.
Predict = Callable[[WorkloadRef, Sequence[str]], Sequence[float | None]]


@dataclass(frozen=True)
class ReplayCounts:
    """How a ReplayMeasurer answered the candidates it was asked to measure.

    ``replayed`` got a measurement (or failure) recorded on real hardware, ``predicted`` a latency
    from the prediction function, ``refused`` an ``unrecorded`` error. Verifications are not
    counted: each answers for a candidate that was counted when it was measured.
    """

    replayed: int = 0
    predicted: int = 0
    refused: int = 0


class ReplayMeasurer:
    """A Measurer that answers from the records of ``source`` for one target.

    A candidate is identified by its program: its trace is replayed onto the workload and the
    program hash looked up among the source's records of that workload and target (read once per
    workload, when it is first measured). Then

    * a recorded program gets what was recorded. A record with samples comes back as those samples
      without error, as a real measurement would have (timing does not check the output); the
      error the correctness check recorded for it (``incorrect``, say) comes back from `verify`.
      A record without samples comes back as its error, from `measure` and `verify` alike.
    * a program the source never measured (or whose trace does not replay onto the workload) gets,
      when ``predict`` is given and has a guess, a result whose single sample is the predicted
      latency; `verify` passes it. Otherwise it is refused: an ``unrecorded`` error.

    Records of kind ``unrecorded`` (a simulated run's log used as the source) count as unmeasured.
    Answers are simulated, so they must never be recorded into ``source`` as measurements: see
    `check_not_source`. The source log belongs to the caller, who closes it.
    """

    def __init__(self, source: TuningLog, target: dict, *, predict: Predict | None = None) -> None:
        self._source = source
        stored_target = source.find_target(target_key(target))
        self._target_id = None if stored_target is None else stored_target.id
        self._predict = predict
        self._workloads: dict[str, Workload] = {}
        self._records: dict[str, dict[str, RecordView]] = {}
        self._predicted_programs: set[tuple[str, str]] = set()
        self._replayed = self._predicted = self._refused = 0

    @property
    def source_url(self) -> str:
        """The URL of the log the answers come from."""
        return self._source.url

    @property
    def counts(self) -> ReplayCounts:
        """How the candidates measured so far were answered."""
        return ReplayCounts(self._replayed, self._predicted, self._refused)

    def measure(self, workload: WorkloadRef, traces: Sequence[str]) -> list[MeasureResult]:
        records = self._records_of(workload)
        hashes = [self._program_hash(workload, trace) for trace in traces]
        unknown = [i for i, digest in enumerate(hashes) if digest and digest not in records]
        predicted = self._guess(workload, [traces[i] for i in unknown])
        guesses = dict(zip(unknown, predicted, strict=True))
        return [
            self._answer(workload, digest, records, guesses.get(index))
            for index, digest in enumerate(hashes)
        ]

    def verify(self, workload: WorkloadRef, trace: str, seed: int) -> MeasureResult | None:
        digest = self._program_hash(workload, trace)
        if digest is None:
            return _refusal(workload, None)
        record = self._records_of(workload).get(digest)
        if record is None:
            predicted = (workload.key, digest) in self._predicted_programs
            return None if predicted else _refusal(workload, digest)
        if record.error_kind is None:
            return None
        return MeasureResult(error_kind=record.error_kind, error_msg=record.error_msg)

    def close(self) -> None:
        """Nothing to stop: no process was started, and the source log is the caller's."""

    def _answer(
        self,
        workload: WorkloadRef,
        digest: str | None,
        records: dict[str, RecordView],
        guess: float | None,
    ) -> MeasureResult:
        """The result of one candidate, counted: recorded, else predicted, else refused."""
        if digest is not None and digest in records:
            self._replayed += 1
            return _replay(records[digest])
        if digest is None or guess is None:
            self._refused += 1
            return _refusal(workload, digest)
        self._predicted += 1
        self._predicted_programs.add((workload.key, digest))
        return MeasureResult(samples=(guess,))

    def _program_hash(self, workload: WorkloadRef, trace: str) -> str | None:
        """The hash of the program ``trace`` makes of the workload; None if it does not replay."""
        if workload.key not in self._workloads:
            self._workloads[workload.key] = resolve_workload(workload)
        try:
            schedule = apply_trace(self._workloads[workload.key].mod, trace)
        except Exception:  # TVM reports a trace that does not fit in several error types
            return None
        return program_hash(schedule.mod)

    def _records_of(self, workload: WorkloadRef) -> dict[str, RecordView]:
        """The source's records of the workload on the target, by program hash."""
        if workload.key not in self._records:
            stored = self._source.find_workload(workload.key)
            records = (
                []
                if stored is None or self._target_id is None
                else self._source.records(stored.id, self._target_id)
            )
            self._records[workload.key] = {
                record.program_hash: record
                for record in records
                if record.error_kind is not ErrorKind.UNRECORDED
            }
        return self._records[workload.key]

    def _guess(self, workload: WorkloadRef, traces: list[str]) -> list[float | None]:
        """The predicted latency of each unrecorded candidate; None where there is none."""
        if self._predict is None or not traces:
            return [None] * len(traces)
        guesses = list(self._predict(workload, traces))
        for latency in guesses:
            if latency is not None and not (math.isfinite(latency) and latency > 0):
                raise ValueError(f"predicted latency {latency} is not a positive number of seconds")
        return guesses


def check_not_source(measurer: Measurer, log: TuningLog) -> None:
    """Refuse to record into ``log`` the simulated measurements of a replay of that same log.

    The same SQLite file reached by different paths, or the same PostgreSQL database through
    different drivers or credentials, counts as the same log.

    Raises:
        UserError: ``measurer`` is a ReplayMeasurer whose source is ``log``.
    """
    if not isinstance(measurer, ReplayMeasurer):
        return
    if _database(measurer.source_url) == _database(log.url):
        raise UserError("simulated measurements cannot be recorded into the log they replay")


def _database(url: str) -> tuple[str, str | None, int | None, str | None]:
    """What identifies the database behind a log URL: backend, host, port, database (or file)."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() == "sqlite" and database and database != ":memory:":
        database = str(Path(database).resolve())
    return parsed.get_backend_name(), parsed.host, parsed.port, database


def _replay(record: RecordView) -> MeasureResult:
    """What measuring the recorded candidate returned: its samples, or the error that left none."""
    if record.samples:
        return MeasureResult(samples=record.samples)
    return MeasureResult(error_kind=record.error_kind or ErrorKind.RUN, error_msg=record.error_msg)


def _refusal(workload: WorkloadRef, digest: str | None) -> MeasureResult:
    if digest is None:
        message = f"the trace does not replay onto {workload.name}, so no log holds its program"
    else:
        message = f"program {digest} of {workload.name} is not in the replayed log"
    return MeasureResult(error_kind=ErrorKind.UNRECORDED, error_msg=message)
