"""Faulty programs for tests: candidates that crash, hang or compute the wrong answer.

`FaultyMeasurer` is a real LocalMeasurer whose builds of chosen traces compile one of these
programs instead, so the faults happen in the real measuring processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import tvm

from autosched.measure import LocalMeasurer, MeasureConfig
from autosched.measure.program import Built
from autosched.measure.serving import Request
from autosched.records import WorkloadRef
from autosched.target import to_tvm_target
from autosched.workload import buffer_args

_SIGNATURE = (
    'A: T.Buffer(({m}, {k}), "float32"), B: T.Buffer(({k}, {n}), "float32"), '
    'C: T.Buffer(({m}, {n}), "float32")'
)
_BODIES = {
    "crash": '    T.evaluate(T.call_extern("int32", "abort"))',
    "hang": '    T.evaluate(T.call_extern("int32", "sleep", 1000))',
    "wrong": "    for i, j in T.grid({m}, {n}):\n        C[i, j] = T.float32(0)",
}


def faulty_matmul(fault: str, m: int, n: int, k: int) -> str:
    """TVMScript of a PrimFunc with matmul's signature that crashes, hangs or returns zeros."""
    signature = _SIGNATURE.format(m=m, n=n, k=k)
    body = _BODIES[fault].format(m=m, n=n)
    return f"@T.prim_func\ndef main({signature}):\n{body}\n"


@dataclass(frozen=True)
class BuildSource:
    """Build a PrimFunc given as TVMScript text instead of a candidate's trace."""

    source: str
    target: dict
    artifact_path: str

    def execute(self) -> Built:
        func = tvm.script.from_source(self.source)
        tvm.compile(func, target=to_tvm_target(self.target)).export_library(self.artifact_path)
        return Built(0.0, tuple(buffer_args(func, "faulty")), prepacked=False)


class FaultyMeasurer(LocalMeasurer):
    """Builds the programs in ``faults`` (trace -> TVMScript) in place of those traces."""

    def __init__(self, target: dict, config: MeasureConfig, faults: Mapping[str, str]) -> None:
        super().__init__(target, config)
        self.faults = dict(faults)
        self.measured: list[str] = []

    def measure(self, workload, traces):  # type: ignore[no-untyped-def]
        self.measured.extend(traces)
        return super().measure(workload, traces)

    def _build_request(
        self, workload: WorkloadRef, trace: str, artifact_path: str, prepacked: bool
    ) -> Request:
        if trace in self.faults:
            return BuildSource(self.faults[trace], self._target, artifact_path)
        return super()._build_request(workload, trace, artifact_path, prepacked)


@dataclass(frozen=True)
class Pid:
    """Returns the serving process's id."""

    def execute(self) -> int:
        import os

        return os.getpid()


@dataclass(frozen=True)
class Threads:
    """Returns the width of the serving process's TVM thread pool."""

    def execute(self) -> int:
        import tvm

        return int(tvm.get_global_func("runtime.NumThreads")())


@dataclass(frozen=True)
class ParentPid:
    """Returns the id of the serving process's parent: the fork server that forked it."""

    def execute(self) -> int:
        import os

        return os.getppid()


@dataclass(frozen=True)
class Abort:
    """Kills the serving process with SIGABRT."""

    def execute(self) -> None:
        import os

        os.abort()


@dataclass(frozen=True)
class Sleep:
    """Sleeps for ``secs`` seconds."""

    secs: float

    def execute(self) -> None:
        import time

        time.sleep(self.secs)


@dataclass(frozen=True)
class Fail:
    """Raises ValueError."""

    def execute(self) -> None:
        raise ValueError("this request always fails")


@dataclass(frozen=True)
class MissingCompiler:
    """A build on a host whose C compiler is gone: it fails as TVM's export would."""

    def execute(self) -> Built:
        raise RuntimeError("cc: command not found (linking the candidate's library)")


class NoCompilerMeasurer(LocalMeasurer):
    """A real LocalMeasurer on a host where every build fails (`MissingCompiler`)."""

    def _build_request(
        self, workload: WorkloadRef, trace: str, artifact_path: str, prepacked: bool
    ) -> Request:
        return MissingCompiler()
