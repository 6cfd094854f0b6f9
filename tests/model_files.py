"""Tiny model files for the tests of ``autosched.model``: an MLP as ONNX (16x64, its batch
dimension named or fixed), PyTorch ExportedPrograms (a conv-relu-pool block on 1x3x32x32, GELUs
and a softmax, a miniature Transformer block on 1x8x32 tokens), and a Relax module in
TVMScript."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_mlp_onnx(
    path: Path, *, hidden: int = 64, outputs: int = 10, batch: int | str = 16, seed: int = 0
) -> Path:
    """``x[batch, 64] -> MatMul+Add (64 x hidden) -> Relu -> MatMul+Add (hidden x outputs)``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.uniform(-0.5, 0.5, shape).astype(np.float32), name)

    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h0"]),
            helper.make_node("Add", ["h0", "b1"], ["h1"]),
            helper.make_node("Relu", ["h1"], ["h2"]),
            helper.make_node("MatMul", ["h2", "w2"], ["h3"]),
            helper.make_node("Add", ["h3", "b2"], ["y"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, outputs])],
        [weight("w1", 64, hidden), weight("b1", hidden), weight("w2", hidden, outputs),
         weight("b2", outputs)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def write_onnx_with(path: Path, op_type: str) -> Path:
    """A one-node ONNX model ``y = OP(x)`` of a 4x4 float tensor."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node(op_type, ["x"], ["y"])],
        "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def write_cubing_gelu_onnx(path: Path) -> Path:
    """GPT-2's tanh GELU as its ONNX export writes it, the cube a ``Pow`` by 3, of an 8x32 float
    tensor, plus ``Pow(Abs(x), 1.5)``: ``y = 0.5 x (1 + tanh(0.79788 (x + 0.044715 x^3))) +
    |x|^1.5``."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    numbers = {
        "three": 3.0,
        "c": 0.044715,
        "k": (2 / np.pi) ** 0.5,
        "one": 1.0,
        "half": 0.5,
        "three_halves": 1.5,
    }
    constants = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in numbers.items()]
    steps = [
        ("Pow", ["x", "three"], "cube"),
        ("Mul", ["cube", "c"], "scaled_cube"),
        ("Add", ["x", "scaled_cube"], "inner"),
        ("Mul", ["inner", "k"], "argument"),
        ("Tanh", ["argument"], "tanh"),
        ("Add", ["tanh", "one"], "gate"),
        ("Mul", ["x", "gate"], "gated"),
        ("Mul", ["gated", "half"], "gelu"),
        ("Abs", ["x"], "magnitude"),
        ("Pow", ["magnitude", "three_halves"], "root"),
        ("Add", ["gelu", "root"], "y"),
    ]
    graph = helper.make_graph(
        [helper.make_node(op, inputs, [output]) for op, inputs, output in steps],
        "cubing_gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32])],
        constants,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def write_conv_block_pt2(path: Path, *, relu6: bool = False) -> Path:
    """Conv2d(3, 8, 3, padding=1) -> BatchNorm2d(8) -> ReLU (or ReLU6) -> MaxPool2d(2) on
    1x3x32x32, as torch.export saves it; the batch norm's statistics and affine weights are
    random."""
    import torch

    torch.manual_seed(0)
    norm = torch.nn.BatchNorm2d(8)
    with torch.no_grad():
        norm.running_mean.uniform_(-0.5, 0.5)
        norm.running_var.uniform_(0.5, 2.0)
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    block = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        norm,
        torch.nn.ReLU6() if relu6 else torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
    ).eval()
    program = torch.export.export(block, (torch.randn(1, 3, 32, 32),))
    torch.export.save(program, str(path))
    return path


def write_residual_block_pt2(path: Path) -> Path:
    """A ResNet basic block on 1x16x16x16 (16 output tiles of 4x4), as torch.export saves it:
    Conv2d(16, 16, 3, padding=1) -> BatchNorm2d -> ReLU -> Conv2d(16, 16, 3, padding=1) ->
    BatchNorm2d, added to the block's input, -> ReLU; the batch norms' statistics are random."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)
            self.norm1 = torch.nn.BatchNorm2d(16)
            self.conv2 = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)
            self.norm2 = torch.nn.BatchNorm2d(16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.norm1(self.conv1(x)))
            return torch.relu(self.norm2(self.conv2(y)) + x)

    torch.manual_seed(0)
    block = Block()
    with torch.no_grad():
        for norm in (block.norm1, block.norm2):
            norm.running_mean.uniform_(-0.5, 0.5)
            norm.running_var.uniform_(0.5, 2.0)
    program = torch.export.export(block.eval(), (torch.randn(1, 16, 16, 16),))
    torch.export.save(program, str(path))
    return path


def write_gelu_softmax_pt2(path: Path) -> Path:
    """Linear(32, 64) -> GELU -> Linear(64, 64) -> GELU (its tanh form) -> softmax on 8x32, as
    torch.export saves it."""
    import torch

    torch.manual_seed(0)
    block = torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.GELU(),
        torch.nn.Linear(64, 64),
        torch.nn.GELU(approximate="tanh"),
        torch.nn.Softmax(dim=-1),
    ).eval()
    program = torch.export.export(block, (torch.randn(8, 32),))
    torch.export.save(program, str(path))
    return path


def write_excited_conv_pt2(path: Path) -> Path:
    """EfficientNet's motif on 1x16x12x12, as torch.export saves it: a convolution and its SiLU,
    then a squeeze-and-excite gate (mean over the pixels, 1x1 convolution, SiLU, 1x1 convolution,
    sigmoid) that scales the channels."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(16, 16, 3, padding=1)
            self.squeeze = torch.nn.Conv2d(16, 4, 1)
            self.excite = torch.nn.Conv2d(4, 16, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.nn.functional.silu(self.conv(x))
            gate = torch.nn.functional.silu(self.squeeze(y.mean((2, 3), keepdim=True)))
            return y * torch.sigmoid(self.excite(gate))

    torch.manual_seed(0)
    program = torch.export.export(Block().eval(), (torch.randn(1, 16, 12, 12) * 4,))
    torch.export.save(program, str(path))
    return path


def write_token_block_pt2(path: Path) -> Path:
    """A miniature Transformer block on tokens 1x8x32, as torch.export saves it: two-head
    attention (scores scaled by 1/4, softmax) with its output projection added back to the
    tokens, then Linear(32, 64) -> GELU -> Linear(64, 32) added back. PyTorch exports each
    linear layer on tokens as a reshape to 8x32, a matmul and a reshape back."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query, self.key, self.value, self.out = (torch.nn.Linear(32, 32) for _ in "qkvo")
            self.up, self.down = torch.nn.Linear(32, 64), torch.nn.Linear(64, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            def heads(t: torch.Tensor) -> torch.Tensor:
                return t.reshape(1, 8, 2, 16).permute(0, 2, 1, 3)

            q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
            scores = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / 4.0, dim=-1)
            context = torch.matmul(scores, v).permute(0, 2, 1, 3).reshape(1, 8, 32)
            x = x + self.out(context)
            return x + self.down(torch.nn.functional.gelu(self.up(x)))

    torch.manual_seed(0)
    program = torch.export.export(Block().eval(), (torch.randn(1, 8, 32),))
    torch.export.save(program, str(path))
    return path


RELAX_MODEL = """\
from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class Module:
    @R.function
    def main(
        x: R.Tensor((16, 64), "float32"), w: R.Tensor((64, 32), "float32")
    ) -> R.Tensor((16, 32), "float32"):
        with R.dataflow():
            h = R.matmul(x, w)
            y = R.nn.relu(h)
            R.output(y)
        return y
"""
