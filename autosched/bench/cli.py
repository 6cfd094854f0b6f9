"""The `autosched bench` sub-commands: `kernels` (the workload zoo against peers and roofline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

bench_app = typer.Typer(
    help="Benchmarks on this machine.", no_args_is_help=True, pretty_exceptions_enable=False
)
_out = Console()
_err = Console(stderr=True)


@bench_app.command("kernels")
def kernels(
    workloads: Annotated[
        list[str] | None, typer.Argument(help="Workloads to run (default: the suite).")
    ] = None,
    suite: Annotated[
        str | None, typer.Option(help="smoke (tiny, the default) or seeds (the reading list).")
    ] = None,
    param: Annotated[
        list[str] | None, typer.Option("-p", "--param", help="A parameter of the one workload.")
    ] = None,
    trials: Annotated[int, typer.Option(min=1, max=100_000, help="Trials per workload.")] = 64,
    target: Annotated[str | None, typer.Option(help='"llvm" (this CPU, the default).')] = None,
    db: Annotated[
        str | None, typer.Option(help="Tuning log to continue (default: a throw-away one).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the search and the inputs.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG chart here.")] = None,
) -> None:
    """Untuned, tuned and peer latency per workload, tuned/peer and % of the roofline bound."""
    from autosched.bench.kernels import bench_kernels, plot_rows, suite_cases
    from autosched.roofline import calibrate, calibration_path, load_calibration, save_calibration
    from autosched.target import parse_target
    from autosched.workloads import parse_param_overrides

    cases = suite_cases(suite, workloads or [], parse_param_overrides(param or []))
    target_json = parse_target(target)
    calibration = load_calibration(target_json)
    if calibration is None:
        _err.print("no calibration for this target yet: running `autosched calibrate` first")
        calibration = calibrate(target_json)
        save_calibration(target_json, calibration)
    rows = bench_kernels(
        cases,
        target_json,
        trials=trials,
        calibration=calibration,
        db_url=db,
        seed=seed,
        on_row=None if as_json else lambda row: _err.print(f"done: {row.workload}"),
    )
    if plot is not None:
        plot_rows(rows, plot)
    if as_json:
        document = {
            "target": target_json,
            "calibration": {
                "path": str(calibration_path()),
                "peak_gflops": calibration.peak_gflops,
                "bandwidth_gbs": calibration.bandwidth_gbs,
            },
            "trials": trials,
            "rows": [row.as_json() for row in rows],
        }
        print(json.dumps(document))
        return
    table = Table(
        "workload", "params", "untuned us", "tuned us", "peer", "peer us", "tuned/peer",
        "GFLOP/s", "% roofline",
        title=f"{trials} trials per workload; peak {calibration.peak_gflops:.0f} GFLOP/s, "
        f"{calibration.bandwidth_gbs:.1f} GB/s",
    )  # fmt: skip
    for row in rows:
        table.add_row(
            row.workload,
            " ".join(f"{k}={v}" for k, v in row.params.items() if k != "dtype"),
            _number(row.untuned_us),
            _number(row.tuned_us),
            row.peer + (f" ({row.note})" if row.note else ""),
            _number(row.peer_us),
            _number(row.tuned_over_peer, 2),
            _number(row.gflops, 1),
            _number(row.roofline_percent, 1),
        )
    _out.print(table)


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
