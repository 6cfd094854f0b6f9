"""Benchmark: what ONNX Runtime's graph optimiser fuses in a model of the conformance corpus, beside
the kernels autosched tunes for the same file. ONNX Runtime (``ORT_ENABLE_ALL``, the CPU) saves
the graph it runs; the operators whose count changed from the exported file's are its rewrites
(``com.microsoft`` operators are its fused kernels: ``Attention``, ``SkipLayerNormalization``,
``FusedMatMul``, ``BiasGelu``...). autosched's side is the model's tasks as ``autosched tune``
extracts them (its own fusions included: attention as one kernel, RMS and skip layer norms), with
their calls per run.

    python benchmarks/ort_fusions.py [--models bert,gpt2,llama] [--work DIR] [--json]

Nothing is timed; where the two graphs differ is where a kernel-by-kernel profile
(``model_profile.py``) looks first.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

import onnx
import onnxruntime

from autosched.bench.corpus import CorpusModel, corpus_models, export
from autosched.model.load import load_model
from autosched.model.tasks import extract_tasks
from autosched.target import host_target


def operators(path: Path) -> Counter[str]:
    """The operators of an ONNX file's graph (its subgraphs left out), by domain and type."""
    graph = onnx.load(str(path), load_external_data=False).graph
    return Counter(
        f"{node.domain}.{node.op_type}" if node.domain else node.op_type for node in graph.node
    )


def ort_optimized(path: Path, optimized: Path) -> Counter[str]:
    """The operators of the graph ONNX Runtime runs for ``path`` on the CPU."""
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(optimized)
    onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return operators(optimized)


def kernels(path: Path) -> Counter[str]:
    """autosched's tasks of the model, by kind (the name without TVM's numbering), with their
    calls per run."""
    tasks = extract_tasks(load_model(path), host_target())
    kinds: Counter[str] = Counter()
    for task in tasks:
        kinds[re.sub(r"\d+(?=_|$)", "", task.name)] += task.weight
    return kinds


def compare(entry: CorpusModel, work: Path) -> dict[str, object]:
    name = entry.name
    path = work / f"{name}.onnx"
    if not path.exists():
        export(entry, "onnx", path)
    exported = operators(path)
    optimized = ort_optimized(path, work / f"{name}.ort.onnx")
    changed = {
        op: [exported.get(op, 0), optimized.get(op, 0)]
        for op in sorted(set(exported) | set(optimized))
        if exported.get(op, 0) != optimized.get(op, 0)
    }
    ours = kernels(path)
    return {
        "model": name,
        "exported_nodes": sum(exported.values()),
        "ort_nodes": sum(optimized.values()),
        "ort_changed": changed,
        "autosched_calls": sum(ours.values()),
        "autosched_kernels": dict(ours.most_common()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="bert,gpt2,llama", help="Corpus models, by name.")
    parser.add_argument("--work", type=Path, default=Path("ort-fusions"))
    parser.add_argument("--json", action="store_true", help="Print the rows as JSON.")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = [compare(entry, args.work) for entry in corpus_models(args.models)]
    if args.json:
        print(json.dumps(rows))
        return
    for row in rows:
        fused = ", ".join(
            f"{op} {before}->{after}" for op, (before, after) in row["ort_changed"].items()
        )
        ours = ", ".join(f"{kind} x{calls}" for kind, calls in row["autosched_kernels"].items())
        print(f"{row['model']}: ONNX Runtime {row['exported_nodes']}->{row['ort_nodes']} nodes")
        print(f"  its rewrites: {fused}")
        print(f"  autosched: {row['autosched_calls']} kernel calls: {ours}")


if __name__ == "__main__":
    from autosched.errors import UserError

    try:
        main()
    except UserError as error:
        raise SystemExit(f"error: {error}") from None
