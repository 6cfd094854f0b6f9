"""Benchmark: the conformance corpus, models written by their own projects (torchvision's image
classifiers, Hugging Face ``transformers`` models built from their configs with random weights,
PyTorch's own Transformer encoder), each exported as its users export it (``torch.export`` to
``.pt2``, ``torch.onnx.export`` to ``.onnx``) and taken through what ``autosched tune MODEL
--trials N`` does: import, prepare, tasks, tuning at a small budget, compile, outputs checked
against the framework's. A row per model and format: its tasks, the seconds its compile took,
pass or the reason, the largest difference from the framework's outputs and the spread of those
outputs (a check of near-constant outputs proves little), and its latency beside PyTorch eager's
and ONNX Runtime's on the same cores.

With ``--service``, the ONNX models go through the tuning service instead, as its users send
them: one `autosched serve` on loopback for the whole run (its log a SQLite file, tokens from
`autosched token create`) with one `autosched worker` process measuring in bubblewrap's sandbox;
each model, exported as one self-contained file, is submitted with `autosched submit MODEL.onnx`,
followed with `autosched status --model ID --json` until its model job ends, and its library
downloaded and run once in TVM's Relax VM on the model's example inputs against ONNX Runtime's
outputs. A row per model (format "onnx (service)"): its tasks, the server's output check, the
library's difference from ONNX Runtime, the seconds of the upload, the model job and the
download, the library's bytes, and pass or the server's one-line reason.

The corpus is ``autosched.bench.corpus``: every model is built with a fixed seed and
initialised by one rule, whatever its name: weights initialised to zeros are drawn at random, and
batch norms take the statistics of a random batch (fresh ones are the identity, which leaves the
deep classifiers' outputs near constant). Each model and format runs in a process of its own, so
one that crashes TVM fails its row only.

    pip install -e ".[test,corpus]"
    python benchmarks/conformance.py [--trials 1] [--only bert gpt2 ...] [--formats pt2 onnx]
                                     [--results rows.jsonl] [--work DIR]
    python benchmarks/conformance.py --service [--trials 1] [--only ...] [--results rows.jsonl]
    python benchmarks/conformance.py --table rows.jsonl   # the table of rows run before
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import torch
import tvm

from autosched.bench.corpus import CORPUS, CorpusModel, export
from autosched.bench.models import cpu_name, vm_inference
from autosched.bench.timing import time_repeats, use_threads
from autosched.client.http import ServiceClient
from autosched.errors import ServiceUnavailable, UserError
from autosched.log import TuningLog
from autosched.measure import LocalMeasurer
from autosched.model.compile import (
    OutputMismatch,
    best_schedules,
    compile_model,
    random_model_inputs,
    run_model,
)
from autosched.model.load import load_model
from autosched.model.tasks import extract_tasks
from autosched.model.tuning import ModelTuneOptions, ModelTuneReport, tune_model
from autosched.protocol import ModelJobPublic, OutputCheckPublic
from autosched.records import JobStatus
from autosched.target import host_target
from autosched.workload import mismatch

FORMATS = ("pt2", "onnx")
ROW_TIMEOUT_SECS = 3600
TIMED_REPEATS = 3  # an untuned model can take seconds a call
UNTUNED = "no verified schedule in the log"  # autosched.model.compile.best_schedules' reason

AUTOSCHED = (sys.executable, "-m", "autosched")
SERVICE_FORMAT = "onnx (service)"
SERVICE_MAX_MODEL_BYTES = 1 << 30  # vit_b_16 is a file of 346 MB; the service's default 64 MiB
SERVICE_START_SECS = 120
SERVICE_JOB_SECS = 2400  # a model job's, from its upload to its end
STATUS_POLL_SECS = 5.0
CLI_SECS = 900  # a command of the CLI's; an upload is answered once the model's tasks are found
ORT = "ONNX Runtime"


@dataclass(frozen=True)
class Row:
    """One model in one format: what became of it (``reason`` None: it passed)."""

    model: str
    project: str
    format: str
    tasks: int | None
    default_schedules: int | None
    compile_secs: float | None
    reason: str | None
    max_abs_error: float | None
    spread: float | None
    tvm_ms: float | None
    eager_ms: float | None
    onnxruntime_ms: float | None
    cpu: str
    trials: int
    wall_secs: float
    notes: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "pass" if self.reason is None else self.reason


def run_one(entry: CorpusModel, fmt: str, trials: int, work: Path) -> Row:
    """``entry`` exported as ``fmt``, tuned for ``trials`` trials, compiled, checked and timed."""
    started = time.perf_counter()
    target = host_target()
    use_threads(int(target.get("num-cores") or 1))
    path = work / f"{entry.name}.{fmt}"
    fields: dict[str, object] = {
        "model": entry.name,
        "project": entry.project,
        "format": fmt,
        "cpu": cpu_name(target),
        "trials": trials,
    }
    empty = dict.fromkeys(
        ("tasks", "default_schedules", "compile_secs", "max_abs_error", "spread", "tvm_ms",
         "eager_ms", "onnxruntime_ms"),
    )  # fmt: skip

    def row(**values: object) -> Row:
        return Row(**{**empty, **fields, **values, "wall_secs": time.perf_counter() - started})

    try:
        module, _ = export(entry, fmt, path)
    except Exception as error:  # the exporter's failures are the framework's, not TVM's
        return row(reason=f"the {fmt} export failed: {_first_line(error)}")
    try:
        model = load_model(path)
        tasks = extract_tasks(model, target)
    except UserError as error:
        return row(reason=str(error))
    fields["tasks"] = len(tasks)
    inputs = random_model_inputs(model.inputs)
    expected = model.reference(inputs)
    fields["spread"] = float(np.std(np.concatenate([np.ravel(out) for out in expected])))
    fields["eager_ms"] = _eager_ms(module, inputs)
    fields["onnxruntime_ms"] = _onnxruntime_ms(path, inputs) if fmt == "onnx" else None
    log = TuningLog(f"sqlite:///{work / f'{entry.name}.{fmt}.db'}")
    measurer = LocalMeasurer(target)
    try:
        report = tune_model(model, tasks, target, log, measurer, ModelTuneOptions(trials=trials))
        fields["max_abs_error"] = report.check.max_abs_error
        fields["default_schedules"] = sum(t.default_schedule is not None for t in report.tasks)
        fields["notes"] = task_notes(report)
        compile_started = time.perf_counter()
        executable = compile_model(model, best_schedules(log, tasks, target), target)
        fields["compile_secs"] = time.perf_counter() - compile_started
        timing = time_repeats(vm_inference(executable, inputs), TIMED_REPEATS)
        fields["tvm_ms"] = timing.median_secs * 1e3
    except (UserError, OutputMismatch) as error:
        return row(reason=str(error))
    finally:
        measurer.close()
        log.close()
    return row(reason=None)


def task_notes(report: ModelTuneReport) -> list[str]:
    """Each task that keeps TVM's default schedule for a reason other than not being tuned yet
    (its search failed, the admission refuses it, its schedule does not build), with it."""
    return [
        _task_note(task.name, task.default_schedule)
        for task in report.tasks
        if task.default_schedule is not None and task.default_schedule != UNTUNED
    ]


def _task_note(name: str, reason: str) -> str:
    """Why task ``name`` keeps TVM's default schedule, named once (TVM's reasons may name it)."""
    return reason if reason.startswith(f"{name}: ") else f"{name}: {reason}"


def _eager_ms(module: torch.nn.Module, inputs: Sequence[np.ndarray]) -> float:
    tensors = [torch.from_numpy(np.ascontiguousarray(array)) for array in inputs]

    def run() -> object:
        with torch.no_grad():
            return module(*tensors)

    return time_repeats(run, TIMED_REPEATS).median_secs * 1e3


def _onnxruntime_ms(path: Path, inputs: Sequence[np.ndarray]) -> float:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = int(os.environ.get("TVM_NUM_THREADS", "1"))
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {spec.name: array for spec, array in zip(session.get_inputs(), inputs, strict=True)}
    return time_repeats(lambda: session.run(None, feed), TIMED_REPEATS).median_secs * 1e3


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(error).__name__


@dataclass(frozen=True)
class ServiceRow:
    """One ONNX model of the corpus through the tuning service (``reason`` None: its model job
    finished, the server's output check passed and the downloaded library matched ONNX Runtime).
    ``check`` is the server's output check as `autosched status` words it; ``job_secs`` the model
    job's from its submission to its end by the server's clock; ``library_secs`` the download,
    which the server compiles for."""

    model: str
    project: str
    format: str
    cpu: str
    trials: int
    wall_secs: float
    reason: str | None
    job: int | None = None
    tasks: int | None = None
    tuned_tasks: int | None = None
    check: str | None = None
    check_max_abs_error: float | None = None
    library_max_abs_error: float | None = None
    spread: float | None = None
    submit_secs: float | None = None
    job_secs: float | None = None
    library_secs: float | None = None
    library_bytes: int | None = None
    inference_secs: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "pass" if self.reason is None else self.reason


class TuningService:
    """The tuning service as its users run it, on this machine: `autosched serve` on a loopback
    port, its log a SQLite file in ``folder``, one `autosched worker` process (measuring in
    bubblewrap's sandbox), tokens made with `autosched token create`. A context manager: both
    processes are stopped on leaving it; their output is in ``folder``'s ``server.log`` and
    ``worker.log``.

    Args:
        folder: the log, the tokens' file and the processes' output.
        max_model_bytes: the largest upload the server takes (``AUTOSCHED_MAX_MODEL_BYTES``).
    """

    def __init__(self, folder: Path, *, max_model_bytes: int = SERVICE_MAX_MODEL_BYTES) -> None:
        self.folder = folder
        self.url = f"http://127.0.0.1:{_free_port()}"
        self.client_token = ""
        self._db_url = f"sqlite:///{folder / 'service.db'}"
        self._env = {**os.environ, "AUTOSCHED_MAX_MODEL_BYTES": str(max_model_bytes)}
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._server_log_seen = 0

    def __enter__(self) -> TuningService:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.client_token = self._token("client")
        (self.folder / "worker.token").write_text(self._token("worker") + "\n")
        try:
            self._start("server", "worker")  # the worker waits for the server to answer
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _token(self, role: str) -> str:
        command = [*AUTOSCHED, "token", "create", "--role", role, "--db", self._db_url]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()

    def _start(self, *names: str) -> None:
        """Start the server or the worker or both, and wait until they serve: the server answers
        its health check, the worker has registered (without a live worker, a submission to the
        kind "llvm" finds no target)."""
        for name in names:
            if name == "server":
                arguments = ["serve", "--db", self._db_url, "--port", self.url.rsplit(":", 1)[1]]
            else:
                token_file = str(self.folder / "worker.token")  # not in `ps`, as --token would be
                arguments = ["worker", "--server", self.url, "--token-file", token_file]
            with (self.folder / f"{name}.log").open("ab") as output:
                self._processes[name] = subprocess.Popen(
                    [*AUTOSCHED, *arguments], stdout=output, stderr=subprocess.STDOUT,
                    env=self._env, cwd=self.folder,
                )  # fmt: skip
        deadline = time.monotonic() + SERVICE_START_SECS
        while not (self._answers() and self._worker_alive()):
            for name in names:
                if self._processes[name].poll() is not None:
                    raise RuntimeError(f"the {name} exited; see {self.folder / f'{name}.log'}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the service is not ready after {SERVICE_START_SECS} s")
            time.sleep(0.5)

    def _answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=5).status_code == httpx.codes.OK
        except httpx.HTTPError:
            return False

    def _worker_alive(self) -> bool:
        try:
            metrics = httpx.get(f"{self.url}/metrics", timeout=5).text.splitlines()
        except httpx.HTTPError:
            return False
        alive = [line.split()[1] for line in metrics if line.startswith("autosched_workers_alive ")]
        return bool(alive) and float(alive[0]) >= 1

    def troubles(self) -> list[str]:
        """What went wrong in the service since the last call: a process that died (started
        again), the tracebacks and the answers of status 500 in the server's output."""
        found = []
        for name, process in list(self._processes.items()):
            if process.poll() is not None:
                found.append(f"the {name} died (exit status {process.returncode}); restarted")
                self._start(name)
        output = (self.folder / "server.log").read_text(errors="replace")
        lines = output[self._server_log_seen :].splitlines()
        self._server_log_seen = len(output)
        for index, line in enumerate(lines):
            if line.startswith("Traceback"):
                ending = next(
                    (later for later in lines[index + 1 :] if later and not later[0].isspace()),
                    "",
                )
                found.append(f"the server logged a traceback: {ending[:300]}")
            elif '" 500 ' in line:
                found.append(f"the server answered 500: {line.strip()[:300]}")
        return found

    def stop(self) -> None:
        """Stop the worker, then the server (SIGTERM; SIGKILL after a minute)."""
        for name in ("worker", "server"):
            process = self._processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def run_on_service(
    entry: CorpusModel, trials: int, work: Path, server: str, token: str
) -> ServiceRow:
    """``entry`` exported as one ONNX file and taken through the service at ``server`` as its
    users do: `autosched submit`, `autosched status --model ID --json` until the model job ends,
    its library downloaded and run once on the model's example inputs against ONNX Runtime."""
    started = time.perf_counter()
    path = work / f"{entry.name}.onnx"
    fields: dict[str, Any] = {
        "model": entry.name,
        "project": entry.project,
        "format": SERVICE_FORMAT,
        "cpu": cpu_name(host_target()),
        "trials": trials,
    }

    def row(reason: str | None) -> ServiceRow:
        return ServiceRow(**fields, reason=reason, wall_secs=time.perf_counter() - started)

    try:
        _, example = export(entry, "onnx", path, self_contained=True)
    except Exception as error:  # the exporter's failures are the framework's, not the service's
        return row(f"the onnx export failed: {_first_line(error)}")
    inputs = [tensor.numpy() for tensor in example]
    expected = _onnxruntime_outputs(path, inputs)
    fields["spread"] = float(np.std(np.concatenate([np.ravel(out) for out in expected])))
    env = {**os.environ, "AUTOSCHED_TOKEN": token}  # not in `ps`, as --token would be
    remote = ["--server", server, "--json"]
    submit = ["submit", str(path), "--trials", str(trials), *_input_options(path, inputs)]
    submit_started = time.perf_counter()
    submitted = _autosched([*submit, *remote], env)
    fields["submit_secs"] = time.perf_counter() - submit_started
    if submitted.returncode != 0:
        return row(_cli_problem(submitted))
    job = ModelJobPublic.model_validate_json(submitted.stdout)
    fields["job"] = job.id
    deadline = time.monotonic() + SERVICE_JOB_SECS
    while not job.status.final:  # a job left behind would share the worker with the next model
        if time.monotonic() > deadline:
            _cancel_model(server, token, job.id)
            return row(f"model job {job.id} did not end in {SERVICE_JOB_SECS} s; cancelled")
        time.sleep(STATUS_POLL_SECS)
        shown = _autosched(["status", "--model", str(job.id), *remote], env)
        if shown.returncode != 0:
            _cancel_model(server, token, job.id)
            return row(f"autosched status: {_cli_problem(shown)}; model job {job.id} cancelled")
        job = ModelJobPublic.model_validate_json(shown.stdout)
    fields["tasks"] = len(job.tasks)
    fields["tuned_tasks"] = sum(task.best_latency_secs is not None for task in job.tasks)
    fields["notes"] = [
        _task_note(task.name, task.default_schedule) for task in job.tasks if task.default_schedule
    ]
    if job.finished_at is not None:
        fields["job_secs"] = (job.finished_at - job.created_at).total_seconds()
    check = job.output_check
    if check is not None:
        fields["check"] = _check_text(check)
        fields["check_max_abs_error"] = check.max_abs_error
    if job.status is not JobStatus.FINISHED:
        return row(job.reason or f"model job {job.id} was {job.status.value}")
    if check is None or not check.ran or check.reason is not None:
        return row(f"the output check did not pass: {fields.get('check') or 'none recorded'}")
    library_started = time.perf_counter()
    try:
        with ServiceClient(server, token) as client:
            library = client.model_library(job.id)
    except (UserError, ServiceUnavailable) as error:
        return row(f"the library: {error}")
    fields["library_secs"] = time.perf_counter() - library_started
    fields["library_bytes"] = len(library)
    library_path = work / f"{entry.name}.so"
    library_path.write_bytes(library)
    run_started = time.perf_counter()
    got = run_model(tvm.runtime.load_module(str(library_path)), inputs)
    fields["inference_secs"] = time.perf_counter() - run_started
    if len(got) != len(expected):
        return row(f"the library returns {len(got)} outputs, ONNX Runtime {len(expected)}")
    fields["library_max_abs_error"] = max(
        float(np.max(np.abs(out.astype(np.float64) - ref))) if out.size else 0.0
        for out, ref in zip(got, expected, strict=True)
    )
    for index, (out, ref) in enumerate(zip(got, expected, strict=True)):
        problem = mismatch(out, ref.astype(out.dtype, copy=False))
        if problem is not None:
            return row(f"the library's output {index} {problem.replace('the reference', ORT)}")
    return row(None)


def _cancel_model(server: str, token: str, model_id: int) -> None:
    """Cancel a model job this run leaves behind, if the server takes the request."""
    with ServiceClient(server, token) as client, contextlib.suppress(UserError, ServiceUnavailable):
        client.cancel_model(model_id)


def _onnxruntime_outputs(path: Path, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {spec.name: array for spec, array in zip(session.get_inputs(), inputs, strict=True)}
    return [np.asarray(out) for out in session.run(None, feed)]


def _input_options(path: Path, inputs: Sequence[np.ndarray]) -> list[str]:
    """`--input NAME=DIMxDIM:DTYPE` for each input whose shape the file leaves open, fixed as
    its example input's."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    options = []
    for spec, array in zip(graph.input, inputs, strict=True):
        if any(not dim.HasField("dim_value") for dim in spec.type.tensor_type.shape.dim):
            shape = "x".join(str(size) for size in array.shape)
            options += ["--input", f"{spec.name}={shape}:{array.dtype}"]
    return options


def _autosched(arguments: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*AUTOSCHED, *arguments], capture_output=True, text=True, env=env, timeout=CLI_SECS
    )


def _cli_problem(done: subprocess.CompletedProcess) -> str:
    """The one line a failed command of the CLI printed (its ``error:`` stripped); a traceback
    is told as one, with its last line."""
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    last = lines[-1][:300] if lines else f"exit status {done.returncode}"
    if "Traceback (most recent call last):" in done.stderr:
        return f"the CLI failed with a traceback: {last}"
    return last.removeprefix("error: ")


def _check_text(check: OutputCheckPublic) -> str:
    """The output check as `autosched status --model` words it."""
    if check.ran and check.reason is None:
        return f"outputs match {check.reference}"
    return f"{'failed' if check.ran else 'not run'}: {check.reason}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_corpus(
    entries: Sequence[CorpusModel],
    formats: Sequence[str],
    trials: int,
    work: Path,
    results: Path,
) -> list[Row]:
    """Each of ``entries`` in each of ``formats``, one process each, its row appended to
    ``results`` (JSON lines) as it is done."""
    rows = []
    for entry in entries:
        for fmt in formats:
            folder = work / f"{entry.name}.{fmt}"
            folder.mkdir(parents=True, exist_ok=True)
            started = time.perf_counter()
            arguments = ["--child", entry.name, "--formats", fmt, "--trials", str(trials)]
            fields = _in_child(arguments, folder)
            if isinstance(fields, str):
                fields = {
                    **dict.fromkeys(f.name for f in dataclasses.fields(Row)),
                    "model": entry.name, "project": entry.project, "format": fmt, "cpu": "",
                    "trials": trials, "reason": fields, "notes": [],
                    "wall_secs": time.perf_counter() - started,
                }  # fmt: skip
            row = Row(**fields)
            rows.append(row)
            _append(results, row)
            print(f"{row.model} {row.format}: {row.status} ({row.wall_secs:.0f} s)", flush=True)
    return rows


def run_service_corpus(
    entries: Sequence[CorpusModel], trials: int, work: Path, results: Path
) -> list[ServiceRow]:
    """Each of ``entries`` as ONNX through one tuning service, one process each (`run_on_service`),
    its row appended to ``results`` (JSON lines) as it is done, with what went wrong in the
    service meanwhile among its notes."""
    rows = []
    with TuningService(work / "service") as service:
        env = {**os.environ, "AUTOSCHED_TOKEN": service.client_token}
        for entry in entries:
            folder = work / f"{entry.name}.service"
            folder.mkdir(parents=True, exist_ok=True)
            started = time.perf_counter()
            arguments = ["--child", entry.name, "--trials", str(trials), "--server", service.url]
            fields = _in_child(arguments, folder, env)
            if isinstance(fields, str):
                fields = {
                    "model": entry.name, "project": entry.project, "format": SERVICE_FORMAT,
                    "cpu": "", "trials": trials, "reason": fields,
                    "wall_secs": time.perf_counter() - started,
                }  # fmt: skip
            row = ServiceRow(**fields)
            row = dataclasses.replace(row, notes=[*row.notes, *service.troubles()])
            rows.append(row)
            _append(results, row)
            print(f"{row.model} {row.format}: {row.status} ({row.wall_secs:.0f} s)", flush=True)
    return rows


def _append(results: Path, row: Row | ServiceRow) -> None:
    with results.open("a") as out:
        out.write(json.dumps(asdict(row)) + "\n")


def _in_child(
    arguments: Sequence[str], folder: Path, env: Mapping[str, str] | None = None
) -> dict[str, Any] | str:
    """This script run with ``arguments`` and ``--work folder`` in a process of its own, which
    writes its row to ``folder/row.json``: the row's fields, or why there are none (a crash or a
    hang fails its row alone)."""
    command = [sys.executable, __file__, *arguments, "--work", str(folder)]
    log_path = folder / "child.log"
    with log_path.open("w") as output:
        try:
            returncode = subprocess.run(
                command, stdout=output, stderr=subprocess.STDOUT, env=env, timeout=ROW_TIMEOUT_SECS
            ).returncode
        except subprocess.TimeoutExpired:
            returncode = None
    result = folder / "row.json"
    if returncode == 0 and result.exists():
        return json.loads(result.read_text())
    lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    if returncode is None:
        return f"no result in {ROW_TIMEOUT_SECS} s"
    return f"the process failed ({returncode}): {lines[-1][:300] if lines else ''}"


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _error(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


def table(rows: Sequence[Row]) -> str:
    """The rows as the benchmarks README's table (Markdown)."""
    lines = [
        "| model | project | format | tasks (default) | compile s | result | max abs error "
        "| output spread | autosched ms | PyTorch eager ms | ONNX Runtime ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        tasks = "-" if row.tasks is None else f"{row.tasks} ({row.default_schedules or 0})"
        lines.append(
            f"| {row.model} | {row.project} | {row.format} | {tasks} | "
            f"{_number(row.compile_secs)} | {row.status.replace('|', '/')} | "
            f"{_error(row.max_abs_error)} | {_error(row.spread)} | {_number(row.tvm_ms, 2)} | "
            f"{_number(row.eager_ms, 2)} | {_number(row.onnxruntime_ms, 2)} |"
        )
    cpus = sorted({row.cpu for row in rows if row.cpu})
    notes = [f"- {row.model} ({row.format}) {note}" for row in rows for note in row.notes]
    return "\n".join([*lines, "", f"CPU: {', '.join(cpus)}", *(["", *notes] if notes else [])])


def service_table(rows: Sequence[ServiceRow]) -> str:
    """The service's rows as the benchmarks README's table (Markdown)."""
    lines = [
        "| model | project | tasks (tuned) | result | server's output check | library vs ONNX "
        "Runtime | output spread | upload s | model job s | library s | library MB "
        "| inference s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        tasks = "-" if row.tasks is None else f"{row.tasks} ({row.tuned_tasks})"
        check = "-" if row.check is None else f"{row.check} ({_error(row.check_max_abs_error)})"
        megabytes = None if row.library_bytes is None else row.library_bytes / 1e6
        lines.append(
            f"| {row.model} | {row.project} | {tasks} | {row.status.replace('|', '/')} | "
            f"{check.replace('|', '/')} | {_error(row.library_max_abs_error)} | "
            f"{_error(row.spread)} | {_number(row.submit_secs)} | {_number(row.job_secs)} | "
            f"{_number(row.library_secs)} | {_number(megabytes)} | "
            f"{_number(row.inference_secs, 2)} |"
        )
    cpus = sorted({row.cpu for row in rows if row.cpu})
    notes = [f"- {row.model} {note}" for row in rows for note in row.notes]
    return "\n".join([*lines, "", f"CPU: {', '.join(cpus)}", *(["", *notes] if notes else [])])


def _tables(path: Path) -> str:
    """The tables of a results file: `autosched tune`'s rows, then the service's."""
    documents = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    tuned = [Row(**doc) for doc in documents if doc["format"] != SERVICE_FORMAT]
    served = [ServiceRow(**doc) for doc in documents if doc["format"] == SERVICE_FORMAT]
    return "\n\n".join(
        [*([table(tuned)] if tuned else []), *([service_table(served)] if served else [])]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--only", nargs="+", choices=[entry.name for entry in CORPUS])
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    parser.add_argument(
        "--service", action="store_true", help="the ONNX models through `autosched serve`"
    )
    parser.add_argument("--results", type=Path, help="rows appended as JSON lines")
    parser.add_argument("--work", type=Path, help="the models' files, logs and outputs")
    parser.add_argument("--table", type=Path, help="print the tables of a results file and exit")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--server", help=argparse.SUPPRESS)  # a child's, of --service
    args = parser.parse_args()
    if args.table is not None:
        print(_tables(args.table))
        return
    by_name = {entry.name: entry for entry in CORPUS}
    if args.child is not None:
        args.work.mkdir(parents=True, exist_ok=True)
        entry = by_name[args.child]
        if args.server is not None:
            token = os.environ["AUTOSCHED_TOKEN"]
            row: Row | ServiceRow = run_on_service(
                entry, args.trials, args.work, args.server, token
            )
        else:
            row = run_one(entry, args.formats[0], args.trials, args.work)
        (args.work / "row.json").write_text(json.dumps(asdict(row)))
        return
    entries = [by_name[name] for name in args.only] if args.only else list(CORPUS)
    work = args.work or Path(tempfile.mkdtemp(prefix="conformance-"))
    results = args.results or work / "rows.jsonl"
    if args.service:
        print(service_table(run_service_corpus(entries, args.trials, work, results)))
    else:
        print(table(run_corpus(entries, args.formats, args.trials, work, results)))


if __name__ == "__main__":
    main()
