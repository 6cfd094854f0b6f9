"""Benchmark: a tuning through the service with one local worker against `autosched tune`.

Both tune the same workload with the same budget, batch size and seed from an empty SQLite log:
once as `autosched tune`, once as a job submitted over HTTP to `autosched serve --local-worker`
and followed until it finishes. Both end with their finals (the fastest candidates timed again
beside the untuned program; on the service by the worker). Prints both wall times (from the
command's start to the result), the winners' re-timed medians, and the ratio of the times.

    python benchmarks/service_overhead.py [--size 512] [--trials 64]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def autosched_tune(work: Path, size: int, trials: int) -> tuple[float, dict]:
    start = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "autosched",
            "tune",
            "matmul",
            "-p",
            f"M={size}",
            "-p",
            f"N={size}",
            "-p",
            f"K={size}",
            "--trials",
            str(trials),
            "--batch",
            "64",
            "--seed",
            "0",
            "--json",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - start, json.loads(result.stdout)


def through_service(work: Path, size: int, trials: int) -> tuple[float, dict]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    start = time.perf_counter()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autosched",
            "serve",
            "--port",
            str(port),
            "--no-auth",
            "--local-worker",
        ],
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ),
    )
    try:
        with httpx.Client(base_url=f"{url}/api/v1", timeout=30) as http:
            while True:
                try:
                    if httpx.get(f"{url}/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            body = {
                "workload": {"name": "matmul", "params": {"M": size, "N": size, "K": size}},
                "target": "llvm",
                "trials": trials,
                "batch_size": 64,
                "seed": 0,
            }
            job = http.post("/jobs", json=body).json()
            while job["status"] not in ("finished", "failed", "cancelled"):
                time.sleep(0.2)
                job = http.get(f"/jobs/{job['id']}").json()
            return time.perf_counter() - start, job
    finally:
        server.terminate()
        server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--trials", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tune_dir, tempfile.TemporaryDirectory() as serve_dir:
        tune_secs, report = autosched_tune(Path(tune_dir), args.size, args.trials)
        serve_secs, job = through_service(Path(serve_dir), args.size, args.trials)
    flops = 2.0 * args.size**3
    print(f"matmul {args.size}^3 float32, {args.trials} trials, batch 64, seed 0")
    print(f"{'':<22}{'wall s':>8}{'best us':>10}{'GFLOP/s':>9}")
    # Both end with a final: the best is the winner's re-timed median where there was one.
    finalists = job.get("finalists") or []
    served_best = finalists[0]["median_secs"] if finalists else job["best_latency_secs"]
    for name, secs, best_us in (
        ("autosched tune", tune_secs, report["best_latency_us"]),
        ("service + 1 worker", serve_secs, served_best * 1e6),
    ):
        print(f"{name:<22}{secs:>8.1f}{best_us:>10.1f}{flops / best_us / 1e3:>9.1f}")
    print(f"service / tune wall time: {serve_secs / tune_secs:.2f}")


if __name__ == "__main__":
    main()
