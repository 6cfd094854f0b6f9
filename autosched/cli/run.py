"""`autosched run ARTEFACT`: an exported kernel or model run through ``autosched.runtime`` as a
deployment runs it, in this process and nothing of the tuner's, its outputs' shapes printed; with
``--time``, timed as the tuner times a final, side by side in the same rounds with a peer
(``--compare``: numpy or PyTorch beside a kernel, ONNX Runtime or PyTorch beside a model).
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autosched.cli.options import JsonOpt
from autosched.errors import UserError

if TYPE_CHECKING:
    import numpy as np

    from autosched.runtime import Artefact, Timing

_out = Console()
_err = Console(stderr=True)

PEERS = ("numpy", "torch", "onnxruntime")
_MODEL_PEERS = {"onnxruntime": "onnx", "torch": "pytorch"}
MAX_ROUNDS = 1000

PeerCall = Callable[[], Sequence[Any]]


@dataclass(frozen=True)
class Timed:
    """The samples of one entrant of the rounds, in seconds, with their median and interval."""

    name: str
    samples: list[float]

    def as_json(self) -> dict[str, object]:
        from autosched.finals.ranking import median_interval

        interval = median_interval(self.samples)
        return {
            "name": self.name,
            "median_us": statistics.median(self.samples) * 1e6,
            "interval_us": [interval.low * 1e6, interval.high * 1e6],
            "confidence": interval.confidence,
            "samples_us": [sample * 1e6 for sample in self.samples],
        }


def run_artefact(
    artefact: Annotated[
        Path, typer.Argument(help="An exported library (.so) or its manifest (.json).")
    ],
    inputs: Annotated[
        list[str] | None,
        typer.Option("--input", help="NAME=FILE.npy: an input of the artefact (left out: random)."),
    ] = None,
    time_it: Annotated[
        bool,
        typer.Option(
            "--time",
            help="Time it as the tuner times a final: rounds of one sample (calls for at least "
            "40 ms, or one cache-cold call where it was tuned so), its median and 95% interval.",
        ),
    ] = False,
    compare: Annotated[
        str | None,
        typer.Option(
            "--compare",
            help="Time a peer in the same rounds and compare outputs: numpy or torch beside a "
            "kernel (the workload's peer), onnxruntime or torch beside a model (its source file).",
        ),
    ] = None,
    rounds: Annotated[
        int | None,
        typer.Option(min=1, max=MAX_ROUNDS, help="Rounds of --time [the manifest's: 10]."),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(min=1, max=4096, help="Threads of TVM's pool [the manifest's: as tuned]."),
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the random inputs.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Run an exported kernel or model through the loader (autosched.runtime) and print its
    outputs' shapes; with --time, time it as the tuner does, beside a peer with --compare."""
    from autosched.runtime import load

    if compare is not None and compare not in PEERS:
        raise UserError(f"--compare takes {', '.join(PEERS)}, not {compare!r}")
    if compare is not None and not time_it:
        raise UserError("--compare times a peer beside the artefact; give --time too")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        loaded = load(artefact, threads=threads)
    notes = [str(warning.message) for warning in caught]
    arrays = loaded.arrays(_read_inputs(loaded, inputs or [], seed), {})
    outputs = _as_tuple(loaded(*arrays))
    document: dict[str, Any] = {
        "artefact": str(artefact),
        "kind": loaded.manifest.kind,
        "device": loaded.manifest.device,
        "threads": loaded.threads,
        "tuned_threads": loaded.manifest.threads,
        "notes": notes,
        "outputs": [
            {"name": spec.name, "shape": list(array.shape), "dtype": str(array.dtype)}
            for spec, array in zip(loaded.outputs, outputs, strict=False)
        ],
        "tuned": {
            name: loaded.manifest.document.get(name)
            for name in ("single_shot_latency_us", "retimed_latency_us", "retimed_interval_us")
        },
        "peer": None,
        "timing": None,
    }
    peer = None
    if compare is not None:
        peer_name, peer = _peer(loaded, compare, arrays)
        document["peer"] = {
            "name": peer_name,
            "max_abs_difference": _difference(outputs, tuple(peer())),
        }
    if time_it:
        timing = loaded.manifest.timing
        entrants = [("artefact", loaded.sampler(arrays))]
        if peer is not None:
            entrants.append((document["peer"]["name"], _python_sampler(peer, timing)))
        timed = _rounds(entrants, rounds or timing.rounds)
        document["timing"] = {
            "rounds": rounds or timing.rounds,
            "cold": timing.cold,
            "artefact": timed[0].as_json(),
            "peer": timed[1].as_json() if len(timed) > 1 else None,
        }
    if as_json:
        print(json.dumps(document))
    else:
        _print(loaded, document)


def _read_inputs(loaded: Artefact, given: list[str], seed: int) -> list[np.ndarray]:
    """The inputs of the run: those given as ``NAME=FILE.npy`` (data only: no pickles), the
    others random (floats in [-1, 1), integers in [0, 4], booleans)."""
    import numpy as np

    names = [spec.name for spec in loaded.inputs]
    files: dict[str, str] = {}
    for item in given:
        name, sep, path = item.partition("=")
        if not sep or not path:
            raise UserError(f"--input takes NAME=FILE.npy, not {item!r}")
        if name not in names:
            raise UserError(f"the artefact has no input {name!r}; its inputs: {', '.join(names)}")
        files[name] = path
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in loaded.inputs:
        if spec.name in files:
            path = files[spec.name]
            try:
                arrays.append(np.load(path, allow_pickle=False))
            except (OSError, ValueError, EOFError) as error:
                raise UserError(f"cannot read {path} as a .npy array: {error}") from None
            continue
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            arrays.append(rng.uniform(-1.0, 1.0, spec.shape).astype(dtype))
        elif dtype.kind in "iub":
            arrays.append(rng.integers(0, 2 if dtype.kind == "b" else 5, spec.shape).astype(dtype))
        else:
            raise UserError(f"cannot make a random {spec.dtype} input {spec.name}; give --input")
    return arrays


def _peer(loaded: Artefact, library: str, arrays: list[np.ndarray]) -> tuple[str, PeerCall]:
    if loaded.manifest.kind == "kernel":
        return _kernel_peer(loaded, library, arrays)
    return _model_peer(loaded, library, arrays)


def _kernel_peer(loaded: Artefact, library: str, arrays: list[np.ndarray]) -> tuple[str, PeerCall]:
    """The workload's library peer (`autosched bench`'s) of that library, on the same threads;
    for numpy, the workload's numpy reference where its peer is another library's."""
    from autosched.workloads import get_workload
    from autosched.workloads.peers import has_peer, peer_for, use_peer_threads

    document = loaded.manifest.document
    name, params = document.get("workload"), document.get("params")
    if not isinstance(name, str) or not isinstance(params, dict) or not has_peer(name):
        raise UserError(f"{name!r} is not a built-in workload with a peer; nothing to compare with")
    workload = get_workload(name, params)
    if workload.key != document.get("workload_key"):
        raise UserError(
            f"{name} rebuilds into another program here than the artefact's (another autosched "
            "or TVM); nothing to compare with"
        )
    if library == "torch" and loaded.threads is not None:
        use_peer_threads(loaded.threads)
    peer = peer_for(workload)
    for way in peer.ways:
        if way.bind is not None and way.name.split()[0].lower() == library:
            return way.name, way.bind(list(arrays))
    reference = workload.reference
    if library == "numpy" and reference is not None:
        return "numpy (reference)", lambda: reference(list(arrays))
    raise UserError(f"{name}'s peer is {peer.name}, not {library}")


def _model_peer(loaded: Artefact, library: str, arrays: list[np.ndarray]) -> tuple[str, PeerCall]:
    """The model file the artefact was compiled from, run by its framework on the same threads:
    ONNX Runtime for an ONNX file, PyTorch for a ``.pt2`` file (unpickled: your own files only)."""
    document = loaded.manifest.document
    model_format = document.get("format")
    if _MODEL_PEERS.get(library) != model_format:
        peers = [name for name, form in _MODEL_PEERS.items() if form == model_format]
        raise UserError(
            f"a {model_format} model compares with {' or '.join(peers) or 'no peer'}, not {library}"
        )
    source = document.get("source")
    if not isinstance(source, dict) or not isinstance(source.get("path"), str):
        raise UserError("the manifest names no model file to compare with; export it again")
    path = Path(source["path"])
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as error:
        raise UserError(f"cannot read the model file {path}: {error.strerror}") from None
    if digest != source.get("sha256"):
        raise UserError(f"{path} has changed since the artefact was exported from it")
    threads = loaded.threads or 0
    if library == "onnxruntime":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        feeds = {spec.name: array for spec, array in zip(loaded.inputs, arrays, strict=True)}
        return f"ONNX Runtime {onnxruntime.__version__}", lambda: session.run(None, feeds)
    from autosched.torch_guard import import_torch

    torch = import_torch()
    if threads:
        torch.set_num_threads(threads)
    module = torch.export.load(str(path)).module()
    tensors = [torch.from_numpy(array) for array in arrays]

    def call() -> list[Any]:
        with torch.inference_mode():
            result = module(*tensors)
        results = result if isinstance(result, tuple | list) else (result,)
        return [tensor.numpy() for tensor in results]

    return f"torch {torch.__version__.split('+')[0]} CPU", call


def _python_sampler(call: PeerCall, timing: Timing) -> Callable[[], float]:
    """One sample of ``call`` per call, in seconds, as the tuner's samples are taken: after the
    warm-up calls (made here), the mean of as many calls as last at least ``min_repeat_ms``."""
    for _ in range(max(timing.warmup, 1)):
        call()
    number = 1

    def sample() -> float:
        nonlocal number
        while True:
            start = time.perf_counter()
            for _ in range(number):
                call()
            elapsed = time.perf_counter() - start
            if elapsed * 1e3 >= timing.min_repeat_ms:
                return elapsed / number
            needed = timing.min_repeat_ms / max(elapsed * 1e3 / number, 1e-6)
            number = max(int(needed) + 1, int(number * 1.618) + 1)

    return sample


def _rounds(entrants: list[tuple[str, Callable[[], float]]], rounds: int) -> list[Timed]:
    """Each entrant's samples, one per round, in an order rotated round by round so that a slow
    spell of the machine falls on all of them alike. Beside a peer, each sample starts after
    ``SETTLE_SECS`` of quiet: the threads of the library that ran last spin on for a while after
    its call and would take the cores from the next (OpenBLAS's for about a tenth of a second)."""
    from autosched.bench.timing import SETTLE_SECS

    samples: list[list[float]] = [[] for _ in entrants]
    for number in range(rounds):
        for index in range(len(entrants)):
            turn = (index + number) % len(entrants)
            if len(entrants) > 1:
                time.sleep(SETTLE_SECS)
            samples[turn].append(entrants[turn][1]())
    return [Timed(name, taken) for (name, _), taken in zip(entrants, samples, strict=True)]


def _difference(ours: tuple[np.ndarray, ...], theirs: tuple[Any, ...]) -> float | None:
    """The largest absolute difference of the outputs (None: their numbers or shapes differ)."""
    import numpy as np

    if len(ours) != len(theirs):
        return None
    worst = 0.0
    for mine, other in zip(ours, theirs, strict=True):
        other = np.asarray(other)
        if mine.shape != other.shape:
            return None
        if mine.size:
            worst = max(worst, float(np.max(np.abs(mine.astype(np.float64) - other))))
    return worst


def _as_tuple(outputs: Any) -> tuple[Any, ...]:
    return outputs if isinstance(outputs, tuple) else (outputs,)


def _print(loaded: Artefact, document: dict[str, Any]) -> None:
    manifest = loaded.manifest.document
    if loaded.manifest.kind == "kernel":
        params = " ".join(f"{key}={value}" for key, value in manifest.get("params", {}).items())
        what = f"kernel {manifest.get('workload')} {params}".strip()
    else:
        what = f"model {manifest.get('model')}"
    pool = "-" if loaded.threads is None else f"{loaded.threads} threads"
    tuned = loaded.manifest.threads
    _out.print(
        f"{escape(str(document['artefact']))}: {escape(what)} on {loaded.manifest.device}, "
        f"{pool}" + ("" if tuned is None else f" (tuned on {tuned})"),
        highlight=False,
        soft_wrap=True,
    )
    for note in document["notes"]:
        _err.print(f"note: {escape(note)}", highlight=False, soft_wrap=True)
    for output in document["outputs"]:
        shape = "x".join(str(dim) for dim in output["shape"]) or "scalar"
        _out.print(f"output {escape(output['name'])}: {shape} {output['dtype']}", highlight=False)
    peer = document["peer"]
    if peer is not None:
        difference = peer["max_abs_difference"]
        detail = "differ in number or shape" if difference is None else f"{difference:.3g}"
        _out.print(f"outputs beside {peer['name']}: max abs difference {detail}", highlight=False)
    timing = document["timing"]
    if timing is None:
        return
    table = Table(
        "", "median us", f"{timing['artefact']['confidence']:.0%} interval us", "samples",
        title=f"{timing['rounds']} rounds side by side"
        + (", cache-cold calls" if timing["cold"] else ""),
    )  # fmt: skip
    rows = [timing["artefact"], *([timing["peer"]] if timing["peer"] else [])]
    for row in rows:
        low, high = row["interval_us"]
        table.add_row(
            row["name"], f"{row['median_us']:.2f}", f"{low:.2f} - {high:.2f}",
            str(len(row["samples_us"])),
        )  # fmt: skip
    tuned = document["tuned"]
    if tuned["retimed_latency_us"] is not None:
        low, high = tuned["retimed_interval_us"] or ("", "")
        table.add_row(
            "the tuner's final", f"{tuned['retimed_latency_us']:.2f}", f"{low:.2f} - {high:.2f}", ""
        )
    _out.print(table)
    if timing["peer"] is not None:
        ratio = timing["artefact"]["median_us"] / timing["peer"]["median_us"]
        _out.print(
            f"artefact / {timing['peer']['name']}: {ratio:.2f} (median over median)",
            highlight=False,
        )
