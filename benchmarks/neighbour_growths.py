"""Benchmark: which seeds a new shape should start from. Every record that `neighbour_seeds`
would replay from the nearest tuned shapes of the operator is followed onto the new shape at every
growth (the tile factor, from the outermost, that takes the difference of a loop's extent), and
every distinct program is measured once, in one batch. Printed: the best and median per neighbour
and growth, and the best among the seeds of each way of choosing them (those `neighbour_seeds`
returns, the outermost growth alone, and every growth of each record with the neighbours taken
in turn).

    python benchmarks/neighbour_growths.py matmul -p M=512 -p N=512 -p K=512 \\
        --db sqlite:///pretrain.db [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics

from autosched.bench.models import cpu_name
from autosched.log import TuningLog
from autosched.measure import LocalMeasurer
from autosched.neighbours import (
    RECORDS_PER_NEIGHBOUR,
    SEED_RECORDS,
    follow_record,
    in_turn,
    nearest_tuned,
    neighbour_seeds,
)
from autosched.search.space import design_space
from autosched.target import canonical_target, host_target
from autosched.workloads import get_workload, parse_param_overrides

GROWTHS = range(4)  # the tile factors, from the outermost, a loop of a new extent grows at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("-p", "--param", action="append", default=[])
    parser.add_argument("--db", required=True)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    target = canonical_target(host_target())
    workload = get_workload(args.workload, parse_param_overrides(args.param))
    design = design_space(workload, target, seed=0)
    variants = []  # (neighbour, growth, program hash, trace), best record first
    with TuningLog(args.db) as log:
        neighbours = nearest_tuned(log, workload, target)
        seeds = neighbour_seeds(log, workload, target, lambda: design).seeds
    for neighbour in neighbours:
        replayed = 0
        for record in neighbour.records:
            followed = follow_record(design, neighbour.workload, record, GROWTHS)
            if isinstance(followed, str):
                continue
            for growth, variant in followed.items():
                variants.append((neighbour.shape, growth, variant.program_hash, variant.trace_json))
            replayed += 1
            if replayed == RECORDS_PER_NEIGHBOUR:
                break
    traces = {digest: trace for *_, digest, trace in variants}
    measurer = LocalMeasurer(target)
    try:
        results = measurer.measure(workload.ref, list(traces.values()))
    finally:
        measurer.close()
    us = {
        digest: result.median * 1e6
        for digest, result in zip(traces, results, strict=True)
        if result.median is not None
    }
    outermost = list(dict.fromkeys(digest for _, growth, digest, _ in variants if growth == 0))
    each_neighbours = [
        list(dict.fromkeys(digest for shape, _, digest, _ in variants if shape == neighbour.shape))
        for neighbour in neighbours
    ]
    every_growth = list(dict.fromkeys(in_turn(each_neighbours)))
    ways = {
        "neighbour_seeds": [seed.program_hash for seed in seeds],
        "outermost growth only": outermost[:SEED_RECORDS],
        "every growth, neighbours in turn": every_growth[:SEED_RECORDS],
    }
    report = {
        "cpu": cpu_name(target),
        "workload": workload.name,
        "params": workload.params,
        "programs": len(traces),
        "measured": len(us),
        "best_us": min(us.values(), default=None),
        "by_growth": _by_growth(variants, us),
        "seeds": {
            name: {
                "programs": len(chosen),
                "best_us": min((us[d] for d in chosen if d in us), default=None),
                "best_of_first_8_us": min((us[d] for d in chosen[:8] if d in us), default=None),
            }
            for name, chosen in ways.items()
        },
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{workload.name} {workload.params} on {report['cpu']}: {len(traces)} programs")
    for row in report["by_growth"]:
        print(
            f"  {row['neighbour']:24} growth {row['growth']}: best {row['best_us']:9.1f} us, "
            f"median {row['median_us']:9.1f} us of {row['programs']}"
        )
    for name, seeded in report["seeds"].items():
        print(
            f"  seeds, {name}: best {seeded['best_us']:.1f} us of {seeded['programs']}, "
            f"of the first 8 {seeded['best_of_first_8_us']:.1f} us"
        )
    print(f"  best of all: {report['best_us']:.1f} us")


def _by_growth(
    variants: list[tuple[str, int, str, str]], us: dict[str, float]
) -> list[dict[str, object]]:
    """Per neighbour and growth: the best and median of its measured programs."""
    rows = []
    for shape, growth in dict.fromkeys((shape, growth) for shape, growth, *_ in variants):
        timed = [us[d] for s, g, d, _ in variants if (s, g) == (shape, growth) and d in us]
        if timed:
            rows.append(
                {
                    "neighbour": shape,
                    "growth": growth,
                    "best_us": min(timed),
                    "median_us": statistics.median(timed),
                    "programs": len(timed),
                }
            )
    return rows


if __name__ == "__main__":
    main()
