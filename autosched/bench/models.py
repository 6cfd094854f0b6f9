"""`autosched bench models`: the models of the zoo (``autosched.bench.model_zoo``) or of the
conformance corpus (``autosched.bench.corpus``) end to end on this CPU, per model: autosched's
tuned model as a deployment runs it (the exported library and its manifest, loaded by
``autosched.runtime.load``), stock TVM's ``static_shape_tuning_pipeline`` at the same budget, TVM
with its default schedules, PyTorch eager, ``torch.compile`` (inductor) and ONNX Runtime, all
timed in one run by one protocol (``autosched.bench.timing``) on as many threads as the CPU has
physical cores; and the wall time of the two tuners.

A zoo model is exported with ``torch.export`` and imported through the model loader, as
`autosched tune MODEL.pt2` imports it; ONNX Runtime runs it as PyTorch's TorchScript exporter
writes it. A corpus model is exported as the corpus exports it to ONNX (``torch.onnx.export``'s
dynamo exporter): that one file is what autosched, stock TVM and ONNX Runtime take. autosched
tunes in this process (its measuring children keep PyTorch out); stock TVM tunes in a child
process (``autosched.bench.stock_tvm``) whose MetaSchedule builder and runner processes are
started without PyTorch too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import IO

import numpy as np
import tvm
from tvm import relax

from autosched import runtime
from autosched.bench import plotting as plots
from autosched.bench.corpus import CORPUS, CorpusModel, corpus_models
from autosched.bench.corpus import export as export_corpus_model
from autosched.bench.model_zoo import MODELS, ZooModel, torch, zoo_models
from autosched.bench.timing import Timing, time_side_by_side, use_threads
from autosched.errors import UserError
from autosched.exports.models import complete_model_manifest, export_library
from autosched.finals.ranking import Interval, median_interval
from autosched.log import TuningLog
from autosched.machine.handoff import Placement, farther, placement
from autosched.measure import LocalMeasurer
from autosched.model.compile import (
    OutputMismatch,
    best_schedules,
    check_outputs,
    compile_schedules,
    compile_untuned,
    random_model_inputs,
)
from autosched.model.load import Model, load_model
from autosched.model.tasks import extract_tasks
from autosched.model.tuning import (
    ModelTuneOptions,
    ModelTuneReport,
    TaskOutcome,
    round_step,
    tune_model,
)
from autosched.target import device_fingerprint
from autosched.torch_guard import torch_free_environment
from autosched.workload import mismatch

MODEL_REPEATS = 10
"""Rounds of timing per model, each one repeat of every contender (at least 50 ms, after a
warm-up), with the handoff (``autosched.machine.handoff``) timed after each."""


class Contender(str, Enum):
    """What runs a model, in the order of the report."""

    AUTOSCHED = "autosched"
    STOCK_TVM = "tvm_metaschedule"
    TVM_UNTUNED = "tvm_untuned"
    PYTORCH_EAGER = "pytorch_eager"
    TORCH_COMPILE = "torch_compile"
    ONNXRUNTIME = "onnxruntime"

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    Contender.AUTOSCHED: "autosched (tuned)",
    Contender.STOCK_TVM: "TVM MetaSchedule",
    Contender.TVM_UNTUNED: "TVM untuned",
    Contender.PYTORCH_EAGER: "PyTorch eager",
    Contender.TORCH_COMPILE: "torch.compile",
    Contender.ONNXRUNTIME: "ONNX Runtime",
}

Inference = Callable[[], object]
"""One run of a model on fixed inputs, as a contender runs it."""


@dataclass(frozen=True)
class Latency:
    """A contender's time per run of a model, or why it has none."""

    contender: Contender
    timing: Timing | None
    note: str | None = None

    @property
    def interval(self) -> Interval | None:
        """The distribution-free confidence interval of the median
        (``autosched.finals.ranking``)."""
        return None if self.timing is None else median_interval(self.timing.samples)

    def as_json(self) -> dict[str, object]:
        timing, interval = self.timing, self.interval
        return {
            "median_us": None if timing is None else timing.median_secs * 1e6,
            "interval_us": None if interval is None else [interval.low * 1e6, interval.high * 1e6],
            "interval_confidence": None if interval is None else interval.confidence,
            "min_us": None if timing is None else timing.min_secs * 1e6,
            "max_us": None if timing is None else timing.max_secs * 1e6,
            "repeats": None if timing is None else timing.repeats,
            "samples_us": None if timing is None else [secs * 1e6 for secs in timing.samples],
            "note": self.note,
        }


@dataclass(frozen=True)
class PlacementMedians:
    """The rounds of a model's timing in which the cores were nearer (or farther, ``far``) than in
    the others (`autosched.machine.handoff.farther`): how many, and each timed contender's median
    over them."""

    far: bool
    rounds: int
    median_us: dict[Contender, float]

    @property
    def name(self) -> str:
        return "far" if self.far else "near"

    def speedup_over(self, contender: Contender) -> float | None:
        """The contender's median over these rounds over autosched's."""
        ours, theirs = self.median_us.get(Contender.AUTOSCHED), self.median_us.get(contender)
        return None if ours is None or theirs is None else theirs / ours

    def as_json(self) -> dict[str, object]:
        return {
            "rounds": self.rounds,
            "median_us": {contender.value: us for contender, us in self.median_us.items()},
            "autosched_speedup": {
                contender.value: self.speedup_over(contender)
                for contender in self.median_us
                if contender is not Contender.AUTOSCHED
            },
        }


@dataclass(frozen=True)
class ModelRow:
    """One model of the run. ``trials`` is each tuner's budget; ``autosched_trials`` the
    measurements autosched made of it (a task the log had tuned is reused, not measured);
    ``estimated_us`` the sum of weight x latency over its tasks as tuning timed them, to read
    beside the model's measured latency; ``placements`` the cores' placement read after each
    round of timing, so that rounds timed in different placements can be read apart."""

    model: str
    summary: str
    cpu: str
    threads: int
    trials: int
    autosched_trials: int
    tasks: int
    latencies: tuple[Latency, ...]
    autosched_tune_secs: float
    stock_tune_secs: float | None
    max_abs_error: float
    estimated_us: float
    slowest_task: str | None
    slowest_task_us: float | None
    placements: tuple[Placement, ...] = ()

    def latency(self, contender: Contender) -> Latency:
        return next(latency for latency in self.latencies if latency.contender is contender)

    def median_us(self, contender: Contender) -> float | None:
        timing = self.latency(contender).timing
        return None if timing is None else timing.median_secs * 1e6

    def speedup_over(self, contender: Contender) -> float | None:
        """The contender's median latency over autosched's."""
        ours, theirs = self.median_us(Contender.AUTOSCHED), self.median_us(contender)
        return None if ours is None or theirs is None else theirs / ours

    def by_placement(self) -> list[PlacementMedians]:
        """The rounds timed with the cores nearer, then those timed farther; none where the cores
        stayed in one placement throughout."""
        far_rounds = farther(self.placements)
        if not any(far_rounds):
            return []
        readings = []
        for far in (False, True):
            rounds = [index for index, is_far in enumerate(far_rounds) if is_far == far]
            medians: dict[Contender, float] = {}
            for lat in self.latencies:  # a far slower contender has the first rounds only
                samples = [] if lat.timing is None else lat.timing.samples
                if taken := [samples[i] for i in rounds if i < len(samples)]:
                    medians[lat.contender] = statistics.median(taken) * 1e6
            readings.append(PlacementMedians(far, len(rounds), medians))
        return readings

    def as_json(self) -> dict[str, object]:
        return {
            "model": self.model,
            "summary": self.summary,
            "cpu": self.cpu,
            "threads": self.threads,
            "trials": self.trials,
            "autosched_trials": self.autosched_trials,
            "tasks": self.tasks,
            "latency": {lat.contender.value: lat.as_json() for lat in self.latencies},
            "autosched_speedup": {
                lat.contender.value: self.speedup_over(lat.contender)
                for lat in self.latencies
                if lat.contender is not Contender.AUTOSCHED
            },
            "autosched_tune_secs": self.autosched_tune_secs,
            "stock_tune_secs": self.stock_tune_secs,
            "max_abs_error": self.max_abs_error,
            "estimated_us": self.estimated_us,
            "slowest_task": self.slowest_task,
            "slowest_task_us": self.slowest_task_us,
            "handoff_us": [reading.handoff_secs * 1e6 for reading in self.placements],
            "own_read_us": [reading.own_read_secs * 1e6 for reading in self.placements],
            "by_placement": {reading.name: reading.as_json() for reading in self.by_placement()},
        }


@dataclass(frozen=True)
class ModelFiles:
    """A model as the contenders take it: ``module``, in eval mode, is what PyTorch eager and
    torch.compile run; ``model_file`` what autosched and stock TVM import (and the library's
    manifest names as its source); ``onnx_file`` what ONNX Runtime runs (None: the bench exports
    ``module`` to ONNX itself, with PyTorch's TorchScript exporter)."""

    module: torch.nn.Module
    example: tuple[torch.Tensor, ...]
    model_file: Path
    onnx_file: Path | None


@dataclass(frozen=True)
class BenchModel:
    """A model of the bench: its name, a line saying what it is, and how its files are written
    into a folder of its own."""

    name: str
    summary: str
    export: Callable[[Path], ModelFiles]


def zoo_bench_model(zoo_model: ZooModel) -> BenchModel:
    """A model of the zoo: exported with ``torch.export``, ONNX left to the bench."""

    def export(work: Path) -> ModelFiles:
        module, example = zoo_model.instantiate()
        path = work / f"{zoo_model.name}.pt2"
        torch.export.save(torch.export.export(module, example), str(path))
        return ModelFiles(module, example, path, None)

    return BenchModel(zoo_model.name, zoo_model.summary, export)


def corpus_bench_model(entry: CorpusModel) -> BenchModel:
    """A model of the conformance corpus: exported to ONNX as the corpus exports it, the one
    file that autosched, stock TVM and ONNX Runtime take."""

    def export(work: Path) -> ModelFiles:
        path = work / f"{entry.name}.onnx"
        module, example = export_corpus_model(entry, "onnx", path)
        return ModelFiles(module, example, path, path)

    summary = f"{entry.project}'s {entry.name}, batch 1, as ONNX (torch.onnx.export, dynamo)"
    return BenchModel(entry.name, summary, export)


def chosen_models(names: str | None, *, corpus: bool) -> list[BenchModel]:
    """The models a comma-separated list names, in its order: of the corpus with ``corpus``,
    else of the zoo; all of them for None.

    Raises:
        UserError: a name is not a model of the zoo (or of the corpus, with ``corpus``), the
            list names none, or the corpus's packages are not installed.
    """
    if corpus:
        return [corpus_bench_model(entry) for entry in corpus_models(names)]
    listed = [name.strip() for name in (names or "").split(",") if name.strip()]
    in_corpus = [name for name in listed if name not in MODELS and name in {e.name for e in CORPUS}]
    if in_corpus:
        raise UserError(
            f"{', '.join(in_corpus)} {'is a model' if len(in_corpus) == 1 else 'are models'} "
            "of the conformance corpus: add --corpus"
        )
    return [zoo_bench_model(zoo_model) for zoo_model in zoo_models(names)]


def cpu_name(target: dict) -> str:
    """The CPU as a row names it: its model, LLVM's name for it and its physical cores."""
    fingerprint = device_fingerprint(target)
    return (
        f"{fingerprint['cpu_model']} ({target.get('mcpu', 'generic')}, "
        f"{fingerprint['physical_cores']} cores)"
    )


def bench_models(
    models: Sequence[BenchModel],
    target: dict,
    *,
    trials: int,
    db_url: str | None = None,
    seed: int = 0,
    stock: bool = True,
    rounds: int = MODEL_REPEATS,
    work_dir: Path | None = None,
    on_step: Callable[[str], None] | None = None,
    on_row: Callable[[ModelRow], None] | None = None,
) -> list[ModelRow]:
    """Tune, build and time each of ``models`` with every contender; see the module's docstring.

    autosched tunes into ``db_url`` (continuing what is there) or a throw-away log. Without
    ``stock``, stock TVM is left out (its fixed start-up alone is about a minute). The
    contenders are timed in ``rounds`` rounds (``MODEL_REPEATS``, unless told). The models'
    files, libraries and stock TVM's MetaSchedule logs and database are kept in ``work_dir``
    (a new or empty folder; a folder per model in it) where given. ``on_step`` hears what is being
    done, ``on_row`` each model's row as it is done.

    Raises:
        OutputMismatch: autosched's compiled model computes something else than the framework.
        UserError: a model cannot be exported, imported or loaded as its library.
    """
    threads = int(target.get("num-cores") or 1)
    use_threads(threads)
    cpu = cpu_name(target)
    rows = []
    with _work_folder(work_dir) as work:
        log = TuningLog(db_url or f"sqlite:///{Path(work) / 'bench.db'}")
        try:
            for bench_model in models:
                model_work = Path(work) / bench_model.name
                model_work.mkdir()
                bench = _ModelBench(bench_model, target, model_work, threads, on_step)
                row = bench.run(log, trials, seed, cpu, stock=stock, rounds=rounds)
                rows.append(row)
                if on_row is not None:
                    on_row(row)
        finally:
            log.close()
    return rows


@contextlib.contextmanager
def _work_folder(kept: Path | None) -> Iterator[str]:
    """``kept``, created, or a throw-away folder."""
    if kept is None:
        with tempfile.TemporaryDirectory(prefix="autosched-bench-models-") as work:
            yield work
    else:
        kept.mkdir(parents=True, exist_ok=True)
        yield str(kept)


STOCK_LEFT_OUT = "left out (--no-stock)"


class _ModelBench:
    """One model through every contender: first tuned and built by each, then timed one after
    the other, so that no timing overlaps a tuning or a compilation."""

    def __init__(
        self,
        bench_model: BenchModel,
        target: dict,
        work: Path,
        threads: int,
        on_step: Callable[[str], None] | None,
    ) -> None:
        self.bench_model = bench_model
        self.target = target
        self.work = work
        self.threads = threads
        self.on_step = on_step
        self._step("exporting")
        self.files = bench_model.export(work)
        self.module = self.files.module
        self.model: Model = load_model(self.files.model_file)
        self.inputs = random_model_inputs(self.model.inputs)
        self.tensors = tuple(torch.from_numpy(array) for array in self.inputs)
        self.expected = self.model.reference(self.inputs) if self.model.reference else []

    def run(
        self, log: TuningLog, trials: int, seed: int, cpu: str, *, stock: bool, rounds: int
    ) -> ModelRow:
        report, library, autosched_secs = self._autosched(log, trials, seed)
        deployed, deployed_note = self._deployed(library)
        stock_tvm, stock_secs, stock_note = (
            self._stock_tvm(trials) if stock else (None, None, STOCK_LEFT_OUT)
        )
        self._step("building with TVM's default schedules; compiling with torch.compile")
        inferences: dict[Contender, tuple[Inference | None, str | None]] = {
            Contender.AUTOSCHED: (deployed, deployed_note),
            Contender.STOCK_TVM: (stock_tvm, stock_note),
            Contender.TVM_UNTUNED: (
                vm_inference(compile_untuned(self.model, self.target), self.inputs),
                None,
            ),
            Contender.PYTORCH_EAGER: (self._eager(), None),
            Contender.TORCH_COMPILE: self._torch_compile(),
            Contender.ONNXRUNTIME: self._onnxruntime(),
        }
        self._step("timing every contender side by side")
        timings, placements = time_side_by_side(
            {name: run for name, (run, _note) in inferences.items() if run is not None},
            rounds,
            between=lambda: placement(self.target),
        )
        latencies = [
            Latency(contender, timings.get(contender), note)
            for contender, (_run, note) in inferences.items()
        ]
        slowest = max(report.estimated, key=_weighted_secs, default=None)
        return ModelRow(
            model=self.bench_model.name,
            summary=self.bench_model.summary,
            cpu=cpu,
            threads=self.threads,
            trials=trials,
            autosched_trials=report.trials,
            tasks=len(report.tasks),
            latencies=tuple(latencies),
            autosched_tune_secs=autosched_secs,
            stock_tune_secs=stock_secs,
            max_abs_error=report.check.max_abs_error,
            estimated_us=report.tuned_secs * 1e6,
            slowest_task=None if slowest is None else slowest.name,
            slowest_task_us=None if slowest is None else _weighted_secs(slowest) * 1e6,
            placements=tuple(placements),
        )

    def _step(self, what: str) -> None:
        if self.on_step is not None:
            self.on_step(f"{self.bench_model.name}: {what}")

    def _autosched(
        self, log: TuningLog, trials: int, seed: int
    ) -> tuple[ModelTuneReport, Path, float]:
        """Tune with autosched (its output checked against the framework's), then build the model
        with the log's best schedules and export it as a library with its manifest, as
        `autosched export MODEL --format library` does. The wall time counts extraction, tuning
        and the check."""
        self._step(f"tuning with autosched ({trials} trials)")
        started = time.perf_counter()
        tasks = extract_tasks(self.model, self.target)
        measurer = LocalMeasurer(self.target)
        try:
            report = tune_model(
                self.model,
                tasks,
                self.target,
                log,
                measurer,
                ModelTuneOptions(trials, seed=seed),
                on_round=lambda task, trials, left: self._step(round_step(task, trials, left)),
            )
        finally:
            measurer.close()
        wall_secs = time.perf_counter() - started
        executable, applied = compile_schedules(
            self.model, best_schedules(log, tasks, self.target), self.target
        )
        library = self.work / "autosched" / f"{self.bench_model.name}.so"
        written = export_library(
            self.model, executable, applied, self.target, report.check, library
        )
        complete_model_manifest(written[1], self.target, self.files.model_file)
        return report, library, wall_secs

    def _deployed(self, library: Path) -> tuple[Inference, str | None]:
        """The exported library as a deployment runs it: loaded by ``autosched.runtime.load``
        (TVM's pool on the manifest's threads), called on numpy inputs, numpy outputs back; and
        what the loader warned of (a pool short of the manifest's threads). Its outputs are
        checked against the framework's first.

        Raises:
            OutputMismatch: the loaded library computes something else than the framework.
        """
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always", RuntimeWarning)
            artefact = runtime.load(library)
        note = "; ".join(str(warning.message) for warning in warned) or None
        inputs = self.inputs
        outputs = artefact(*inputs)
        problem = self._differs(outputs if isinstance(outputs, tuple) else [outputs])
        if problem is not None:
            raise OutputMismatch(f"{library.name}, loaded as a deployment loads it: {problem}")
        return (lambda: artefact(*inputs)), note

    def _stock_tvm(self, trials: int) -> tuple[Inference | None, float | None, str | None]:
        """Tune and build with stock TVM in a child process; its outputs are checked against
        PyTorch eager. The wall time counts tuning and building."""
        self._step(f"tuning with TVM's static_shape_tuning_pipeline ({trials} trials)")
        work = self.work / "stock"
        site = work / "site"
        site.mkdir(parents=True)
        env = torch_free_environment(site, os.environ)
        module_json = work / "model.json"
        module_json.write_text(tvm.ir.save_json(self.model.mod))
        library_path = work / "model.so"
        log_path = work / "metaschedule.log"
        with log_path.open("w") as output:
            returncode = run_process_group(
                [sys.executable, "-m", "autosched.bench.stock_tvm", str(module_json),
                 str(trials), json.dumps(self.target), str(library_path)],
                output, env,
            )  # fmt: skip
        lines = [line for line in log_path.read_text().splitlines() if line.strip()]
        if returncode != 0:
            return None, None, f"stock TVM failed: {lines[-1] if lines else returncode}"
        wall_secs = json.loads(lines[-1])["wall_secs"]
        library = tvm.runtime.load_module(str(library_path))
        try:
            check_outputs(self.model, library, self.target)
        except OutputMismatch as error:
            return None, wall_secs, str(error)
        return vm_inference(library, self.inputs), wall_secs, None

    def _eager(self) -> Inference:
        module, tensors = self.module, self.tensors

        def run() -> object:
            with torch.no_grad():
                return module(*tensors)

        return run

    def _torch_compile(self) -> tuple[Inference | None, str | None]:
        """The module compiled by inductor for the CPU; the first call compiles it."""
        tensors = self.tensors
        try:
            compiled = torch.compile(self.module, backend="inductor")
            with torch.no_grad():
                outputs = compiled(*tensors)
        except Exception as error:  # inductor fails in its own ways (no compiler, an op)
            return None, f"torch.compile failed: {_first_line(error)}"
        problem = self._differs([outputs])
        if problem is not None:
            return None, f"torch.compile's output {problem}"

        def run() -> object:
            with torch.no_grad():
                return compiled(*tensors)

        return run, None

    def _onnxruntime(self) -> tuple[Inference | None, str | None]:
        """The model's ONNX file (else the module exported to ONNX here), run by ONNX Runtime on
        the CPU with every graph optimisation, one intra-op thread a core."""
        try:
            import onnxruntime
        except ImportError:
            return None, "needs onnxruntime: pip install 'autosched[models]'"
        path = self.files.onnx_file
        if path is None:
            path = self.work / f"{self.bench_model.name}.onnx"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    torch.onnx.export(self.module, self.tensors, str(path), dynamo=False)
            except Exception as error:  # the exporter's failures are the model's
                return None, f"the ONNX export failed: {_first_line(error)}"
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        feed = {
            spec.name: array for spec, array in zip(session.get_inputs(), self.inputs, strict=True)
        }
        problem = self._differs(session.run(None, feed))
        if problem is not None:
            return None, f"ONNX Runtime's output {problem}"
        return lambda: session.run(None, feed), None

    def _differs(self, outputs: Sequence[object]) -> str | None:
        """How ``outputs`` differ from PyTorch eager's, or None."""
        arrays = [
            out.detach().numpy() if isinstance(out, torch.Tensor) else np.asarray(out)
            for out in outputs
        ]
        for got, expected in zip(arrays, self.expected, strict=True):
            problem = mismatch(got, np.asarray(expected))
            if problem is not None:
                return problem.replace("the reference", "PyTorch eager's")
        return None


def vm_inference(
    executable: relax.VMExecutable | tvm.runtime.Module, inputs: Sequence[np.ndarray]
) -> Inference:
    """A Relax VM's ``main`` on ``inputs`` held on the CPU."""
    device = tvm.cpu()
    main = relax.VirtualMachine(executable, device)["main"]
    arguments = [tvm.runtime.tensor(array, device) for array in inputs]
    return lambda: main(*arguments)


def run_process_group(command: Sequence[str], output: IO[str], env: Mapping[str, str]) -> int:
    """Run ``command`` in a process group of its own, its output to ``output``, and kill the whole
    group once it ends or the wait is interrupted: stock MetaSchedule's builder and runner pools
    are processes of their own, which outlive a child that is stopped. The child's exit status."""
    child = subprocess.Popen(
        command, stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        return child.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()


SUMMARY_CONTENDERS = (
    Contender.AUTOSCHED,
    Contender.STOCK_TVM,
    Contender.ONNXRUNTIME,
    Contender.TORCH_COMPILE,
    Contender.PYTORCH_EAGER,
)
"""The contenders of the summary table, in its order (TVM untuned is in the rows and the JSON)."""


def geometric_mean_speedups(rows: Sequence[ModelRow]) -> dict[Contender, tuple[float, int]]:
    """Per contender timed beside autosched on at least two of the models: the geometric mean
    of its median over autosched's, and over how many models."""
    means = {}
    for contender in Contender:
        if contender is Contender.AUTOSCHED:
            continue
        ratios = [
            ratio
            for row in rows
            if (ratio := row.speedup_over(contender)) is not None and ratio > 0
        ]
        if len(ratios) > 1:
            means[contender] = (statistics.geometric_mean(ratios), len(ratios))
    return means


def models_table(rows: Sequence[ModelRow]) -> str:
    """The rows as one Markdown table: per model its budget, both tuners' minutes, each
    contender's median in ms with its confidence interval, ONNX Runtime's median over
    autosched's, and the task that adds most to autosched's latency; then the CPU, and why a
    contender has no time; over several models, the geometric mean of each peer over
    autosched."""
    header = [
        "model", "tasks", "trials (measured)", "tuning min: autosched / stock TVM",
        *(f"{contender.label} ms" for contender in SUMMARY_CONTENDERS),
        "ONNX Runtime / autosched", "slowest task (weight x us)",
    ]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        minutes = [
            "-" if secs is None else f"{secs / 60:.1f}"
            for secs in (row.autosched_tune_secs, row.stock_tune_secs)
        ]
        slowest = (
            "-"
            if row.slowest_task is None
            else f"{row.slowest_task} ({_number(row.slowest_task_us, 0)})"
        )
        cells = [
            row.model,
            str(row.tasks),
            f"{row.trials} ({row.autosched_trials})",
            " / ".join(minutes),
            *(_latency_cell(row.latency(contender)) for contender in SUMMARY_CONTENDERS),
            _number(row.speedup_over(Contender.ONNXRUNTIME), 2),
            slowest,
        ]
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    cpus = ", ".join(sorted({f"{row.cpu}, {row.threads} threads" for row in rows}))
    confidences = sorted(
        {
            round(lat.interval.confidence * 100)
            for row in rows
            for lat in row.latencies
            if lat.interval is not None
        }
    )
    rounds = sorted({lat.timing.repeats for r in rows for lat in r.latencies if lat.timing})
    notes = [
        f"- {row.model}, {row.latency(contender).contender.label}: {row.latency(contender).note}"
        for row in rows
        for contender in SUMMARY_CONTENDERS
        if row.latency(contender).note
    ]
    means = ", ".join(
        f"{contender.label} {mean:.2f}x over {count} models"
        for contender, (mean, count) in geometric_mean_speedups(rows).items()
    )
    summary = ["", f"Geometric mean of each peer's median over autosched's: {means}."]
    return "\n".join(
        [
            *lines,
            *(summary if means else []),
            "",
            f"CPU: {cpus}. Medians of {'/'.join(map(str, rounds)) or '-'} rounds timed side by "
            "side, [low, high] the median's "
            f"{'/'.join(f'{c}%' for c in confidences) or '-'} confidence interval.",
            *(["", *notes] if notes else []),
        ]
    )


def _latency_cell(latency: Latency) -> str:
    timing, interval = latency.timing, latency.interval
    if timing is None or interval is None:
        return "-"
    return f"{timing.median_secs * 1e3:.2f} [{interval.low * 1e3:.2f}, {interval.high * 1e3:.2f}]"


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _weighted_secs(task: TaskOutcome) -> float:
    """What a task adds to the model's latency: its weight times its best (else untuned)
    latency."""
    return task.weight * (task.best_secs or task.baseline_secs or 0.0)


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0][:200] if lines else type(error).__name__


def plot_rows(rows: Sequence[ModelRow], path: Path) -> None:
    """A PNG: each model's median latency per contender on a log scale with its spread, and each
    tuner's wall time.

    Raises:
        UserError: matplotlib is not installed.
    """
    pyplot = plots.pyplot()
    positions = np.arange(len(rows))
    figure, (latency, tuning) = pyplot.subplots(
        2, 1, figsize=(max(8, 1.6 * len(rows) + 3), 8), gridspec_kw={"height_ratios": [2, 1]}
    )
    width = 0.8 / len(Contender)
    for offset, contender in enumerate(Contender):
        medians, lows, highs = [], [], []
        for row in rows:
            timing = row.latency(contender).timing
            medians.append(0.0 if timing is None else timing.median_secs * 1e3)
            lows.append(0.0 if timing is None else (timing.median_secs - timing.min_secs) * 1e3)
            highs.append(0.0 if timing is None else (timing.max_secs - timing.median_secs) * 1e3)
        latency.bar(
            positions + (offset - (len(Contender) - 1) / 2) * width,
            medians,
            width,
            yerr=[lows, highs],
            label=contender.label,
        )
    latency.set_yscale("log")
    latency.set_ylabel("latency (ms), median and range")
    latency.set_xticks(positions, [row.model for row in rows])
    latency.legend(fontsize="small")
    latency.set_title(f"autosched bench models on {rows[0].cpu}" if rows else "")
    for offset, (name, values) in enumerate(
        [
            ("autosched", [row.autosched_tune_secs for row in rows]),
            ("TVM MetaSchedule", [row.stock_tune_secs or 0.0 for row in rows]),
        ]
    ):
        tuning.bar(positions + (offset - 0.5) * 0.35, values, 0.35, label=name)
    tuning.set_ylabel("tuning wall time (s)")
    tuning.set_xticks(positions, [f"{row.model} ({row.trials} trials)" for row in rows])
    tuning.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
