"""Benchmark: the conformance corpus, models written by their own projects (torchvision's image
classifiers, Hugging Face ``transformers`` models built from their configs with random weights,
PyTorch's own Transformer encoder), each exported as its users export it (``torch.export`` to
``.pt2``, ``torch.onnx.export`` to ``.onnx``) and taken through what ``autosched tune MODEL
--trials N`` does: import, prepare, tasks, tuning at a small budget, compile, outputs checked
against the framework's. A row per model and format: its tasks, the seconds its compile took,
pass or the reason, the largest difference from the framework's outputs and the spread of those
outputs (a check of near-constant outputs proves little), and its latency beside PyTorch eager's
and ONNX Runtime's on the same cores.

Every model is built with a fixed seed and initialised by one rule, whatever its name: weights
initialised to zeros are drawn at random, and batch norms take the statistics of a random batch
(fresh ones are the identity, which leaves the deep classifiers' outputs near constant). Each
model and format runs in a process of its own, so one that crashes TVM fails its row only.

    pip install -e ".[test,corpus]"
    python benchmarks/conformance.py [--trials 1] [--only bert gpt2 ...] [--formats pt2 onnx]
                                     [--results rows.jsonl] [--work DIR]
    python benchmarks/conformance.py --table rows.jsonl   # the table of rows run before
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from autosched.bench.models import cpu_name, vm_inference
from autosched.bench.timing import time_repeats, use_threads
from autosched.errors import UserError
from autosched.log import TuningLog
from autosched.measure import LocalMeasurer
from autosched.model.compile import (
    OutputMismatch,
    best_schedules,
    compile_model,
    random_model_inputs,
)
from autosched.model.load import load_model
from autosched.model.tasks import extract_tasks
from autosched.model.tuning import ModelTuneOptions, ModelTuneReport, tune_model
from autosched.target import host_target

FORMATS = ("pt2", "onnx")
IMAGE = (1, 3, 224, 224)
TOKENS = 64
ROW_TIMEOUT_SECS = 3600
TIMED_REPEATS = 3  # an untuned model can take seconds a call
UNTUNED = "no verified schedule in the log"  # autosched.model.compile.best_schedules' reason


@dataclass(frozen=True)
class CorpusModel:
    """A model of the corpus: who wrote it, and how it is built (the module in eval mode and its
    example inputs, random, of the shapes it is exported with)."""

    name: str
    project: str
    build: Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]
    input_names: tuple[str, ...]


def _torchvision(name: str) -> CorpusModel:
    def build() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
        import torchvision

        module = torchvision.models.get_model(name, weights=None)
        return module, (torch.rand(IMAGE) * 2 - 1,)

    return CorpusModel(name, "torchvision", build, ("x",))


def _transformers(
    name: str, model_class: str, config_class: str, input_kind: str = "tokens", **config: object
) -> CorpusModel:
    def build() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
        import transformers

        settings = getattr(transformers, config_class)(**config)
        module = getattr(transformers, model_class)(settings)
        if input_kind == "audio":
            return _FirstOutput(module), (torch.rand(1, 16000) * 2 - 1,)
        return _FirstOutput(module), (torch.randint(0, settings.vocab_size, (1, TOKENS)),)

    inputs = ("input_values",) if input_kind == "audio" else ("input_ids",)
    return CorpusModel(name, "transformers", build, inputs)


def _transformer_encoder() -> CorpusModel:
    def build() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
        layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
        module = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        return module, (torch.rand(1, TOKENS, 256) * 2 - 1,)

    return CorpusModel("transformer_encoder", "torch", build, ("x",))


class _FirstOutput(torch.nn.Module):
    """A ``transformers`` model returning its first output (hidden states or logits) alone, a
    tensor rather than a ``ModelOutput``."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.model(*inputs)[0]


CORPUS: tuple[CorpusModel, ...] = (
    _transformer_encoder(),
    _transformers("bert", "BertModel", "BertConfig", num_hidden_layers=2),
    _transformers("gpt2", "GPT2LMHeadModel", "GPT2Config", n_layer=2, use_cache=False),
    _transformers(
        "t5_encoder", "T5EncoderModel", "T5Config", num_layers=2, d_model=512, num_heads=8
    ),
    _transformers(
        "llama",
        "LlamaForCausalLM",
        "LlamaConfig",
        hidden_size=512,
        intermediate_size=1376,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=4,
        vocab_size=32000,
        use_cache=False,
    ),
    _transformers(
        "wav2vec2", "Wav2Vec2Model", "Wav2Vec2Config", input_kind="audio", num_hidden_layers=2
    ),
    *(
        _torchvision(name)
        for name in (
            "squeezenet1_1",
            "mnasnet0_5",
            "shufflenet_v2_x1_0",
            "mobilenet_v3_small",
            "regnet_y_400mf",
            "efficientnet_b0",
            "googlenet",
            "resnet50",
            "densenet121",
            "convnext_tiny",
            "swin_t",
            "vit_b_16",
        )
    ),
)
"""Small ones first: a run that is cut short has covered the most models."""


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


def initialised(module: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> torch.nn.Module:
    """``module`` in eval mode, each weight of two or more dimensions that its project initialises
    to zeros drawn from N(0, 0.02) instead (ViT's classification head: its logits would all be
    zero), and each batch norm holding the statistics of a random batch of four like ``inputs``
    (a fresh one is the identity, which leaves a deep classifier's outputs near constant)."""
    with torch.no_grad():
        for weight in module.parameters():
            if weight.dim() > 1 and not weight.any():
                weight.normal_(0.0, 0.02)
    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if norms:
        for norm in norms:
            norm.reset_running_stats()
            norm.momentum = None  # a cumulative average over the calibration batch
        module.train()
        batch = [
            torch.rand((4, *x.shape[1:])) * 2 - 1 if x.is_floating_point() else x for x in inputs
        ]
        with torch.no_grad():
            module(*batch)
    return module.eval()


def export(
    entry: CorpusModel, fmt: str, path: Path
) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """Build ``entry`` and export it as ``fmt`` to ``path``; returns the module and its inputs."""
    torch.manual_seed(0)
    module, inputs = entry.build()
    module = initialised(module, inputs)
    with torch.no_grad():
        if fmt == "pt2":
            torch.export.save(torch.export.export(module, inputs), str(path))
        else:
            torch.onnx.export(
                module, inputs, str(path), input_names=list(entry.input_names), dynamo=True
            )
    return module, inputs


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
        task.default_schedule
        if task.default_schedule.startswith(f"{task.name}: ")
        else f"{task.name}: {task.default_schedule}"
        for task in report.tasks
        if task.default_schedule is not None and task.default_schedule != UNTUNED
    ]


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
            row = _in_child(entry, fmt, trials, folder)
            rows.append(row)
            with results.open("a") as out:
                out.write(json.dumps(asdict(row)) + "\n")
            print(f"{row.model} {row.format}: {row.status} ({row.wall_secs:.0f} s)", flush=True)
    return rows


def _in_child(entry: CorpusModel, fmt: str, trials: int, folder: Path) -> Row:
    """`run_one` in a process of its own; a crash or a hang fails its row alone."""
    command = [
        sys.executable, __file__, "--child", entry.name, "--formats", fmt,
        "--trials", str(trials), "--work", str(folder),
    ]  # fmt: skip
    started = time.perf_counter()
    log_path = folder / "child.log"
    with log_path.open("w") as output:
        try:
            returncode = subprocess.run(
                command, stdout=output, stderr=subprocess.STDOUT, timeout=ROW_TIMEOUT_SECS
            ).returncode
        except subprocess.TimeoutExpired:
            returncode = None
    result = folder / "row.json"
    if returncode == 0 and result.exists():
        return Row(**json.loads(result.read_text()))
    lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    reason = (
        f"no result in {ROW_TIMEOUT_SECS} s"
        if returncode is None
        else f"the process failed ({returncode}): {lines[-1][:300] if lines else ''}"
    )
    return Row(
        entry.name, entry.project, fmt, None, None, None, reason, None, None, None, None, None,
        "", trials, time.perf_counter() - started,
    )  # fmt: skip


def table(rows: Sequence[Row]) -> str:
    """The rows as the benchmarks README's table (Markdown)."""

    def number(value: float | None, digits: int = 1) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    def error(value: float | None) -> str:
        return "-" if value is None else f"{value:.1e}"

    lines = [
        "| model | project | format | tasks (default) | compile s | result | max abs error "
        "| output spread | autosched ms | PyTorch eager ms | ONNX Runtime ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        tasks = "-" if row.tasks is None else f"{row.tasks} ({row.default_schedules or 0})"
        lines.append(
            f"| {row.model} | {row.project} | {row.format} | {tasks} | "
            f"{number(row.compile_secs)} | {row.status.replace('|', '/')} | "
            f"{error(row.max_abs_error)} | {error(row.spread)} | {number(row.tvm_ms, 2)} | "
            f"{number(row.eager_ms, 2)} | {number(row.onnxruntime_ms, 2)} |"
        )
    cpus = sorted({row.cpu for row in rows if row.cpu})
    notes = [f"- {row.model} ({row.format}) {note}" for row in rows for note in row.notes]
    return "\n".join([*lines, "", f"CPU: {', '.join(cpus)}", *(["", *notes] if notes else [])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--only", nargs="+", choices=[entry.name for entry in CORPUS])
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    parser.add_argument("--results", type=Path, help="rows appended as JSON lines")
    parser.add_argument("--work", type=Path, help="the models' files, logs and outputs")
    parser.add_argument("--table", type=Path, help="print the table of a results file and exit")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.table is not None:
        lines = args.table.read_text().splitlines()
        print(table([Row(**json.loads(line)) for line in lines if line.strip()]))
        return
    by_name = {entry.name: entry for entry in CORPUS}
    if args.child is not None:
        args.work.mkdir(parents=True, exist_ok=True)
        row = run_one(by_name[args.child], args.formats[0], args.trials, args.work)
        (args.work / "row.json").write_text(json.dumps(asdict(row)))
        return
    entries = [by_name[name] for name in args.only] if args.only else list(CORPUS)
    work = args.work or Path(tempfile.mkdtemp(prefix="conformance-"))
    results = args.results or work / "rows.jsonl"
    rows = run_corpus(entries, args.formats, args.trials, work, results)
    print(table(rows))


if __name__ == "__main__":
    main()
