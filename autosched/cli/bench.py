"""The `autosched bench` sub-commands: `kernels` (the workload zoo against peers and roofline),
`search` (how many trials each way of searching needs) and `models` (whole models, of the zoo or of
the conformance corpus, against stock TVM, PyTorch and ONNX Runtime)."""

from __future__ import annotations

import json
import signal
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from autosched.bench.models import ModelRow

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
    from autosched.bench.kernels import bench_kernels, fastest_rate, plot_rows, suite_cases
    from autosched.machine.roofline import (
        calibrate,
        calibration_path,
        describe_calibration,
        load_calibration,
        save_calibration,
    )
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
    raised = calibration.observed(*fastest_rate(rows)) if rows else None
    if raised is not None:
        save_calibration(target_json, raised)
        _err.print(
            f"{raised.raised_by} ran at {raised.peak_gflops:.1f} GFLOP/s, above the stored peak of "
            f"{calibration.peak_gflops:.1f}: the peak is raised; run `autosched calibrate` on a "
            "quiet machine to measure it again",
            highlight=False,
            soft_wrap=True,
        )
        calibration = raised
        rows = [row.against(raised) for row in rows]
    if plot is not None:
        plot_rows(rows, plot)
    if as_json:
        document = {
            "target": target_json,
            "calibration": {"path": str(calibration_path()), **asdict(calibration)},
            "trials": trials,
            "rows": [row.as_json() for row in rows],
        }
        print(json.dumps(document))
        return
    table = Table(
        "workload", "params", "untuned us", "tuned us", "peer", "peer us", "tuned/peer",
        "GFLOP/s", "% roofline", "far rounds",
        title=f"{trials} trials per workload on {target_json.get('mcpu', target_json['kind'])}; "
        + describe_calibration(calibration)
        + "; tuned and peer timed side by side, medians (smallest - largest)",
    )  # fmt: skip
    for row in rows:
        table.add_row(
            row.workload,
            " ".join(f"{k}={v}" for k, v in row.params.items() if k != "dtype"),
            _number(row.untuned_us),
            _with_spread(row.tuned_us, row.tuned_spread_us),
            row.peer + (f" ({row.note})" if row.note else ""),
            _with_spread(row.peer_us, row.peer_spread_us),
            _number(row.tuned_over_peer, 2),
            _number(row.gflops, 1),
            _number(row.roofline_percent, 1),
            f"{row.far_rounds}/{row.rounds}",
        )
    _out.print(table)


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _with_spread(median: float | None, spread: tuple[float, float] | None) -> str:
    if median is None or spread is None:
        return _number(median)
    return f"{median:.1f} ({spread[0]:.1f} - {spread[1]:.1f})"


@bench_app.command("search")
def search(
    workloads: Annotated[
        list[str] | None,
        typer.Argument(help="Workloads to search (default: matmul and conv2d_nhwc)."),
    ] = None,
    param: Annotated[
        list[str] | None, typer.Option("-p", "--param", help="A parameter of every workload.")
    ] = None,
    trials: Annotated[int, typer.Option(min=1, max=100_000, help="Trials per run.")] = 256,
    seeds: Annotated[int, typer.Option(min=1, max=100, help="Runs per arm, seeds 0..K-1.")] = 3,
    batch: Annotated[int, typer.Option(min=1, max=4096, help="Candidates per batch.")] = 32,
    arms: Annotated[
        str, typer.Option(help="Comma-separated arms among cold, warm, neighbours, tpe, random.")
    ] = "cold,warm,tpe,random",
    db: Annotated[
        str | None,
        typer.Option(
            help="Source log: the warm and neighbours arms learn from its other workloads "
            "[AUTOSCHED_DB; ./autosched.db]."
        ),
    ] = None,
    replay: Annotated[
        bool,
        typer.Option(
            "--replay",
            help="Answer candidates from the source log (and a model's guesses) instead of "
            "building and timing them.",
        ),
    ] = False,
    target: Annotated[str | None, typer.Option(help='"llvm" (this CPU, the default).')] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG chart here.")] = None,
) -> None:
    """Best latency against trials and seconds for cold, warm, neighbours, TPE and random
    search."""
    from autosched.bench.search import bench_search, plot_results
    from autosched.cli.options import open_log
    from autosched.target import parse_target
    from autosched.workloads import get_workload, parse_param_overrides

    chosen = [arm.strip() for arm in arms.split(",") if arm.strip()]
    overrides = parse_param_overrides(param or [])
    specs = [get_workload(name, overrides) for name in workloads or ["matmul", "conv2d_nhwc"]]
    target_json = parse_target(target)
    learns = "warm" in chosen or "neighbours" in chosen or replay
    source = open_log(db, must_exist=True, read_only=True) if learns else None
    try:
        results = bench_search(
            specs,
            target_json,
            trials=trials,
            seeds=seeds,
            batch_size=batch,
            arms=chosen,
            source=source,
            replay=replay,
            on_run=None
            if as_json
            else lambda name, run: _err.print(
                f"done: {name} {run.arm} seed {run.seed}: best "
                f"{_number(None if run.best_secs is None else run.best_secs * 1e6, 2)} us "
                f"in {run.wall_secs:.0f} s"
            ),
        )
    finally:
        if source is not None:
            source.close()
    if plot is not None:
        plot_results(results, plot)
    if as_json:
        print(json.dumps({"target": target_json, "replay": replay, "results": [
            result.as_json() for result in results
        ]}))  # fmt: skip
        return
    for result in results:
        params = " ".join(f"{k}={v}" for k, v in result.params.items() if k != "dtype")
        table = Table(
            "arm", "median best us", "spread us", "median wall s", "trials to 90%",
            "trials to 95%", "trials to cold's best",
            title=f"{result.workload} {params}: {result.trials} trials x {seeds} seeds; "
            f"best of all {_number(result.best_us, 2)} us"
            + (" (replayed)" if replay else ""),
        )  # fmt: skip
        for arm in result.arms:
            table.add_row(
                arm.arm,
                _number(arm.median_best_us, 2),
                f"{_number(arm.min_best_us, 2)} - {_number(arm.max_best_us, 2)}",
                _number(arm.median_wall_secs, 0),
                _reach(arm.trials_to_90),
                _reach(arm.trials_to_95),
                _reach(arm.trials_to_cold_best),
            )
        _out.print(table)
        if replay:
            for arm in result.arms:
                counts = [run.simulated for run in result.runs if run.arm == arm.arm]
                replayed = sum(c["replayed"] for c in counts if c)
                predicted = sum(c["predicted"] for c in counts if c)
                _out.print(
                    f"  {arm.arm}: {replayed} candidates replayed from the log, "
                    f"{predicted} guessed by the cost model"
                )
        if result.note:
            _err.print(result.note)


def _reach(trials: int | None) -> str:
    return "never" if trials is None else str(trials)


@bench_app.command("models")
def models(
    names: Annotated[
        str | None,
        typer.Option(
            "--models",
            help="Comma-separated among mlp, resnet18, bert_layer, mobilenet_v2, convs2s; with "
            "--corpus, among the conformance corpus's (default: all).",
        ),
    ] = None,
    corpus: Annotated[
        bool,
        typer.Option(
            "--corpus",
            help="Models of the conformance corpus (torchvision, transformers, PyTorch's "
            "Transformer encoder), each as ONNX; needs autosched[corpus].",
        ),
    ] = False,
    trials: Annotated[
        int, typer.Option(min=1, max=100_000, help="Trials per model, for each tuner.")
    ] = 2000,
    db: Annotated[
        str | None, typer.Option(help="Tuning log to continue (default: a throw-away one).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of autosched's search.")] = 0,
    stock: Annotated[
        bool,
        typer.Option(
            "--stock/--no-stock",
            help="Tune with stock TVM too (its fixed start-up alone is about a minute).",
        ),
    ] = True,
    rounds: Annotated[
        int,
        typer.Option(
            min=5,
            max=1000,
            help="Rounds of timing, each one repeat of every contender (fewer: a quicker, "
            "noisier comparison).",
        ),
    ] = 10,  # autosched.bench.models.MODEL_REPEATS
    work_dir: Annotated[
        Path | None,
        typer.Option(
            help="Keep the models' files and stock TVM's logs and database here "
            "(default: a throw-away folder).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG chart here.")] = None,
) -> None:
    """Per model: autosched tuned (its exported library as a deployment loads it), stock TVM tuned
    at the same budget, TVM untuned, PyTorch eager, torch.compile and ONNX Runtime, timed alike on
    this CPU; both tuners' wall time; then one table of every model."""
    from autosched.bench.models import (
        bench_models,
        chosen_models,
        geometric_mean_speedups,
        models_table,
        plot_rows,
    )
    from autosched.machine.roofline import UNCALIBRATED_SCHEDULER, load_calibration
    from autosched.model.compile import OutputMismatch
    from autosched.target import host_target

    chosen = chosen_models(names, corpus=corpus)
    if work_dir is not None and work_dir.exists() and any(work_dir.iterdir()):
        raise typer.BadParameter(f"{work_dir} is not empty", param_hint="--work-dir")
    target_json = host_target()
    if load_calibration(target_json) is None:
        _err.print(UNCALIBRATED_SCHEDULER, highlight=False, soft_wrap=True)
    # SIGTERM stops the bench as Ctrl-C does, so that the stock tuner's processes go with it.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        rows = bench_models(
            chosen,
            target_json,
            trials=trials,
            db_url=db,
            seed=seed,
            stock=stock,
            rounds=rounds,
            work_dir=work_dir,
            # on stderr with --json too: stdout holds the document alone
            on_step=lambda step: _err.print(escape(step), highlight=False, soft_wrap=True),
            on_row=None if as_json else _print_model_row,
        )
    except OutputMismatch as error:
        _err.print(f"[red]error:[/red] {escape(str(error))}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=1) from None
    except KeyboardInterrupt:
        log = db or (None if work_dir is None else str(work_dir / "bench.db"))
        kept = "nothing is kept" if log is None else f"the tuning log {log} keeps what was measured"
        _err.print(f"stopped; {escape(kept)}", highlight=False)
        raise typer.Exit(code=130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if plot is not None:
        plot_rows(rows, plot)
    if as_json:
        means = {
            contender.value: mean for contender, (mean, _) in geometric_mean_speedups(rows).items()
        }
        print(json.dumps({"target": target_json, "trials": trials, "rows": [
            row.as_json() for row in rows
        ], "geometric_mean_speedup": means}))  # fmt: skip
        return
    print(models_table(rows))


def _print_model_row(row: ModelRow) -> None:
    """A model's contenders as a table, and what autosched's tuning found."""
    from autosched.bench.models import Contender

    table = Table(
        "contender", "median ms", "interval ms", "spread ms", "autosched speedup", "tuning s",
        "note",
        title=f"{row.model} ({row.summary}) on {row.cpu}, {row.threads} threads; "
        f"{row.trials} trials per tuner",
    )  # fmt: skip
    tuning = {
        Contender.AUTOSCHED: row.autosched_tune_secs,
        Contender.STOCK_TVM: row.stock_tune_secs,
    }
    for latency in row.latencies:
        timing, interval = latency.timing, latency.interval
        table.add_row(
            latency.contender.label,
            "-" if timing is None else f"{timing.median_secs * 1e3:.3f}",
            "-" if interval is None else f"{interval.low * 1e3:.3f} - {interval.high * 1e3:.3f}",
            "-" if timing is None
            else f"{timing.min_secs * 1e3:.3f} - {timing.max_secs * 1e3:.3f}",
            "1.00" if latency.contender is Contender.AUTOSCHED
            else _number(row.speedup_over(latency.contender), 2),
            _number(tuning.get(latency.contender), 0),
            latency.note or "",
        )  # fmt: skip
    _out.print(table)
    _out.print(
        f"autosched: {row.autosched_trials} trials over {row.tasks} tasks; outputs match the "
        f"framework's (max abs error {row.max_abs_error:.2g}); its tasks sum to "
        f"{row.estimated_us / 1e3:.3f} ms as tuning timed them; slowest task "
        f"{escape(row.slowest_task or '-')} ({_number(row.slowest_task_us, 1)} us, weight x "
        "latency)",
        highlight=False,
        soft_wrap=True,
    )
    if row.placements:
        handoffs = [reading.handoff_secs * 1e6 for reading in row.placements]
        ratios = [reading.ratio for reading in row.placements]
        placements = row.by_placement()
        _out.print(
            f"timed in {len(row.placements)} rounds side by side; the cores handed data over in "
            f"{min(handoffs):.1f} to {max(handoffs):.1f} us a round, {min(ratios):.1f} to "
            f"{max(ratios):.1f} times their reads of their own data (autosched.machine.handoff): "
            + ("two placements, near and far" if placements else "one placement throughout"),
            highlight=False,
            soft_wrap=True,
        )
        for reading in placements:
            speedups = ", ".join(
                f"{contender.label} {_number(reading.speedup_over(contender), 2)}"
                for contender in reading.median_us
                if contender is not Contender.AUTOSCHED
            )
            ours = reading.median_us.get(Contender.AUTOSCHED)
            _out.print(
                f"{reading.name}: {reading.rounds} rounds; autosched "
                f"{_number(None if ours is None else ours / 1e3, 3)} ms; its speed-up over "
                f"{speedups}",
                highlight=False,
                soft_wrap=True,
            )
