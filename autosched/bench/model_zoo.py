"""The models of `autosched bench models`, defined here as PyTorch modules (nothing downloaded):
an MLP, a ResNet-18-style network, a BERT-base-style encoder layer, a MobileNet-V2-style stack
of inverted-residual blocks and a ConvS2S-style conv1d+GLU stack, each with its input shapes as
constants of this module and random weights from a fixed seed.

Importing this module imports PyTorch. Nothing here tunes, exports or times a model.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from autosched.errors import UserError
from autosched.torch_guard import import_torch

torch = import_torch()
nn = torch.nn

WEIGHT_SEED = 0

# MLP: a batch of flattened 28x28 images through two hidden layers.
MLP_BATCH = 32
MLP_FEATURES = (784, 512, 512, 10)

# ResNet-18: batch 1, 3x224x224, BasicBlocks of two 3x3 convolutions, two per stage.
RESNET18_INPUT = (1, 3, 224, 224)
RESNET18_STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))  # (channels, stride of the first block)
RESNET18_BLOCKS_PER_STAGE = 2
RESNET18_CLASSES = 1000

# BERT-base encoder layer: batch 1, 128 tokens, hidden 768, 12 heads, feed-forward 3072.
BERT_SEQUENCE = 128
BERT_HIDDEN = 768
BERT_HEADS = 12
BERT_FEED_FORWARD = 3072

# MobileNet-V2: batch 1, 3x224x224; a stem, inverted-residual blocks (expansion t, channels c,
# repeats n, stride s of the first, as the paper's table lists them), a 1x1 head and a classifier.
MOBILENET_V2_INPUT = (1, 3, 224, 224)
MOBILENET_V2_STEM = 32
MOBILENET_V2_BLOCKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
MOBILENET_V2_HEAD = 1280
MOBILENET_V2_CLASSES = 1000

# ConvS2S encoder: batch 1, 128 tokens of 512 channels, six gated conv1d layers of width 3.
CONVS2S_SEQUENCE = 128
CONVS2S_CHANNELS = 512
CONVS2S_LAYERS = 6
CONVS2S_KERNEL = 3


class Mlp(nn.Module):
    """Linear layers with ReLU between them."""

    def __init__(self, features: tuple[int, ...] = MLP_FEATURES) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for index, (inputs, outputs) in enumerate(itertools.pairwise(features)):
            if index:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(inputs, outputs))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 convolutions with batch norm, the input added back (through
    a strided 1x1 projection where the shape changes)."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.relu = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """A 7x7 stem and max pool, four stages of BasicBlocks, global average pool, classifier."""

    def __init__(self) -> None:
        super().__init__()
        channels = RESNET18_STAGES[0][0]
        self.stem = nn.Sequential(
            nn.Conv2d(RESNET18_INPUT[1], channels, 7, 2, padding=3, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, padding=1),
        )
        blocks = []
        for outputs, stride in RESNET18_STAGES:
            for index in range(RESNET18_BLOCKS_PER_STAGE):
                blocks.append(BasicBlock(channels, outputs, stride if index == 0 else 1))
                channels = outputs
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(channels, RESNET18_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.pool(self.blocks(self.stem(x)))
        return self.classifier(torch.flatten(features, 1))


class EncoderLayer(nn.Module):
    """A post-norm Transformer encoder layer as BERT's: multi-head self-attention, then a GELU
    feed-forward network, each added back to its input and layer-normalised."""

    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(BERT_HIDDEN, BERT_HIDDEN)
        self.key = nn.Linear(BERT_HIDDEN, BERT_HIDDEN)
        self.value = nn.Linear(BERT_HIDDEN, BERT_HIDDEN)
        self.attention_out = nn.Linear(BERT_HIDDEN, BERT_HIDDEN)
        self.attention_norm = nn.LayerNorm(BERT_HIDDEN)
        self.intermediate = nn.Linear(BERT_HIDDEN, BERT_FEED_FORWARD)
        self.output = nn.Linear(BERT_FEED_FORWARD, BERT_HIDDEN)
        self.output_norm = nn.LayerNorm(BERT_HIDDEN)
        self.gelu = nn.GELU()

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence, _ = x.shape
        return x.reshape(batch, sequence, BERT_HEADS, -1).permute(0, 2, 1, 3)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        batch, sequence, _ = hidden.shape
        query = self._heads(self.query(hidden))
        key = self._heads(self.key(hidden))
        value = self._heads(self.value(hidden))
        scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(BERT_HIDDEN // BERT_HEADS)
        context = torch.matmul(torch.softmax(scores, dim=-1), value)
        context = context.permute(0, 2, 1, 3).reshape(batch, sequence, BERT_HIDDEN)
        attended = self.attention_norm(hidden + self.attention_out(context))
        return self.output_norm(attended + self.output(self.gelu(self.intermediate(attended))))


class InvertedResidual(nn.Module):
    """MobileNet-V2's block: a 1x1 expansion (none when t = 1), a 3x3 depthwise convolution and
    a linear 1x1 projection, with batch norm; the input added back where the shape is kept."""

    def __init__(self, inputs: int, outputs: int, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = inputs * expansion
        layers: list[nn.Module] = []
        if expansion != 1:
            layers += [nn.Conv2d(inputs, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, outputs, 1, bias=False),
            nn.BatchNorm2d(outputs),
        ]
        self.layers = nn.Sequential(*layers)
        self.residual = stride == 1 and inputs == outputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layers(x)
        return x + out if self.residual else out


class MobileNetV2(nn.Module):
    """A strided 3x3 stem, the inverted-residual blocks, a 1x1 head, average pool, classifier."""

    def __init__(self) -> None:
        super().__init__()
        channels = MOBILENET_V2_STEM
        layers: list[nn.Module] = [
            nn.Conv2d(MOBILENET_V2_INPUT[1], channels, 3, 2, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU6(),
        ]
        for expansion, outputs, repeats, stride in MOBILENET_V2_BLOCKS:
            for index in range(repeats):
                layers.append(
                    InvertedResidual(channels, outputs, stride if index == 0 else 1, expansion)
                )
                channels = outputs
        layers += [
            nn.Conv2d(channels, MOBILENET_V2_HEAD, 1, bias=False),
            nn.BatchNorm2d(MOBILENET_V2_HEAD),
            nn.ReLU6(),
            nn.AdaptiveAvgPool2d(1),
        ]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(MOBILENET_V2_HEAD, MOBILENET_V2_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


class GatedConvolution(nn.Module):
    """A ConvS2S layer: conv1d to twice the channels, a gated linear unit halving them back, the
    input added back and scaled by sqrt(1/2)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(
            CONVS2S_CHANNELS, 2 * CONVS2S_CHANNELS, CONVS2S_KERNEL, padding=CONVS2S_KERNEL // 2
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values, gates = self.conv(x).chunk(2, dim=1)
        return (x + values * torch.sigmoid(gates)) * math.sqrt(0.5)


class ConvS2SEncoder(nn.Module):
    """Tokens (batch, sequence, channels) projected in, the gated convolutions over the sequence,
    projected out."""

    def __init__(self) -> None:
        super().__init__()
        self.project_in = nn.Linear(CONVS2S_CHANNELS, CONVS2S_CHANNELS)
        self.layers = nn.Sequential(*(GatedConvolution() for _ in range(CONVS2S_LAYERS)))
        self.project_out = nn.Linear(CONVS2S_CHANNELS, CONVS2S_CHANNELS)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.project_in(tokens).transpose(1, 2)
        return self.project_out(self.layers(hidden).transpose(1, 2))


@dataclass(frozen=True)
class ZooModel:
    """A benchmark model: how to build it and the shapes of its inputs."""

    name: str
    summary: str
    build: Callable[[], nn.Module]
    input_shapes: tuple[tuple[int, ...], ...]

    def instantiate(self) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        """The module in evaluation mode with seeded weights, and seeded example inputs."""
        torch.manual_seed(WEIGHT_SEED)
        module = self.build().eval()
        return module, tuple(torch.randn(*shape) for shape in self.input_shapes)


MODELS: dict[str, ZooModel] = {
    model.name: model
    for model in (
        ZooModel(
            "mlp",
            f"MLP {'-'.join(map(str, MLP_FEATURES))}, batch {MLP_BATCH}",
            Mlp,
            ((MLP_BATCH, MLP_FEATURES[0]),),
        ),
        ZooModel("resnet18", "ResNet-18, 1x3x224x224", ResNet18, (RESNET18_INPUT,)),
        ZooModel(
            "bert_layer",
            f"BERT-base encoder layer, {BERT_SEQUENCE} tokens x {BERT_HIDDEN}, {BERT_HEADS} heads",
            EncoderLayer,
            ((1, BERT_SEQUENCE, BERT_HIDDEN),),
        ),
        ZooModel(
            "mobilenet_v2",
            "MobileNet-V2 inverted residuals, 1x3x224x224",
            MobileNetV2,
            (MOBILENET_V2_INPUT,),
        ),
        ZooModel(
            "convs2s",
            f"ConvS2S encoder, {CONVS2S_LAYERS} conv1d+GLU layers, "
            f"{CONVS2S_SEQUENCE} tokens x {CONVS2S_CHANNELS}",
            ConvS2SEncoder,
            ((1, CONVS2S_SEQUENCE, CONVS2S_CHANNELS),),
        ),
    )
}


def zoo_models(names: str | None) -> list[ZooModel]:
    """The models a comma-separated list names, in its order; every model for None.

    Raises:
        UserError: a name is not a model of the zoo, or the list names none.
    """
    if names is None:
        return list(MODELS.values())
    chosen = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in MODELS]
    if unknown:
        raise UserError(f"unknown model {', '.join(unknown)}; models: {', '.join(MODELS)}")
    if not chosen:
        raise UserError(f"--models names no model; models: {', '.join(MODELS)}")
    return [MODELS[name] for name in dict.fromkeys(chosen)]
