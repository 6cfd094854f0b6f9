"""Peers: what a user would run instead of each built-in workload, to compare tuned programs with.

A library peer is a Python callable (numpy, PyTorch on the CPU, OpenCV, scipy) bound to the
workload's inputs; a workload peer is another workload (the naive or padded version), tuned with the
same budget. Optional libraries fall back to scipy or numpy, and the peer's name says which ran.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import ModuleType

import numpy as np

from autosched.torch_guard import import_torch
from autosched.workload import Workload
from autosched.workloads._registry import get_workload
from autosched.workloads.image import UNSHARP_RADIUS, UNSHARP_SIGMA, gaussian_taps
from autosched.workloads.ragged import parse_lengths

Outputs = list[np.ndarray]
Bind = Callable[[list[np.ndarray]], Callable[[], Outputs]]


@dataclass(frozen=True)
class Peer:
    """What the tuned workload is compared with.

    Exactly one of ``bind`` and ``workload`` is set. ``bind`` takes the workload's inputs and
    returns the call to time (preparation such as layout changes or dequantising weights happens
    in ``bind``, untimed), whose outputs match the workload's. ``fallback`` says why the
    preferred library was not used, when it was not. ``alternatives`` are other ways the same
    library runs the workload (PyTorch's convolutions in channels-last memory): each is timed,
    and the fastest counts.
    """

    name: str
    bind: Bind | None = None
    workload: Workload | None = None
    fallback: str | None = None
    alternatives: tuple[Peer, ...] = ()

    @property
    def ways(self) -> tuple[Peer, ...]:
        """This peer and its alternatives: every way of running the workload to time or check."""
        return (self, *self.alternatives)


def peer_for(workload: Workload) -> Peer:
    """The peer of a built-in workload.

    Raises:
        KeyError: the workload has no peer (a user's TVMScript workload).
    """
    return _PEERS[workload.name](workload)


def has_peer(name: str) -> bool:
    return name in _PEERS


def use_peer_threads(threads: int) -> None:
    """Run PyTorch peers on ``threads`` threads, as many as the tuned programs are timed on."""
    torch = _torch()
    if torch is not None:
        torch.set_num_threads(threads)


def _optional(module: str) -> ModuleType | None:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _torch() -> ModuleType | None:
    """PyTorch where installed, let in even where the command line keeps it out of the process."""
    try:
        return import_torch()
    except ImportError:
        return None


def _torch_name(torch: ModuleType) -> str:
    return f"torch {torch.__version__.split('+')[0]} CPU"


def _reference_peer(workload: Workload, missing: str | None = None) -> Peer:
    """The numpy reference itself, as the peer where nothing else applies."""
    reference = workload.reference
    assert reference is not None
    return Peer("numpy (reference)", lambda inputs: lambda: reference(inputs), fallback=missing)


def _numpy_matmul(workload: Workload) -> Peer:
    def bind(inputs: list[np.ndarray]) -> Callable[[], Outputs]:
        lhs, rhs = inputs
        return lambda: [np.matmul(lhs, rhs)]

    return Peer("numpy (OpenBLAS)", bind)


def _numpy_dense_bias_relu(workload: Workload) -> Peer:
    def bind(inputs: list[np.ndarray]) -> Callable[[], Outputs]:
        x, w, bias = inputs
        return lambda: [np.maximum(x @ w.T + bias, 0)]

    return Peer("numpy (OpenBLAS)", bind)


def _torch_peer(workload: Workload, build: Callable[[ModuleType, list], Callable[[], object]]):
    """A PyTorch peer when torch is installed, else the numpy reference. ``build`` gets torch and
    the inputs as CPU tensors (sharing memory with the arrays) and returns the call to time."""
    torch = _torch()
    if torch is None:
        return _reference_peer(workload, "torch is not installed")

    def bind(inputs: list[np.ndarray]) -> Callable[[], Outputs]:
        call = build(torch, [torch.from_numpy(array) for array in inputs])

        def run() -> Outputs:
            with torch.inference_mode():
                result = call()
            results = result if isinstance(result, tuple) else (result,)
            return [tensor.numpy() for tensor in results]

        return run

    return Peer(_torch_name(torch), bind)


_NHWC_CONVOLUTIONS = frozenset({"conv2d_nhwc", "conv2d_nhwc_winograd"})
"""The convolutions of NHWC data and HWIO weights (the others' are NCHW and OIHW)."""


def _conv2d(workload: Workload) -> Peer:
    """PyTorch's convolution on contiguous tensors in both of its memory layouts, NCHW and
    channels-last (inputs converted before timing); the faster counts."""
    params = workload.params
    stride, padding = int(params.get("stride", 1)), int(params["padding"])
    torch = _torch()
    if torch is None:
        return _scipy_conv2d(workload)
    F = torch.nn.functional
    nhwc = workload.name in _NHWC_CONVOLUTIONS
    depthwise = workload.name == "depthwise_conv2d"

    def in_memory(layout: object) -> Callable[[ModuleType, list], Callable[[], object]]:
        def build(torch: ModuleType, tensors: list) -> Callable[[], object]:
            data, weight = tensors
            if nhwc:  # NHWC data and HWIO weights, seen as NCHW and OIHW
                data, weight = data.permute(0, 3, 1, 2), weight.permute(3, 2, 0, 1)
            if depthwise:  # one filter of one channel per channel
                weight = weight.reshape(weight.shape[0], 1, *weight.shape[1:])
            data = data.contiguous(memory_format=layout)
            weight = weight.contiguous(memory_format=layout)
            groups = weight.shape[0] if depthwise else 1

            def call() -> object:
                out = F.conv2d(data, weight, stride=stride, padding=padding, groups=groups)
                return out.permute(0, 2, 3, 1) if nhwc else out

            return call

        return build

    nchw = _torch_peer(workload, in_memory(torch.contiguous_format))
    channels_last = _torch_peer(workload, in_memory(torch.channels_last))
    return replace(
        nchw,
        name=f"{nchw.name}, NCHW",
        alternatives=(replace(channels_last, name=f"{channels_last.name}, channels-last"),),
    )


def _scipy_conv2d(workload: Workload) -> Peer:
    """Convolution by scipy.signal.correlate, one output channel at a time (NCHW inside)."""
    from scipy import signal

    params = workload.params
    stride, padding = int(params.get("stride", 1)), int(params["padding"])
    depthwise = workload.name == "depthwise_conv2d"

    def bind(inputs: list[np.ndarray]) -> Callable[[], Outputs]:
        data, weight = inputs
        if workload.name in _NHWC_CONVOLUTIONS:
            data, weight = data.transpose(0, 3, 1, 2), weight.transpose(3, 2, 0, 1)
        if depthwise:
            weight = weight[:, None]

        def run() -> Outputs:
            padded = np.pad(data, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
            out = np.stack(
                [
                    np.stack(
                        [
                            signal.correlate(
                                padded[n, co : co + 1] if depthwise else padded[n],
                                weight[co],
                                mode="valid",
                            )[0, ::stride, ::stride]
                            for co in range(weight.shape[0])
                        ]
                    )
                    for n in range(padded.shape[0])
                ]
            )
            return [out.transpose(0, 2, 3, 1) if workload.name in _NHWC_CONVOLUTIONS else out]

        return run

    return Peer("scipy.signal.correlate", bind, fallback="torch is not installed")


def _conv1d_glu(workload: Workload) -> Peer:
    width = int(workload.params["KW"])

    def build(torch: ModuleType, tensors: list) -> Callable[[], object]:
        F = torch.nn.functional
        x, weight, bias = tensors
        sequence = x.permute(0, 2, 1)  # (N, C, L) view
        filters = weight.permute(2, 1, 0).contiguous()  # (2C, C, KW)
        return lambda: (
            F.glu(F.conv1d(sequence, filters, bias, padding=width // 2), dim=1) + sequence
        ).permute(0, 2, 1)

    return _torch_peer(workload, build)


def _softmax(workload: Workload) -> Peer:
    return _torch_peer(workload, lambda torch, t: lambda: torch.softmax(t[0], dim=1))


def _global_avg_pool(workload: Workload) -> Peer:
    return _torch_peer(workload, lambda torch, t: lambda: torch.mean(t[0], dim=(1, 2)))


def _layernorm(workload: Workload) -> Peer:
    from autosched.workloads.nn import LAYERNORM_EPSILON

    def build(torch: ModuleType, tensors: list) -> Callable[[], object]:
        x, gamma, beta = tensors
        shape = (x.shape[1],)
        F = torch.nn.functional
        return lambda: F.layer_norm(x, shape, gamma, beta, LAYERNORM_EPSILON)

    return _torch_peer(workload, build)


def _attention_luong(workload: Workload) -> Peer:
    def build(torch: ModuleType, tensors: list) -> Callable[[], object]:
        target, source, w_a = tensors
        return lambda: torch.bmm(
            torch.softmax(torch.bmm(target, (source @ w_a.T).transpose(1, 2)), dim=-1), source
        )

    return _torch_peer(workload, build)


def _attention_bahdanau(workload: Workload) -> Peer:
    def build(torch: ModuleType, tensors: list) -> Callable[[], object]:
        query, source, w_q, w_k, v = tensors

        def run() -> object:
            hidden = torch.tanh((query @ w_q.T)[:, :, None, :] + (source @ w_k.T)[:, None, :, :])
            return torch.bmm(torch.softmax(hidden @ v, dim=-1), source)

        return run

    return _torch_peer(workload, build)


def _attention_naive(workload: Workload) -> Peer:
    def build(torch: ModuleType, tensors: list) -> Callable[[], object]:
        q, k, v = tensors
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)

    return _torch_peer(workload, build)


def _attention_chunked(workload: Workload) -> Peer:
    params = {name: workload.params[name] for name in ("B", "L", "D", "dtype")}
    return Peer("autosched attention_naive", workload=get_workload("attention_naive", params))


def _ragged_batch_matmul(workload: Workload) -> Peer:
    lengths = parse_lengths(str(workload.params["lengths"]))
    params = {
        "B": len(lengths),
        "M": max(lengths),
        "N": workload.params["N"],
        "K": workload.params["K"],
        "dtype": workload.params["dtype"],
    }
    return Peer("autosched batch_matmul (padded)", workload=get_workload("batch_matmul", params))


def _dequantised_product(workload: Workload) -> Peer:
    """Quantised kernels against float32 BLAS on weights dequantised beforehand (untimed)."""
    from autosched.workloads.quantized import dequantize_int4, dequantize_lowbit, unpack_vnni

    def bind(inputs: list[np.ndarray]) -> Callable[[], Outputs]:
        lhs = inputs[0].astype(np.float32)
        if workload.name == "matmul_int8":
            rhs = inputs[1] if workload.params["layout"] == "plain" else unpack_vnni(inputs[1])
            weight = np.ascontiguousarray(rhs, dtype=np.float32)
            return lambda: [np.matmul(lhs, weight).astype(np.int32)]
        if workload.name == "gemv_lut_lowbit":
            weight = dequantize_lowbit(*inputs[1:]).astype(np.float32)
            return lambda: [weight @ lhs]
        qweight, scales, zeros = inputs[1:]
        group = int(workload.params["group"])
        weight = dequantize_int4(qweight, scales, zeros, group).astype(np.float32)
        return lambda: [lhs @ weight.T]

    return Peer("numpy (OpenBLAS, float32 weights)", bind)


def _mxfp8_quantize(workload: Workload) -> Peer:
    from autosched.workloads.quantized import E4M3_MAX, E8M0_BIAS, MX_BLOCK

    def build(torch: ModuleType, tensors: list) -> Callable[[], object]:
        (x,) = tensors
        rows, cols = x.shape
        blocks = x.view(rows, cols // MX_BLOCK, MX_BLOCK)

        def run() -> object:
            mantissa, exponent = torch.frexp(blocks.abs().amax(dim=-1) / E4M3_MAX)
            exponent = exponent - (mantissa == 0.5).to(exponent.dtype)
            exponent = torch.where(mantissa == 0, -E8M0_BIAS, exponent)
            biased = (exponent + E8M0_BIAS).clamp(0, 2 * E8M0_BIAS)
            scaled = blocks * torch.exp2((E8M0_BIAS - biased).to(torch.float32))[..., None]
            fp8 = scaled.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
            return fp8.view(torch.uint8).reshape(rows, cols), biased.to(torch.uint8)

        return run

    return _torch_peer(workload, build)


def _opencv() -> ModuleType | None:
    return _optional("cv2")


def _image_peer(workload: Workload, opencv: Bind, scipy: Bind) -> Peer:
    cv2 = _opencv()
    if cv2 is None:
        return Peer("scipy.ndimage", scipy, fallback="opencv-python-headless is not installed")
    return Peer(f"opencv {cv2.__version__}", opencv)


def _blur3x3(workload: Workload) -> Peer:
    def opencv(inputs: list[np.ndarray]) -> Callable[[], Outputs]:
        cv2 = _opencv()
        assert cv2 is not None
        return lambda: [cv2.blur(inputs[0], (3, 3))[1:-1, 1:-1]]

    def scipy(inputs: list[np.ndarray]) -> Callable[[], Outputs]:
        from scipy import ndimage

        return lambda: [ndimage.uniform_filter(inputs[0], 3)[1:-1, 1:-1]]

    return _image_peer(workload, opencv, scipy)


def _unsharp_mask(workload: Workload) -> Peer:
    r = UNSHARP_RADIUS
    taps = np.array(gaussian_taps(UNSHARP_SIGMA, r), np.float32)

    def opencv(inputs: list[np.ndarray]) -> Callable[[], Outputs]:
        cv2 = _opencv()
        assert cv2 is not None
        image = inputs[0]

        def run() -> Outputs:
            blurred = cv2.sepFilter2D(image, -1, taps, taps)
            return [cv2.addWeighted(image, 2.0, blurred, -1.0, 0.0)[r:-r, r:-r]]

        return run

    def scipy(inputs: list[np.ndarray]) -> Callable[[], Outputs]:
        from scipy import ndimage

        image = inputs[0]

        def run() -> Outputs:
            blurred = ndimage.correlate1d(ndimage.correlate1d(image, taps, axis=1), taps, axis=0)
            return [(2 * image - blurred)[r:-r, r:-r]]

        return run

    return _image_peer(workload, opencv, scipy)


def _harris_corner(workload: Workload) -> Peer:
    from autosched.workloads.image import HARRIS_GRADIENT_SCALE, HARRIS_K

    def opencv(inputs: list[np.ndarray]) -> Callable[[], Outputs]:
        cv2 = _opencv()
        assert cv2 is not None
        return lambda: [cv2.cornerHarris(inputs[0], 3, 3, HARRIS_K)[2:-2, 2:-2]]

    def scipy(inputs: list[np.ndarray]) -> Callable[[], Outputs]:
        from scipy import ndimage

        image = inputs[0]

        def run() -> Outputs:
            gx, gy = (HARRIS_GRADIENT_SCALE * ndimage.sobel(image, axis=a) for a in (1, 0))
            xx, yy, xy = (9 * ndimage.uniform_filter(p, 3) for p in (gx * gx, gy * gy, gx * gy))
            return [(xx * yy - xy * xy - HARRIS_K * (xx + yy) ** 2)[2:-2, 2:-2]]

        return run

    return _image_peer(workload, opencv, scipy)


_PEERS: dict[str, Callable[[Workload], Peer]] = {
    "matmul": _numpy_matmul,
    "batch_matmul": _numpy_matmul,
    "dense_bias_relu": _numpy_dense_bias_relu,
    "conv2d_nhwc": _conv2d,
    "conv2d_nchw": _conv2d,
    "conv2d_nchw_winograd": _conv2d,
    "conv2d_nhwc_winograd": _conv2d,
    "depthwise_conv2d": _conv2d,
    "conv1d_glu": _conv1d_glu,
    "softmax": _softmax,
    "layernorm": _layernorm,
    "global_avg_pool": _global_avg_pool,
    "attention_luong": _attention_luong,
    "attention_bahdanau": _attention_bahdanau,
    "attention_naive": _attention_naive,
    "attention_chunked": _attention_chunked,
    "matmul_int4_weight": _dequantised_product,
    "matmul_int8": _dequantised_product,
    "gemv_lut_lowbit": _dequantised_product,
    "mxfp8_quantize": _mxfp8_quantize,
    "dropout_philox": _reference_peer,
    "blur3x3": _blur3x3,
    "unsharp_mask": _unsharp_mask,
    "harris_corner": _harris_corner,
    "ragged_batch_matmul": _ragged_batch_matmul,
}
