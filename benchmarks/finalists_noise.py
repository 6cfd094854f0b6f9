"""Benchmark: how often the fastest single measurement of a search is not the fastest program.

Each workload is tuned with autosched (a fresh log, the given budget and seeds); at the end its
finalists are timed again side by side. For each run the table says whether the single-shot
winner (the fastest single measurement among the finalists) differs from the re-timed winner,
how much slower the single-shot winner really is, and how many finalists tie with the winner.

    python benchmarks/finalists_noise.py [--trials 64] [--seeds 0 1 2] [--finalists 8]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from autosched.log import TuningLog
from autosched.machine.cpu import cpu_peak
from autosched.measure import LocalMeasurer
from autosched.target import host_target
from autosched.tuner import TuneOptions, tune
from autosched.workloads import get_workload

WORKLOADS = [
    ("matmul", {"M": 256, "N": 256, "K": 256}),
    ("dense_bias_relu", {"M": 128, "N": 256, "K": 256}),
    ("conv2d_nhwc", {"N": 1, "H": 28, "W": 28, "CI": 64, "CO": 64, "KH": 3, "KW": 3}),
    ("softmax", {"rows": 256, "cols": 512}),
]


def run(name: str, params: dict, trials: int, seed: int, finalists: int, work: Path) -> dict:
    workload = get_workload(name, params)
    target = host_target()
    measurer = LocalMeasurer(target)
    options = TuneOptions(trials=trials, seed=seed, finalists=finalists)
    with TuningLog(f"sqlite:///{work / f'{name}-{seed}.db'}") as log:
        try:
            report = tune(workload, target, log, measurer, options)
        finally:
            measurer.close()
    ranked = report.finalists
    if not ranked:
        return {"workload": name, "seed": seed, "finalists": 0}
    single_shot = min(ranked, key=lambda finalist: finalist.first_median_secs)
    winner = ranked[0]
    return {
        "workload": name,
        "seed": seed,
        "finalists": len(ranked),
        "differs": single_shot.program_hash != winner.program_hash,
        "single_shot_over_winner": single_shot.median_secs / winner.median_secs,
        "single_shot_ties": single_shot.tie,
        "ties": sum(finalist.tie for finalist in ranked[1:]),
        "winner_us": winner.median_secs * 1e6,
        "winner_ci_us": [winner.interval.low * 1e6, winner.interval.high * 1e6],
        "winner_first_us": winner.first_median_secs * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--finalists", type=int, default=8)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines")
    args = parser.parse_args()
    peak = cpu_peak()
    print(f"CPU: {peak.model if peak else 'unknown'}; {args.trials} trials per run")
    print(
        "| workload | seed | finalists | single-shot winner differs | its re-timed / winner's "
        "| ties with winner | winner us (95% CI) | winner's single shot us |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as work:
        for name, params in WORKLOADS:
            for seed in args.seeds:
                row = run(name, params, args.trials, seed, args.finalists, Path(work))
                if args.json:
                    print(json.dumps(row))
                if not row["finalists"]:
                    print(f"| {name} | {seed} | 0 | - | - | - | - | - |")
                    continue
                low, high = row["winner_ci_us"]
                print(
                    f"| {name} | {seed} | {row['finalists']} | {'yes' if row['differs'] else 'no'} "
                    f"| {row['single_shot_over_winner']:.3f}"
                    f"{' (tie)' if row['differs'] and row['single_shot_ties'] else ''} "
                    f"| {row['ties']} | {row['winner_us']:.1f} ({low:.1f}-{high:.1f}) "
                    f"| {row['winner_first_us']:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
