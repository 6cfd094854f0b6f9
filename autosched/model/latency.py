"""A compiled model timed whole, as a deployment runs it: its library exported with its manifest
into a scratch directory and timed by `autosched run --time` in a fresh, isolated process (no
``TVM_*`` variable, the pool sized from the manifest, as ``autosched.runtime.load`` sizes it): the
Relax VM's ``main``, ``ROUNDS`` samples of calls for at least the measurer's ``min_repeat_ms``,
their median and 95% interval.

This, not the sum of the tasks' latencies, is what a deployment gets: it counts the kernels that
keep TVM's default schedule, the tasks whose untuned latency is unknown, and what the VM spends
between calls. It is timed in a process of its own because the tuner's is not a user's: the
reference's runtime (ONNX Runtime's spinning pool), the cost model's threads and the measuring
children would share the cores with it (measured: up to a fifth slower in the tuner's process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tvm import relax

from autosched.errors import UserError
from autosched.exports.models import complete_model_manifest, export_library
from autosched.model.compile import OutputCheck, TaskSchedule
from autosched.model.load import Model

TIMEOUT_SECS = 600.0
"""How long the timing process may take (it loads the library and takes ten samples)."""

_KEPT_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
"""The tuner's environment variables the timing process keeps: none that sizes a thread pool."""


_PROCESS_CPUS = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
"""The CPUs this process may run on, read as it imports this module: TVM's thread pool pins the
thread that ran a parallel program to one of them, and a child started from that thread inherits
the pin (the loader would then cut the pool to one thread)."""


@contextmanager
def _on_every_cpu() -> Iterator[None]:
    """This thread on every CPU of the process while the block starts a child, pinned again
    after."""
    if _PROCESS_CPUS is None:
        yield
        return
    pinned = os.sched_getaffinity(0)
    os.sched_setaffinity(0, _PROCESS_CPUS)
    try:
        yield
    finally:
        os.sched_setaffinity(0, pinned)


@dataclass(frozen=True)
class ModelLatency:
    """The whole model's median latency and its 95% interval, in seconds, on ``threads`` of
    TVM's pool (None: the pool as TVM sized it)."""

    median_secs: float
    low_secs: float
    high_secs: float
    threads: int | None

    def as_json(self) -> dict[str, object]:
        return {
            "latency_us": self.median_secs * 1e6,
            "interval_us": [self.low_secs * 1e6, self.high_secs * 1e6],
            "threads": self.threads,
        }


class LatencyNotTimed(Exception):
    """The timing process failed or gave no timing; the message says why, on one line."""


def time_model(
    model: Model,
    executable: relax.VMExecutable,
    schedules: Sequence[TaskSchedule],
    target: dict,
    check: OutputCheck,
) -> ModelLatency:
    """Time ``executable`` (``model`` compiled for ``target`` with ``schedules``, its outputs
    checked) as `autosched run --time` times its exported library.

    Raises:
        LatencyNotTimed: the library could not be written, or the timing process failed.
    """
    with tempfile.TemporaryDirectory(prefix="autosched-latency-") as scratch:
        library = Path(scratch) / "model.so"
        try:
            written = export_library(model, executable, schedules, target, check, library)
            complete_model_manifest(written[1], target, model.path)
        except UserError as error:
            raise LatencyNotTimed(str(error)) from None
        command = [sys.executable, "-I", "-m", "autosched", "run", str(library), "--time", "--json"]
        env = {name: os.environ[name] for name in _KEPT_VARIABLES if name in os.environ}
        try:
            with _on_every_cpu():
                result = subprocess.run(
                    command,
                    cwd=scratch,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=TIMEOUT_SECS,
                    check=False,
                )
        except subprocess.TimeoutExpired:
            raise LatencyNotTimed(f"timing the model took over {TIMEOUT_SECS:.0f} s") from None
        if result.returncode != 0:
            lines = [line for line in result.stderr.splitlines() if line.strip()]
            raise LatencyNotTimed(lines[-1] if lines else f"exit code {result.returncode}")
    document = json.loads(result.stdout)
    timed = document["timing"]["artefact"]
    low, high = timed["interval_us"]
    return ModelLatency(timed["median_us"] * 1e-6, low * 1e-6, high * 1e-6, document["threads"])
