"""Measuring candidates on this machine: parallel isolated builds, then exclusive isolated timing.

Builds of one batch run in parallel child processes; timing runs afterwards, one candidate at a
time in its own child, so no build competes with a timed run for the cores. On a CPU, candidates
timed while the machine itself ran slow are timed again (``autosched.measure.spells``).
"""

from __future__ import annotations

import math
import queue
import shutil
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

from autosched.errors import Cancelled
from autosched.measure import sandbox
from autosched.measure.child import ChildDied, ChildProcess, ChildTimeout, Request, RequestFailed
from autosched.measure.config import MeasureConfig
from autosched.measure.program import BuildRequest, Built, RoundRequest, RunRequest, VerifyRequest
from autosched.measure.spells import ControlRequest, SpellWatch
from autosched.records import ErrorKind, MeasureResult, WorkloadRef
from autosched.target import thread_env


class Measurer(Protocol):
    """Builds and times candidates of a workload on one target.

    Failures are data: every candidate gets a MeasureResult, with an error kind where it failed.
    """

    def measure(self, workload: WorkloadRef, traces: Sequence[str]) -> list[MeasureResult]:
        """Build and time each trace; results come back in the order of ``traces``."""
        ...

    def verify(self, workload: WorkloadRef, trace: str, seed: int) -> MeasureResult | None:
        """Check a candidate's output on fresh inputs drawn from ``seed``.

        Returns None when it matches the reference, else a result with the error (``incorrect``
        for a wrong answer, or the kind of failure that prevented the check).
        """
        ...

    def close(self) -> None:
        """Stop the measuring processes."""
        ...


@runtime_checkable
class Retimer(Protocol):
    """A Measurer that can also time candidates again side by side (``LocalMeasurer``)."""

    def retime(
        self, workload: WorkloadRef, traces: Sequence[str], rounds: int
    ) -> list[list[float]]: ...


_Program = tuple[str, str]
"""A candidate program: its workload's key and its trace. A trace alone does not name a program:
two shapes of one operator can share a trace."""

KEPT_WORKLOADS = 256
"""Workloads whose fastest libraries a measurer keeps for `retime`: every task of a model (52 in
mobilenet_v3_small, whose finals come after all their rounds), so that no final builds its
programs again. A kernel's library is about 30 kB: 8 of each of 256 workloads, 60 MB at most."""


def _now() -> datetime:
    return datetime.now(UTC)


def _median(result: MeasureResult) -> float | None:
    return result.median


def _round_secs(samples: dict[str, float]) -> float:
    return sum(samples.values())


def _failure(kind: ErrorKind, message: str, started_at: datetime, **extra: float) -> MeasureResult:
    return MeasureResult(
        error_kind=kind, error_msg=message, started_at=started_at, finished_at=_now(), **extra
    )


class LocalMeasurer:
    """A Measurer that uses child processes on this machine.

    Built libraries of the latest batch are kept until the next batch so that verifying one of its
    candidates does not build it again; those of the ``keep`` fastest candidates of each workload
    measured so far (of the ``KEPT_WORKLOADS`` most recently measured) are kept for good, so that
    `retime` times them without building them again. Once ``cancel``
    is set, `measure` raises Cancelled before the next candidate instead of finishing the batch.
    """

    def __init__(
        self,
        target: dict,
        config: MeasureConfig | None = None,
        cancel: threading.Event | None = None,
        keep: int = 8,
    ) -> None:
        self._target = target
        self._config = config or MeasureConfig()
        self._cancel = cancel or threading.Event()
        limit = self._config.max_tasks_per_process
        limits = self._config.limits(str(target.get("kind")))
        self._builders: queue.SimpleQueue[ChildProcess] = queue.SimpleQueue()
        self._all_builders = [
            ChildProcess(env={"TVM_NUM_THREADS": "1"}, max_requests=limit, limits=limits)
            for _ in range(self._config.builders)
        ]
        for builder in self._all_builders:
            self._builders.put(builder)
        self._runner = ChildProcess(env=thread_env(target), max_requests=limit, limits=limits)
        watched = target.get("kind") == "llvm" and self._config.watch_spells
        self._spells = SpellWatch(self._time_control) if watched else None
        self._control_fails = False
        for child in [*self._all_builders, self._runner]:
            child.start()
        self._workdir = sandbox.scratch_dir("autosched-measure-")
        (self._workdir / "fastest").mkdir()
        sandbox.give_to_sandbox(self._workdir / "fastest")
        self._batch = 0
        self._artifacts: dict[_Program, str] = {}  # its library in this batch
        self._builds: dict[str, Built] = {}  # library: how it was built
        self._verify_builds = 0
        self._keep = keep
        # per workload key, least recently measured first: trace -> (median, artifact)
        self._fastest: dict[str, dict[str, tuple[float, str]]] = {}
        self._kept_count = 0
        self._start_batch()

    @property
    def config(self) -> MeasureConfig:
        return self._config

    def measure(self, workload: WorkloadRef, traces: Sequence[str]) -> list[MeasureResult]:
        self._start_batch()
        with ThreadPoolExecutor(max_workers=len(self._all_builders)) as pool:
            built = list(
                pool.map(
                    lambda item: self._build(workload, item[1], str(item[0])), enumerate(traces)
                )
            )
        runnable = [index for index, outcome in enumerate(built) if isinstance(outcome, tuple)]

        def time_candidate(index: int) -> MeasureResult:
            outcome = built[index]
            assert isinstance(outcome, tuple)
            return self._run(workload, traces[index], outcome)

        if self._spells is None:
            timed = {index: time_candidate(index) for index in runnable}
        else:
            timed = self._spells.time(runnable, time_candidate, _median)
        results = [
            timed[index] if isinstance(outcome, tuple) else outcome
            for index, outcome in enumerate(built)
        ]
        self._keep_fastest(workload, traces, results)
        return results

    @property
    def spells(self) -> int:
        """Stretches of candidates this measurer found timed in a slow spell, each timed again
        at most ``spells.RETIMES`` times (``autosched.measure.spells``; CPU targets only)."""
        return 0 if self._spells is None else self._spells.spells

    def verify(self, workload: WorkloadRef, trace: str, seed: int) -> MeasureResult | None:
        started_at = _now()
        artifact = self._timed_library_to_check(workload, trace)
        if artifact is None:
            # checked as it packs its weights itself; each build has a name of its own (a process
            # loads a library path once)
            self._verify_builds += 1
            name = f"verify-{self._verify_builds}"
            outcome = self._build(workload, trace, name, prepacked=False)
            if isinstance(outcome, MeasureResult):
                return outcome
            artifact = str(self._workdir / f"batch-{self._batch}" / f"{name}.so")
        request = VerifyRequest(workload, artifact, self._target, seed, self._config.device_index)
        try:
            mismatch = self._runner.call(request, self._config.run_timeout_secs)
        except ChildTimeout as error:
            return _failure(ErrorKind.RUN_TIMEOUT, str(error), started_at)
        except ChildDied as error:
            return _failure(ErrorKind.CRASH, str(error), started_at)
        except RequestFailed as error:
            return _failure(ErrorKind.RUN, str(error), started_at)
        if mismatch is not None:
            return _failure(ErrorKind.INCORRECT, mismatch, started_at)
        return None

    def _timed_library_to_check(self, workload: WorkloadRef, trace: str) -> str | None:
        """The library timed for the program, of this batch or kept, where `verify` may run it:
        one built with its weights packed ahead is checked as it packs them itself."""
        kept = self._fastest.get(workload.key, {}).get(trace)
        artifact = self._artifacts.get((workload.key, trace)) or (kept[1] if kept else None)
        return None if artifact is None or self._builds[artifact].prepacked else artifact

    def retime(
        self, workload: WorkloadRef, traces: Sequence[str], rounds: int
    ) -> list[list[float]]:
        """Time the candidates of ``traces`` again, side by side: ``rounds`` rounds, each timing
        every candidate once, starting one further along than the round before, so a slow spell
        of the machine falls on all of them alike; on a CPU, a round timed in a slow spell is
        timed again (``autosched.measure.spells``). Returns each candidate's samples, a round's
        at a time; a candidate that no longer builds gets none.

        Raises:
            RequestFailed, ChildTimeout, ChildDied: a round of timing failed.
        """
        self._start_batch()
        artifacts = {trace: kept[1] for trace, kept in self._fastest.get(workload.key, {}).items()}
        missing = [trace for trace in dict.fromkeys(traces) if trace not in artifacts]
        with ThreadPoolExecutor(max_workers=len(self._all_builders)) as pool:
            built = pool.map(
                lambda item: self._build(workload, item[1], str(item[0])), enumerate(missing)
            )
            for trace, outcome in zip(missing, built, strict=True):
                if isinstance(outcome, tuple):
                    artifacts[trace] = self._artifacts[workload.key, trace]
        usable = [trace for trace in dict.fromkeys(traces) if trace in artifacts]
        candidates = {trace: (path, self._builds[path].args) for trace, path in artifacts.items()}
        timeout = self._config.run_timeout_secs * math.ceil(len(usable) / self._config.repeat)

        def time_round(start: int) -> dict[str, float]:
            self._check_cancel()
            order = usable[start % len(usable) :] + usable[: start % len(usable)]
            request = RoundRequest(
                workload, tuple(candidates[trace] for trace in order), self._target, self._config
            )
            return dict(zip(order, self._runner.call(request, timeout), strict=True))

        starts = range(rounds if usable else 0)
        if self._spells is None:
            timed = {start: time_round(start) for start in starts}
        else:
            timed = self._spells.time(starts, time_round, _round_secs, every=1)
        samples = {trace: [timed[start][trace] for start in starts] for trace in usable}
        return [samples.get(trace, []) for trace in traces]

    def _keep_fastest(
        self, workload: WorkloadRef, traces: Sequence[str], results: Sequence[MeasureResult]
    ) -> None:
        """Keep the libraries of the ``keep`` fastest candidates of the workload measured so far,
        for `retime`, and those of at most ``KEPT_WORKLOADS`` workloads, the most recently
        measured."""
        if self._keep == 0:
            return
        fastest = self._fastest.pop(workload.key, {})
        self._fastest[workload.key] = fastest
        for trace, result in zip(traces, results, strict=True):
            median = result.median
            if median is None or trace in fastest:
                continue
            if len(fastest) >= self._keep:
                slowest = max(fastest, key=lambda kept: fastest[kept][0])
                if fastest[slowest][0] <= median:
                    continue
                self._drop_kept(fastest.pop(slowest)[1])
            self._kept_count += 1
            kept = str(self._workdir / "fastest" / f"{self._kept_count}.so")
            artifact = self._artifacts[workload.key, trace]
            shutil.copyfile(artifact, kept)
            self._builds[kept] = self._builds[artifact]
            fastest[trace] = (median, kept)
        while len(self._fastest) > KEPT_WORKLOADS:
            for _, artifact in self._fastest.pop(next(iter(self._fastest))).values():
                self._drop_kept(artifact)

    def _drop_kept(self, artifact: str) -> None:
        Path(artifact).unlink(missing_ok=True)
        del self._builds[artifact]

    def close(self) -> None:
        for child in [*self._all_builders, self._runner]:
            child.close()
        shutil.rmtree(self._workdir, ignore_errors=True)

    def _start_batch(self) -> None:
        batch = self._workdir / f"batch-{self._batch}"
        shutil.rmtree(batch, ignore_errors=True)
        self._builds = {
            path: built for path, built in self._builds.items() if Path(path).parent != batch
        }
        self._batch += 1
        (self._workdir / f"batch-{self._batch}").mkdir()
        sandbox.give_to_sandbox(self._workdir / f"batch-{self._batch}")
        self._artifacts = {}

    def _build(
        self, workload: WorkloadRef, trace: str, name: str, *, prepacked: bool = True
    ) -> tuple[datetime, Built] | MeasureResult:
        """Build one candidate into ``name``.so: (start time, the build) on success, else the
        failure. Only a ``prepacked`` build (the one timed) becomes the trace's library."""
        self._check_cancel()
        started_at = _now()
        artifact = str(self._workdir / f"batch-{self._batch}" / f"{name}.so")
        builder = self._builders.get()
        try:
            request = self._build_request(workload, trace, artifact, prepacked)
            built = builder.call(request, self._config.build_timeout_secs)
        except ChildTimeout as error:
            return _failure(ErrorKind.BUILD_TIMEOUT, str(error), started_at)
        except (ChildDied, RequestFailed) as error:
            return _failure(ErrorKind.BUILD, str(error), started_at)
        finally:
            self._builders.put(builder)
        self._builds[artifact] = built
        if prepacked:
            self._artifacts[workload.key, trace] = artifact
        return started_at, built

    def _time_control(self) -> float | None:
        """One timing of the spell watch's control in the timing process; None where it failed
        (and, for a control that cannot run here at all, from then on)."""
        if self._control_fails:
            return None
        request = ControlRequest(self._target)
        try:
            return self._runner.call(request, self._config.run_timeout_secs)
        except (ChildTimeout, ChildDied):
            return None
        except RequestFailed:
            self._control_fails = True
            return None

    def _check_cancel(self) -> None:
        if self._cancel.is_set():
            raise Cancelled("measuring was cancelled")

    def _build_request(
        self, workload: WorkloadRef, trace: str, artifact_path: str, prepacked: bool
    ) -> Request:
        """The request that builds one candidate into ``artifact_path``."""
        return BuildRequest(workload, trace, self._target, artifact_path, prepacked)

    def _run(
        self, workload: WorkloadRef, trace: str, outcome: tuple[datetime, Built]
    ) -> MeasureResult:
        started_at, built = outcome
        build_secs = built.secs
        artifact = self._artifacts[workload.key, trace]
        request = RunRequest(workload, artifact, built.args, self._target, self._config)
        try:
            samples = self._runner.call(request, self._config.run_timeout_secs)
        except ChildTimeout as error:
            return _failure(ErrorKind.RUN_TIMEOUT, str(error), started_at, build_secs=build_secs)
        except ChildDied as error:
            return _failure(ErrorKind.CRASH, str(error), started_at, build_secs=build_secs)
        except RequestFailed as error:
            return _failure(ErrorKind.RUN, str(error), started_at, build_secs=build_secs)
        return MeasureResult(
            samples=tuple(samples),
            build_secs=build_secs,
            started_at=started_at,
            finished_at=_now(),
        )
