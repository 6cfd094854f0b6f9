"""Benchmark: how long LLVM takes to build a reduction whose vectors gather, by vector width, CPU
and unroll annotation. The program is the shape of a CNN's global mean (mobilenet_v3_small's
`mean7`: 16 channels over 56x56 pixels) as MetaSchedule's rfactor writes it: per channel, rows of
N lanes, each lane reading every 16th float, under the unroll annotations MetaSchedule's
postprocessor puts on the parallel loop. Each build runs in a process of its own, killed after
``--timeout`` seconds. Printed: the seconds `tvm.compile` took, or "> timeout" where the process
(about 3 s of it TVM's import) ran past it.

    python benchmarks/gather_builds.py [--lanes 16 32 49 56 64] [--mcpu rocketlake znver3]
        [--timeout 40] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

PIXELS = 56 * 56

BUILD = """
import sys
import time

import tvm
from tvm.script import tirx as T
from autosched.target import host_target

lanes, mcpu, unrolled = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
annotations = {"pragma_auto_unroll_max_step": 64, "pragma_unroll_explicit": 1} if unrolled else {}


@T.prim_func(s_tir=True)
def mean_rows(
    p0: T.Buffer((T.int64(1), T.int64(56), T.int64(56), T.int64(16)), "float32"),
    rows: T.Buffer((T.int64(16), T.int64(lanes)), "float32"),
):
    for c in T.parallel(T.int64(16), annotations=annotations):
        for i in T.vectorized(T.int64(lanes)):
            rows[c, i] = T.float32(0)
        for r in range(T.int64(3136 // lanes)):
            for i in T.vectorized(T.int64(lanes)):
                with T.sblock("rows"):
                    vc, vr, vi = T.axis.remap("SRS", [c, r, i])
                    rows[vc, vi] = rows[vc, vi] + p0[
                        T.int64(0),
                        (vr * T.int64(lanes) + vi) // T.int64(56),
                        (vr * T.int64(lanes) + vi) % T.int64(56),
                        vc,
                    ]


target = tvm.target.Target(dict(host_target(), mcpu=mcpu))
start = time.perf_counter()
tvm.compile(tvm.IRModule({"main": mean_rows}), target=target)
print(time.perf_counter() - start)
"""


def build_secs(script: Path, lanes: int, mcpu: str, unrolled: bool, timeout: float) -> float | None:
    """Seconds ``tvm.compile`` took to build the program in a fresh process running ``script``
    (TVMScript reads its functions' source from their file); None past ``timeout``."""
    command = [sys.executable, "-I", str(script), str(lanes), mcpu, "1" if unrolled else "0"]
    try:
        built = subprocess.run(command, timeout=timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return None
    if built.returncode != 0:
        raise SystemExit(f"the build of {lanes} lanes for {mcpu} failed: {built.stderr[-2000:]}")
    return float(built.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, nargs="+", default=[16, 32, 49, 56, 64])
    parser.add_argument("--mcpu", nargs="+", default=["rocketlake", "znver3"])
    parser.add_argument("--timeout", type=float, default=40.0)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    if any(PIXELS % lanes for lanes in args.lanes):
        parser.error(f"every --lanes must divide {PIXELS}")
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "mean_rows.py"
        script.write_text(BUILD)
        rows = [
            {"lanes": lanes, "mcpu": mcpu, "unrolled": unrolled, "build_secs": secs}
            for mcpu in args.mcpu
            for unrolled in (True, False)
            for lanes in args.lanes
            for secs in [build_secs(script, lanes, mcpu, unrolled, args.timeout)]
        ]
    if args.json:
        print(json.dumps({"timeout_secs": args.timeout, "builds": rows}, indent=2))
        return
    print(f"{'mcpu':<12} {'unroll':<7} {'lanes':>5}  build s")
    for row in rows:
        secs = row["build_secs"]
        shown = f"> {args.timeout:g}" if secs is None else f"{secs:.2f}"
        unroll = "64" if row["unrolled"] else "-"
        print(f"{row['mcpu']:<12} {unroll:<7} {row['lanes']:>5}  {shown}")


if __name__ == "__main__":
    main()
