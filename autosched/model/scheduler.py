"""The task scheduler of a model: how its trial budget is split across its tasks, round by round.

Each round gives one batch of trials to the task whose next batch is expected to cut the model's
end-to-end latency (the sum over tasks of weight x best latency) the most, as Ansor's
gradient-based task scheduler does: a warm-up round gives every task a first batch; afterwards
a task's gradient is its weight times a mix of its recent slope (how much its best latency fell
over the last rounds) and an optimistic forward estimate (one more round improves it as much as
the average round did so far, where a round that left its best where it was counts
`STILL_ROUND_WEIGHT` times more). A task whose best stopped falling thus gets fewer rounds than
one that still improves, yet keeps rounds in proportion to its share of the model's latency: a
heavy task that the search has not cracked yet is not starved by light ones that improve a
little. Where the machine's peak is known, the forward estimate counts only what lies above a
task's floor (its arithmetic at the peak): a language model's head that runs at nine tenths of the
peak has a tenth of its latency left to gain, not all of it, and its rounds go to kernels far from
theirs. Pure bookkeeping: nothing here measures or touches the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

ALPHA = 0.2
"""The share of the backward (observed) slope in the gradient; the rest is the forward estimate."""

BACKWARD_WINDOW = 3
"""How many rounds back the observed slope of a task's best latency is taken over."""

STILL_ROUND_WEIGHT = 4
"""How many rounds each of a task's last rounds that left its best latency where it was counts
for in the forward estimate's average."""


@dataclass
class TaskCurve:
    """One task's learning curve: its weight (calls per model run), the least latency in seconds
    any schedule could reach (``floor_secs``: its arithmetic at the machine's peak; 0 where
    unknown), the trials it was given and its best latency after each of its rounds (None while
    nothing ran correctly)."""

    weight: int
    floor_secs: float = 0.0
    trials: int = 0
    best_secs: list[float | None] = field(default_factory=list)
    finished: bool = False  # its design space is exhausted, or it cannot be searched

    @property
    def rounds(self) -> int:
        return len(self.best_secs)

    @property
    def best(self) -> float | None:
        return self.best_secs[-1] if self.best_secs else None


def gradient(curve: TaskCurve, *, alpha: float = ALPHA, window: int = BACKWARD_WINDOW) -> float:
    """The expected change of the model's latency per round given to ``curve``'s task (seconds,
    zero or negative; more negative is a better use of a round).

    Backward: the slope of the best latency over the last ``window`` rounds (zero until there
    are that many). Forward: the next round improves the best as much as an average round did,
    ``(best - floor) / rounds``, where each of the last rounds that left the best where it was
    counts `STILL_ROUND_WEIGHT` times. A task that has not run correctly yet has nothing to gain
    that is known.
    """
    best = curve.best
    if best is None or curve.rounds == 0:
        return 0.0
    history = [secs for secs in curve.best_secs if secs is not None]
    backward = 0.0
    if len(history) > window:
        backward = (history[-1] - history[-1 - window]) / window
    rounds = curve.rounds + (STILL_ROUND_WEIGHT - 1) * _still_rounds(history)
    forward = -max(best - curve.floor_secs, 0.0) / rounds
    return curve.weight * (alpha * backward + (1 - alpha) * forward)


def _still_rounds(history: Sequence[float]) -> int:
    """How many of the last rounds of a best-latency history left it where it was."""
    still = 0
    while still + 1 < len(history) and history[-1 - still] >= history[-2 - still]:
        still += 1
    return still


def next_task(
    curves: Sequence[TaskCurve], *, alpha: float = ALPHA, window: int = BACKWARD_WINDOW
) -> int | None:
    """The index of the unfinished task to give the next round: first any task without a round
    yet (the warm-up), else the one with the most negative `gradient`; ties go to the task with
    the fewest trials, then the first. None when every task is finished.
    """
    open_tasks = [index for index, curve in enumerate(curves) if not curve.finished]
    for index in open_tasks:
        if curves[index].rounds == 0:
            return index
    if not open_tasks:
        return None
    return min(
        open_tasks,
        key=lambda i: (gradient(curves[i], alpha=alpha, window=window), curves[i].trials, i),
    )


class TaskScheduler:
    """Splits ``budget`` trials across tasks of the given ``weights`` (and ``floors``, each
    task's least latency in seconds, where known) in rounds of ``batch``.

    Use: ``while (task := scheduler.next_round()) is not None``: tune task ``task.index`` for
    ``task.trials`` trials, then `record` what it measured and its best latency. The batch
    shrinks so that the warm-up round fits the budget.
    """

    def __init__(
        self,
        weights: Sequence[int],
        budget: int,
        batch: int,
        floors: Sequence[float] | None = None,
    ) -> None:
        if budget < 0 or batch < 1:
            raise ValueError("the budget must be zero or more and the batch at least 1")
        floors = floors if floors is not None else [0.0] * len(weights)
        self.curves = [
            TaskCurve(weight, floor) for weight, floor in zip(weights, floors, strict=True)
        ]
        self.remaining = budget
        self.batch = max(1, min(batch, budget // max(1, len(weights))))

    def next_round(self) -> Round | None:
        """The next task to tune and its trials; None when the budget is spent."""
        index = next_task(self.curves) if self.remaining > 0 else None
        return None if index is None else Round(index, min(self.batch, self.remaining))

    def record(self, index: int, trials: int, best_secs: float | None) -> None:
        """Task ``index`` measured ``trials`` new trials and its best latency is ``best_secs``.

        A round that measured nothing new still costs one trial of the budget, so the loop
        always ends.
        """
        curve = self.curves[index]
        curve.trials += trials
        curve.best_secs.append(best_secs)
        self.remaining -= max(trials, 1)

    def finish(self, index: int) -> None:
        """Task ``index`` gets no more rounds: its design space is exhausted, or it failed."""
        self.curves[index].finished = True

    @property
    def allocation(self) -> list[int]:
        """Trials given to each task so far."""
        return [curve.trials for curve in self.curves]


@dataclass(frozen=True)
class Round:
    """One round of the scheduler: task ``index`` gets ``trials`` trials."""

    index: int
    trials: int
