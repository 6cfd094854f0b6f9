"""The manifest of an exported library: the fields ``autosched.runtime`` runs it by, written for
a kernel (``kernels``) and a model (``models``) alike."""

from __future__ import annotations

from pathlib import Path

from autosched import runtime
from autosched.finals.ranking import ROUNDS
from autosched.measure.config import MeasureConfig
from autosched.target import thread_env


def artefact_header(kind: str, library: Path, target: dict, *, cold: bool) -> dict[str, object]:
    """The fields of a manifest that ``autosched.runtime`` runs the library by: its kind and
    file, its function, and how the tuner ran its programs on ``target``: the device, the threads
    of TVM's pool (``autosched.target.thread_env``; None where the target left it to TVM) and the
    timing protocol of a final (``cold``: the CPU caches flushed before each call)."""
    threads = thread_env(target).get(runtime.THREADS_VARIABLE)
    config = MeasureConfig()
    return {
        "manifest": runtime.MANIFEST,
        "manifest_version": runtime.MANIFEST_VERSION,
        "kind": kind,
        "library": library.name,
        "function": "main",
        "runtime": {
            "device": "cuda" if target.get("kind") == "cuda" else "cpu",
            "num_threads": None if threads is None else int(threads),
        },
        "timing": {
            "warmup": config.warmup,
            "min_repeat_ms": config.min_repeat_ms,
            "rounds": ROUNDS,
            "cold": cold,
        },
    }
