"""The `autosched model` sub-commands: train, evaluate and list a target family's shared cost model.

The family is the one of ``--target`` (this CPU by default); see ``autosched.target.target_family``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from autosched.cli.options import DbOpt, JsonOpt, open_log

T = TypeVar("T")

model_app = typer.Typer(
    name="model",
    help="The shared cost model of a target family, trained on the whole tuning log.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
_out = Console()
_err = Console(stderr=True)

ModelTargetOpt = Annotated[
    str | None,
    typer.Option(
        "--target",
        help='Whose family: "llvm" (this CPU, the default), "cuda", or target JSON.',
    ),
]
ObjectiveOpt = Annotated[
    str | None,
    typer.Option("--objective", help="pairwise (ranking, the default) or throughput (regression)."),
]
FirstOpt = Annotated[
    int,
    typer.Option(
        "--first",
        min=1,
        max=100_000,
        help="Measurements of the held-out workload the per-job model learns from.",
    ),
]


def _family(target: str | None) -> str:
    from autosched.target import parse_target, target_family

    return target_family(parse_target(target))


def _checked_objective(objective: str | None) -> str:
    """The objective asked for, or the model's default."""
    from autosched.costmodel.xgb import DEFAULT_OBJECTIVE, OBJECTIVES
    from autosched.errors import UserError

    if objective is None:
        return DEFAULT_OBJECTIVE
    if objective not in OBJECTIVES:
        raise UserError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    return objective


def _on_family_log(
    db: str | None,
    show_progress: bool,
    work: Callable[..., T],
    family: str,
    **options: object,
) -> T:
    """``work(log, family, **options, on_progress=...)`` on the log at ``db``, showing its
    feature extraction unless told not to."""
    log = open_log(db, must_exist=True)
    progress = Progress(
        TextColumn("extracting features"),
        BarColumn(),
        MofNCompleteColumn(),
        console=_err,
        disable=not show_progress,
        transient=True,
    )
    task = progress.add_task("features", total=None)

    def on_progress(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    try:
        with progress:
            return work(log, family, **options, on_progress=on_progress)
    finally:
        log.close()


@model_app.command("train")
def train(
    target: ModelTargetOpt = None,
    objective: ObjectiveOpt = None,
    no_eval: Annotated[
        bool, typer.Option("--no-eval", help="Skip the leave-workload-out scores.")
    ] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Train a new version of the family's model on every measurement in the log."""
    from autosched.costmodel.shared import train_shared

    family, objective = _family(target), _checked_objective(objective)
    trained = _on_family_log(
        db, not as_json, train_shared, family, objective=objective, evaluate=not no_eval
    )
    if as_json:
        print(json.dumps({**trained.model.as_json(), "secs": trained.secs}))
        return
    model = trained.model
    _out.print(
        f"{family} model version {model.version} (id {model.id}): {model.trained_on} "
        f"measurements of {model.workloads} workloads, {model.objective}, "
        f"trained in {trained.secs:.1f} s",
        highlight=False,
    )
    if model.scores:
        _print_summary(model.scores)


@model_app.command("eval")
def evaluate(
    target: ModelTargetOpt = None,
    objective: ObjectiveOpt = None,
    first: FirstOpt = 64,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Score the family's model on each workload held out in turn, against a per-job model."""
    from autosched.costmodel.shared import evaluate_family

    family, objective = _family(target), _checked_objective(objective)
    evaluation = _on_family_log(
        db, not as_json, evaluate_family, family, objective=objective, first=first
    )
    document = evaluation.as_json()
    if as_json:
        print(json.dumps({"family": family, **document}))
        return
    table = Table(
        "held-out workload",
        "rows",
        "shared pairwise / top-1 / top-5",
        f"per-job (first {first})",
        "fine-tuned",
        title=f"{family}: leave-workload-out, {objective}",
    )
    for item in document["held_out"]:
        table.add_row(
            item["workload"],
            str(item["rows"]),
            _scores_text(item["shared"]),
            _scores_text(item["per_job"]),
            _scores_text(item["fine_tuned"]),
        )
    table.add_section()
    table.add_row(
        "mean",
        "",
        _scores_text(document["shared"]),
        _scores_text(document["per_job"]),
        _scores_text(document["fine_tuned"]),
    )
    _out.print(table)


@model_app.command("list")
def list_models(target: ModelTargetOpt = None, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """List the stored model versions: of ``--target``'s family, or of every family."""
    from autosched.log.costmodels import CostModelStore

    family = None if target is None else _family(target)
    log = open_log(db, must_exist=True, read_only=True)
    try:
        versions = CostModelStore(log).versions(family)
    finally:
        log.close()
    if as_json:
        print(json.dumps([version.as_json() for version in versions]))
        return
    table = Table(
        "id",
        "family",
        "version",
        "created",
        "measurements",
        "workloads",
        "objective",
        "features",
        "shared pairwise / top-1 / top-5",
    )
    for version in versions:
        shared = (version.scores or {}).get("shared")
        table.add_row(
            str(version.id),
            version.family,
            str(version.version),
            version.created_at.strftime("%Y-%m-%d %H:%M"),
            str(version.trained_on),
            str(version.workloads),
            version.objective,
            version.features,
            _scores_text(shared),
        )
    _out.print(table)


def _scores_text(scores: dict[str, float] | None) -> str:
    if not scores:
        return "-"
    return f"{scores['pairwise']:.3f} / {scores['top1']:.3f} / {scores['top5']:.3f}"


def _print_summary(scores: dict[str, object]) -> None:
    for model in ("shared", "per_job", "fine_tuned"):
        value = scores.get(model)
        if isinstance(value, dict):
            _out.print(
                f"  leave-workload-out {model:10} pairwise / top-1 / top-5: {_scores_text(value)}",
                highlight=False,
            )
