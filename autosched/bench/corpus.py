"""The conformance corpus: models written by their own projects (torchvision's image classifiers,
Hugging Face ``transformers`` models built from their configs with random weights, PyTorch's own
Transformer encoder), each built with a fixed seed, initialised by one rule whatever its name,
and exported as its users export it (``torch.export`` to ``.pt2``, ``torch.onnx.export`` to
``.onnx``).

`autosched bench models --corpus` times them and ``benchmarks/conformance.py`` checks them. This
module imports PyTorch; torchvision and ``transformers`` (the ``corpus`` extra) only as a model
of theirs is built. Nothing here tunes or times a model.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from autosched.errors import UserError
from autosched.torch_guard import import_torch

torch = import_torch()

IMAGE = (1, 3, 224, 224)
TOKENS = 64
INSTALL = "pip install 'autosched[corpus]'"
EXPORTERS = ("onnx", "onnxscript")  # torch.onnx.export's (dynamo) exporter


@dataclass(frozen=True)
class CorpusModel:
    """A model of the corpus: who wrote it, and how it is built (the module in eval mode and its
    example inputs, random, of the shapes it is exported with). ``project`` is also the package
    it is built with ("torch": PyTorch alone)."""

    name: str
    project: str
    build: Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]
    input_names: tuple[str, ...]


def _project(name: str) -> ModuleType:
    """The package ``name`` of the ``corpus`` extra.

    Raises:
        UserError: it is not installed.
    """
    try:
        return importlib.import_module(name)
    except ImportError:
        raise UserError(f"the corpus needs {name}: {INSTALL}") from None


def _torchvision(name: str) -> CorpusModel:
    def build() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
        module = _project("torchvision").models.get_model(name, weights=None)
        return module, (torch.rand(IMAGE) * 2 - 1,)

    return CorpusModel(name, "torchvision", build, ("x",))


def _transformers(
    name: str, model_class: str, config_class: str, input_kind: str = "tokens", **config: object
) -> CorpusModel:
    def build() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
        transformers = _project("transformers")
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


def corpus_models(names: str | None) -> list[CorpusModel]:
    """The models of the corpus that a comma-separated list names, in its order; the whole corpus
    for None.

    Raises:
        UserError: a name is not a model of the corpus, the list names none, or a package that
            builds or exports a chosen model is not installed.
    """
    by_name = {entry.name: entry for entry in CORPUS}
    listing = f"corpus models: {', '.join(by_name)}"
    if names is None:
        chosen = list(by_name)
    else:
        chosen = list(dict.fromkeys(name.strip() for name in names.split(",") if name.strip()))
        unknown = [name for name in chosen if name not in by_name]
        if unknown:
            raise UserError(f"unknown corpus model {', '.join(unknown)}; {listing}")
        if not chosen:
            raise UserError(f"--models names no model; {listing}")
    entries = [by_name[name] for name in chosen]
    needed = {entry.project for entry in entries} - {"torch"} | set(EXPORTERS)
    missing = sorted(name for name in needed if importlib.util.find_spec(name) is None)
    if missing:
        raise UserError(f"the corpus needs {', '.join(missing)}: {INSTALL}")
    return entries


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
    entry: CorpusModel, fmt: str, path: Path, *, self_contained: bool = False
) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """Build ``entry`` and export it as ``fmt`` to ``path``; returns the module and its inputs.

    ONNX's weights go to a file of their own beside ``path`` (the exporter's default) unless
    ``self_contained``: the service takes one file, and refuses one whose tensors are elsewhere.
    The exporter's progress lines go to stderr: a command's stdout carries its own output (a
    `--json` document) alone.

    Raises:
        UserError: the model's project is not installed.
    """
    torch.manual_seed(0)
    module, inputs = entry.build()
    module = initialised(module, inputs)
    with torch.no_grad(), contextlib.redirect_stdout(sys.stderr):
        if fmt == "pt2":
            torch.export.save(torch.export.export(module, inputs), str(path))
        else:
            torch.onnx.export(
                module,
                inputs,
                str(path),
                input_names=list(entry.input_names),
                dynamo=True,
                external_data=not self_contained,
            )
    return module, inputs
