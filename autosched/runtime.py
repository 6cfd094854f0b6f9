"""The loader of exported artefacts: a tuned kernel or model library and the manifest beside it,
run as the tuner timed it, TVM's thread pool as wide as the tuned target's cores.

What a deployment ships with: numpy and TVM's runtime, never the tuning log, the server, the
search or the cost models. The manifest's format is written by ``autosched.exports.kernels``::

    from autosched.runtime import load
    c = load("matmul.so")(a, b)          # a kernel: its input arrays in, its output out
    logits = load("mlp.so")(x=x)         # a model: the Relax VM's main with named inputs
"""

from __future__ import annotations

import json
import os
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autosched.errors import UserError

MANIFEST = "autosched-artefact"
MANIFEST_VERSION = 1
THREADS_VARIABLE = "TVM_NUM_THREADS"
KINDS = ("kernel", "model")
DEVICES = ("cpu", "cuda")
MAX_THREADS = 4096
_MAX_MANIFEST_BYTES = 16 << 20
_BIG_CORES = 1  # TVM's AffinityMode kBig: the mode a pool starts in
_FLUSH_CACHES = "cache_flush_cpu_non_first_arg"

Outputs = np.ndarray | tuple[np.ndarray, ...]


@dataclass(frozen=True)
class TensorSpec:
    """An input or output of the artefact's function (``shape`` None: an output whose shape
    the model leaves to the run)."""

    name: str
    shape: tuple[int, ...] | None
    dtype: str


@dataclass(frozen=True)
class Timing:
    """How the tuner took one sample of a program: ``warmup`` calls first, then calls for at
    least ``min_repeat_ms`` (their mean is the sample) or, ``cold``, one call after the CPU
    caches are flushed of every argument but the first; a final takes ``rounds`` samples of each
    finalist, side by side."""

    warmup: int
    min_repeat_ms: int
    rounds: int
    cold: bool


@dataclass(frozen=True)
class Manifest:
    """An artefact's manifest: what its library holds and how it was tuned to run.

    ``threads`` is the size of TVM's thread pool that every candidate was timed with (None: a
    GPU artefact, or a target that left the pool at TVM's default). ``document`` is the whole
    file, for what the loader itself does not read (the workload, the tuned latencies, the
    model's source).
    """

    path: Path
    kind: str
    library: Path
    function: str
    device: str
    threads: int | None
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    timing: Timing
    document: dict[str, Any]


def read_manifest(path: Path) -> Manifest:
    """The manifest of the artefact at ``path``: its library (``.so``, the manifest beside it
    with the suffix ``.json``) or the manifest itself.

    Raises:
        UserError: no such file, or a manifest this loader cannot read (another format or
            version, a field missing or of the wrong type, a library that is not beside it).
    """
    if path.suffix not in (".so", ".json"):
        raise UserError(f"{path}: give an exported library (.so) or its manifest (.json)")
    manifest_path = path.with_suffix(".json")
    try:
        with manifest_path.open("rb") as stream:
            text = stream.read(_MAX_MANIFEST_BYTES + 1)
    except OSError as error:
        raise UserError(f"cannot read the manifest {manifest_path}: {error.strerror}") from None
    if len(text) > _MAX_MANIFEST_BYTES:
        raise UserError(f"{manifest_path} is over {_MAX_MANIFEST_BYTES} bytes: not a manifest")
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise UserError(f"{manifest_path} is not JSON") from None
    try:
        return _manifest(manifest_path, document)
    except UserError as error:
        raise UserError(f"{manifest_path}: {error}") from None


def _manifest(path: Path, document: Any) -> Manifest:
    if not isinstance(document, dict) or document.get("manifest") != MANIFEST:
        raise UserError(
            f"not an {MANIFEST} manifest (an export of an older autosched?); export it again"
        )
    version = document.get("manifest_version")
    if version != MANIFEST_VERSION:
        raise UserError(
            f"manifest version {version!r}; this loader reads version {MANIFEST_VERSION}"
        )
    kind = _choice(document, "kind", KINDS)
    library = _text(document, "library")
    if Path(library).name != library or not library.endswith(".so"):
        raise UserError(f"library must name a .so file beside the manifest, not {library!r}")
    runtime = _field(document, "runtime", dict)
    device = _choice(runtime, "device", DEVICES)
    threads = runtime.get("num_threads")
    if threads is not None and not _count(threads, MAX_THREADS):
        raise UserError(f"runtime.num_threads must be null or a count of 1 to {MAX_THREADS}")
    timing = _field(document, "timing", dict)
    if kind == "kernel":
        arguments = [_tensor(item, "arguments") for item in _field(document, "arguments", list)]
        outputs = _field(document, "num_outputs", int)
        if not 1 <= outputs <= len(arguments):
            raise UserError(f"num_outputs must lie between 1 and {len(arguments)}")
        inputs, results = arguments[:-outputs], arguments[-outputs:]
    else:
        inputs = [_tensor(item, "inputs") for item in _field(document, "inputs", list)]
        results = [
            _tensor(item, "outputs", open_shape=True) for item in _field(document, "outputs", list)
        ]
    return Manifest(
        path=path,
        kind=kind,
        library=path.parent / library,
        function=_text(document, "function"),
        device=device,
        threads=threads if device == "cpu" else None,
        inputs=tuple(inputs),
        outputs=tuple(results),
        timing=Timing(
            warmup=_field(timing, "warmup", int),
            min_repeat_ms=_field(timing, "min_repeat_ms", int),
            rounds=_field(timing, "rounds", int),
            cold=_field(timing, "cold", bool),
        ),
        document=document,
    )


def _field(document: dict[str, Any], name: str, kind: type) -> Any:
    value = document.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UserError(f"{name} must be {kind.__name__}, not {type(value).__name__}")
    return value


def _text(document: dict[str, Any], name: str) -> str:
    value = _field(document, name, str)
    if not value or len(value) > 255:
        raise UserError(f"{name} must be a name of 1 to 255 characters")
    return value


def _choice(document: dict[str, Any], name: str, choices: tuple[str, ...]) -> str:
    value = document.get(name)
    if value not in choices:
        raise UserError(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return value


def _count(value: Any, most: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= most


def _size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 40


def _tensor(item: Any, where: str, *, open_shape: bool = False) -> TensorSpec:
    if not isinstance(item, dict):
        raise UserError(f"each of {where} must be an object with name, shape and dtype")
    shape = item.get("shape")
    if shape is None and open_shape:
        dims = None
    elif isinstance(shape, list) and len(shape) <= 32 and all(_size(dim) for dim in shape):
        dims = tuple(shape)
    else:
        raise UserError(f"{where}: a shape must be a list of sizes")
    dtype = item.get("dtype")
    if dtype is None and open_shape:
        dtype = ""
    elif not isinstance(dtype, str) or not dtype:
        raise UserError(f"{where}: a dtype must be a name such as float32")
    return TensorSpec(_text(item, "name"), dims, dtype)


def use_threads(count: int) -> int:
    """Size TVM's thread pool to ``count`` threads; returns how many the pool of this thread has.

    TVM sizes a thread's pool as it starts, from ``TVM_NUM_THREADS`` (else from its own guess of
    the physical cores: half the logical CPUs on x86, one thread on a 2-vCPU machine), and a
    started pool can shrink but never grow: ``runtime.config_threadpool`` caps the count at the
    size the pool started with. So the variable is set first, for every pool that starts later
    in any thread, then this thread's pool is configured, and started at that size if it was
    not. Fewer threads than ``count`` come back where this thread ran a parallel TVM program
    on a smaller pool before; only setting the variable before that program helps then.
    """
    import tvm

    os.environ[THREADS_VARIABLE] = str(count)
    tvm.get_global_func("runtime.config_threadpool")(_BIG_CORES, count)
    return int(tvm.runtime.num_threads())


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class Artefact(ABC):
    """A loaded artefact: its manifest, the device it runs on and the threads of TVM's pool
    (None: a GPU artefact)."""

    def __init__(self, manifest: Manifest, device: Any, threads: int | None) -> None:
        self.manifest = manifest
        self.device = device
        self.threads = threads

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self.manifest.inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self.manifest.outputs

    def arrays(self, positional: Sequence[Any], named: Mapping[str, Any]) -> list[np.ndarray]:
        """The inputs of a call, by position or by name, checked against the manifest.

        Raises:
            UserError: an input missing, unknown or given twice, or of another shape or dtype.
        """
        specs = self.inputs
        if len(positional) > len(specs):
            raise UserError(f"{len(positional)} inputs given; the artefact takes {len(specs)}")
        given = dict(zip((spec.name for spec in specs), positional, strict=False))
        for name, value in named.items():
            if name not in {spec.name for spec in specs}:
                raise UserError(f"the artefact has no input {name!r}")
            if name in given:
                raise UserError(f"input {name!r} given twice")
            given[name] = value
        arrays = []
        for spec in specs:
            if spec.name not in given:
                raise UserError(f"input {spec.name!r} is missing")
            array = np.ascontiguousarray(given[spec.name])
            if array.shape != spec.shape or str(array.dtype) != spec.dtype:
                raise UserError(
                    f"input {spec.name!r} is {_describe(array.shape, str(array.dtype))}; the "
                    f"artefact takes {_describe(spec.shape, spec.dtype)}"
                )
            arrays.append(array)
        return arrays

    def sampler(self, inputs: Sequence[np.ndarray]) -> Callable[[], float]:
        """One sample of the artefact on ``inputs`` per call, in seconds, taken as the tuner
        takes one in a final (``Timing``); the warm-up calls are made here."""
        timing = self.manifest.timing
        args = self._device_args(inputs)
        function = self._owner()[self.manifest.function]

        def one_call() -> float:
            start = time.perf_counter()
            function(*args)
            self.device.sync()
            return time.perf_counter() - start

        warm = [one_call() for _ in range(timing.warmup)]
        evaluator = self._owner().time_evaluator(
            self.manifest.function,
            self.device,
            number=1,
            repeat=1,
            min_repeat_ms=0 if timing.cold else timing.min_repeat_ms,
            f_preproc=_FLUSH_CACHES if timing.cold else "",
        )
        # A call that lasts a sample's length is a sample: TVM's evaluator would first make an
        # untimed call, twice the time for a model of seconds.
        direct = not timing.cold and bool(warm) and warm[-1] * 1e3 >= timing.min_repeat_ms

        def sample() -> float:
            nonlocal direct
            if direct:
                secs = one_call()
                if secs * 1e3 >= timing.min_repeat_ms:
                    return secs
                direct = False
            return float(evaluator(*args).mean)

        return sample

    @abstractmethod
    def _owner(self) -> Any:
        """The module or VM whose function the artefact calls."""

    def _device_args(self, inputs: Sequence[np.ndarray]) -> list[Any]:
        import tvm

        return [tvm.runtime.tensor(array, self.device) for array in inputs]


class Kernel(Artefact):
    """A tuned kernel: ``kernel(*inputs)`` takes its input arrays (numpy, in the manifest's
    order, or by name) and returns its output, a tuple where it has several."""

    def __init__(self, manifest: Manifest, device: Any, threads: int | None) -> None:
        import tvm

        super().__init__(manifest, device, threads)
        self.module = tvm.runtime.load_module(str(manifest.library))

    def __call__(self, *inputs: Any, **named: Any) -> Outputs:
        args = self._device_args(self.arrays(inputs, named))
        self.module[self.manifest.function](*args)
        self.device.sync()
        results = [arg.numpy() for arg in args[len(self.inputs) :]]
        return results[0] if len(results) == 1 else tuple(results)

    def _owner(self) -> Any:
        return self.module

    def _device_args(self, inputs: Sequence[np.ndarray]) -> list[Any]:
        import tvm

        outputs = [
            tvm.runtime.empty(spec.shape or (), spec.dtype, self.device) for spec in self.outputs
        ]
        return super()._device_args(inputs) + outputs


class Model(Artefact):
    """A tuned model: ``model(**inputs)`` runs the Relax VM's main on its inputs (numpy, by name
    or in the manifest's order) and returns its output, a tuple where it has several."""

    def __init__(self, manifest: Manifest, device: Any, threads: int | None) -> None:
        import tvm
        from tvm import relax

        super().__init__(manifest, device, threads)
        self.vm = relax.VirtualMachine(tvm.runtime.load_module(str(manifest.library)), device)

    def __call__(self, *inputs: Any, **named: Any) -> Outputs:
        result = self.vm[self.manifest.function](*self._device_args(self.arrays(inputs, named)))
        results = [tensor.numpy() for tensor in _flatten(result)]
        return results[0] if len(results) == 1 else tuple(results)

    def _owner(self) -> Any:
        return self.vm


def load(path: str | os.PathLike[str], *, threads: int | None = None) -> Kernel | Model:
    """Load the artefact at ``path`` (its ``.so`` or its manifest) to run as it was tuned.

    On a CPU, TVM's thread pool is sized to the manifest's thread count before the first call
    (`use_threads`), or to ``threads`` where given (neither: left as TVM sizes it); a count
    over the CPUs this process may run on is cut to them, and a pool that cannot reach the
    count is warned of (RuntimeWarning): it runs slower than it was tuned.

    Example::

        import numpy as np
        from autosched.runtime import load

        matmul = load("matmul.so")
        a, b = (np.random.rand(1024, 1024).astype("float32") for _ in range(2))
        c = matmul(a, b)

    Raises:
        UserError: a manifest the loader cannot read, or a library missing beside it.
    """
    import tvm

    manifest = read_manifest(Path(path))
    if not manifest.library.is_file():
        raise UserError(f"{manifest.path}: its library {manifest.library} is missing")
    count = None
    wanted = threads if threads is not None else manifest.threads
    if manifest.device == "cpu" and wanted is not None:
        if threads is None and wanted > _available_cpus():
            warnings.warn(
                f"{manifest.path.name} was tuned on {wanted} threads; this process may run on "
                f"{_available_cpus()} CPUs and uses them",
                RuntimeWarning,
                stacklevel=2,
            )
            wanted = _available_cpus()
        count = use_threads(wanted)
        if count < wanted:
            warnings.warn(
                f"TVM's thread pool of this thread started with {count} threads before "
                f"{manifest.path.name} was loaded and cannot grow: it runs slower than it was "
                f"tuned; set {THREADS_VARIABLE}={wanted} before the process first runs TVM code",
                RuntimeWarning,
                stacklevel=2,
            )
    device = tvm.device(manifest.device, 0)
    artefact = Kernel if manifest.kind == "kernel" else Model
    return artefact(manifest, device, count)


def _describe(shape: tuple[int, ...] | None, dtype: str) -> str:
    dims = "?" if shape is None else "x".join(str(dim) for dim in shape) or "a scalar"
    return f"{dims} {dtype}"


def _flatten(value: Any) -> list[Any]:
    """The tensors of a VM result: a tensor, or (nested) tuples of them."""
    if hasattr(value, "numpy"):
        return [value]
    return [tensor for item in value for tensor in _flatten(item)]
