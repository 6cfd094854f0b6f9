"""Benchmark: what `autosched export --format library` writes runs as fast in a user's process as
the tuner timed it. For matmul 1024^3 and one model of the conformance corpus
(``conformance.py``; PyTorch's Transformer encoder by default, exported to ONNX): tune (or take
the log's records), export the library with its manifest, then time it in fresh processes with
no ``TVM_*`` variable set, through the loader (`autosched run --time --json`): alone, as the
tuner timed it (the goal: within 5% of the tuner's median); side by side in the same rounds
with numpy (the matmul) or ONNX Runtime (the model) on the same threads (the ratio to the peer);
and on the thread pool TVM sizes by itself (`--threads` of its own guess), as a library loaded
with ``tvm.runtime.load_module`` alone runs. The tuner's median is the matmul's re-timed median
(its final) and the model's latency timed whole at the end of its tuning (the estimate summed
over its tasks is printed too). The CPU is named.

    python benchmarks/deploy.py [--trials 128] [--model-trials 128] [--model transformer_encoder]
                                [--work DIR] [--rounds 10] [--processes 5] [--json]

Where the work directory's log (``deploy.db``) holds the records already, the model's tuning is
skipped and the matmul's goes on for one trial, whose final re-times its fastest candidates in
this run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

MATMUL = ["matmul", "-p", "M=1024", "-p", "N=1024", "-p", "K=1024"]
MATMUL_PARAMS = {"M": 1024, "N": 1024, "K": 1024}


def _fresh_env() -> dict[str, str]:
    """A user's environment: nothing that sizes TVM's thread pool."""
    return {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("TVM_", "AUTOSCHED_")) and name != "OMP_NUM_THREADS"
    }


def autosched(*args: str, work: Path) -> str:
    """Run `autosched ARGS` in a fresh process in ``work``; its stdout."""
    result = subprocess.run(
        [sys.executable, "-m", "autosched", *args],
        cwd=work,
        env=_fresh_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"autosched {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


def tvm_default_threads() -> int:
    """The size TVM gives its pool by itself in a fresh process."""
    script = "import tvm; print(tvm.runtime.num_threads())"
    result = subprocess.run(
        [sys.executable, "-c", script], env=_fresh_env(), capture_output=True, text=True, check=True
    )
    return int(result.stdout)


def matmul_row(work: Path, db: str, trials: int, rounds: int, processes: int) -> dict[str, Any]:
    """The matmul tuned, exported and timed. Where the log holds its records already, the tuning
    goes on for one trial, whose final times the fastest candidates again in this run: the
    tuner's re-timed median and the artefact's are taken on the machine as it is now."""
    more = trials if _matmul_in_log(work, db) is None else 1
    autosched("tune", *MATMUL, "--trials", str(more), "--db", db, "--json", work=work)
    tuned = _matmul_in_log(work, db)
    assert tuned is not None, "the tuning left no record of the matmul"
    autosched("export", *MATMUL, "--db", db, "--format", "library", "-o", "matmul.so", work=work)
    return {
        "artefact": "matmul 1024^3",
        "tuner_us": tuned["retimed_latency_us"] or tuned["best_latency_us"],
        "tuner_interval_us": tuned["retimed_interval_us"],
        "tuner_kind": "re-timed median" if tuned["retimed_latency_us"] else "single shot",
        **_runs(work, "matmul.so", "numpy", rounds, processes),
    }


def _matmul_in_log(work: Path, db: str) -> dict[str, Any] | None:
    if not (work / "deploy.db").exists():
        return None
    rows = json.loads(autosched("log", "--db", db, "--json", work=work))
    return next(
        (
            row
            for row in rows
            if row["workload"] == "matmul"
            and all(row["params"].get(key) == value for key, value in MATMUL_PARAMS.items())
            and row["best_latency_us"] is not None
        ),
        None,
    )


def model_row(
    work: Path, db: str, name: str, trials: int, batch: int, rounds: int, processes: int
) -> dict[str, Any]:
    """The corpus model exported to ONNX, tuned (unless the log has it), exported and timed."""
    from autosched.bench.corpus import corpus_models, export

    (entry,) = corpus_models(name)
    onnx = work / f"{name}.onnx"
    if not onnx.exists():
        export(entry, "onnx", onnx)
    tuned = _model_in_log(work, db, name)
    if tuned is None or tuned["measured_latency_us"] is None:
        autosched("tune", str(onnx), "--trials", str(trials), "--batch", str(batch), "--db", db,
                  "--json", work=work)  # fmt: skip
        tuned = _model_in_log(work, db, name)
        assert tuned is not None, "the tuning recorded no model"
    autosched("export", str(onnx), "--db", db, "--format", "library", "-o", f"{name}.so",
              work=work)  # fmt: skip
    return {
        "artefact": f"{name} (ONNX)",
        "tuner_us": tuned["measured_latency_us"],
        "tuner_interval_us": tuned["measured_interval_us"],
        "tuner_kind": "whole model",
        "estimate_us": tuned["estimated_latency_us"],
        **_runs(work, f"{name}.so", "onnxruntime", rounds, processes),
    }


def _model_in_log(work: Path, db: str, name: str) -> dict[str, Any] | None:
    if not (work / "deploy.db").exists():
        return None
    models = json.loads(autosched("log", "models", "--db", db, "--json", work=work))
    return next((model for model in models if model["model"] == name), None)


def _runs(work: Path, library: str, peer: str, rounds: int, processes: int) -> dict[str, Any]:
    """The artefact through the loader alone in ``processes`` fresh processes (the median of
    their medians, and the fastest and slowest of them, set against the tuner, which timed it
    alone too: a process's draw of physical pages and cores moves a 1024^3 matmul by a quarter),
    then side by side with the peer in the same rounds (set against the peer), then on the pool
    TVM sizes by itself; each in a fresh process."""
    timed = ["--time", "--rounds", str(rounds), "--json"]
    alones = [json.loads(autosched("run", library, *timed, work=work)) for _ in range(processes)]
    medians = sorted(alone["timing"]["artefact"]["median_us"] for alone in alones)
    alone = alones[0]
    beside = json.loads(autosched("run", library, *timed, "--compare", peer, work=work))
    default = tvm_default_threads()
    own_pool = json.loads(autosched("run", library, *timed, "--threads", str(default), work=work))
    timing = beside["timing"]
    return {
        "threads": alone["threads"],
        "loader_us": statistics.median(medians),
        "loader_interval_us": [medians[0], medians[-1]],
        "loader_process_medians_us": medians,
        "beside_us": timing["artefact"]["median_us"],
        "beside_interval_us": timing["artefact"]["interval_us"],
        "peer": timing["peer"]["name"],
        "peer_us": timing["peer"]["median_us"],
        "peer_interval_us": timing["peer"]["interval_us"],
        "max_abs_difference": beside["peer"]["max_abs_difference"],
        "default_threads": default,
        "default_us": own_pool["timing"]["artefact"]["median_us"],
    }


def _load() -> float:
    return os.getloadavg()[0]


def table(rows: list[dict[str, Any]], cpu: str, load: tuple[float, float]) -> str:
    def ms(us: float) -> str:
        return f"{us / 1e3:.3f}"

    def span(interval: list[float] | None) -> str:
        return "-" if interval is None else f"{ms(interval[0])}-{ms(interval[1])}"

    lines = [
        f"CPU: {cpu}; load average {load[0]:.1f} before, {load[1]:.1f} after",
        f"{'artefact':<26} {'tuner ms (kind)':<35} {'loader ms (interval)':<27} /tuner  "
        f"{'beside the peer ms':<19} {'peer':<20} {'ms (interval)':<24} /peer  TVM's own pool ms",
    ]
    for row in rows:
        lines.append(
            f"{row['artefact']:<26} {ms(row['tuner_us']):>8} ({row['tuner_kind']:<24}) "
            f"{ms(row['loader_us']):>8} ({span(row['loader_interval_us']):<16}) "
            f"{row['loader_us'] / row['tuner_us']:>6.3f}  "
            f"{ms(row['beside_us']):>8} ({span(row['beside_interval_us']):<8}) "
            f"{row['peer'][:20]:<20} {ms(row['peer_us']):>8} ({span(row['peer_interval_us']):<13}) "
            f"{row['beside_us'] / row['peer_us']:>5.3f}  "
            f"{ms(row['default_us'])} on {row['default_threads']} (loader: {row['threads']})"
            + (f"; its tasks' estimate {ms(row['estimate_us'])}" if "estimate_us" in row else "")
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=128, help="Trials of the matmul.")
    parser.add_argument("--model-trials", type=int, default=128, help="Trials of the model.")
    parser.add_argument("--model-batch", type=int, default=16, help="Trials of a model round.")
    parser.add_argument("--model", default="transformer_encoder", help="A corpus model's name.")
    parser.add_argument("--work", type=Path, default=Path("deploy-bench"))
    parser.add_argument("--rounds", type=int, default=10, help="Rounds of each timing.")
    parser.add_argument(
        "--processes", type=int, default=5, help="Fresh processes that time the artefact alone."
    )
    parser.add_argument("--json", action="store_true", help="Print the rows as JSON.")
    args = parser.parse_args()

    from autosched.bench.models import cpu_name
    from autosched.target import host_target

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    db = f"sqlite:///{work / 'deploy.db'}"
    before = _load()
    rows = [
        matmul_row(work, db, args.trials, args.rounds, args.processes),
        model_row(
            work, db, args.model, args.model_trials, args.model_batch, args.rounds, args.processes
        ),
    ]
    cpu = cpu_name(host_target())
    if args.json:
        print(json.dumps({"cpu": cpu, "load": [before, _load()], "rows": rows}))
    else:
        print(table(rows, cpu, (before, _load())))


if __name__ == "__main__":
    from autosched.errors import UserError

    try:
        main()
    except UserError as error:
        raise SystemExit(f"error: {error}") from None
