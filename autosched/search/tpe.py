"""TPE search: Optuna's tree-structured Parzen estimator over the decisions of the design space.

Define-by-run: each Optuna trial samples one schedule, answering every decision the design space
asks (see `autosched.search.space`) with ``trial.suggest_categorical``. The study lives in Optuna's
storage (a SQLAlchemy URL) or in memory, and a study persisted there continues where it stopped.
Optuna's logging is turned down to warnings: it would report every trial.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.samplers import TPESampler
from optuna.trial import Trial, TrialState
from tvm.s_tir import Schedule

from autosched.errors import UserError
from autosched.records import MeasureResult, RecordView
from autosched.schedule import program_hash, trace_to_json
from autosched.search.base import Proposal
from autosched.search.space import ATTEMPTS_PER_CANDIDATE, Chooser, design_space
from autosched.target import target_key
from autosched.workload import Workload


def study_name(workload: Workload, target: dict) -> str:
    """The Optuna study of a workload and target: every TPE job on them continues it."""
    return f"autosched:{workload.name}:{workload.key[:12]}:{target_key(target)[:12]}"


@dataclass
class _Candidate:
    """A program sampled in this batch and the trials that sampled it."""

    sch: Schedule
    trials: list[Trial] = field(default_factory=list)


class TPESearch:
    """Optuna TPE search for one workload on one target.

    A study belongs to one workload and target (its decisions' names mean nothing elsewhere), and
    says which in its user attributes. Its trials are its memory: ``history`` only serves to
    answer a trial that samples a program measured before with that measurement, without proposing
    it again. Trials whose proposal is never told stay RUNNING, and TPE avoids their decisions as
    it avoids those of the batch in flight.

    Args:
        workload: what to schedule.
        target: the target's JSON form.
        batch_size: distinct new programs per `propose` (fewer when the search keeps sampling
            programs measured before).
        seed: seeds the TPE sampler (None: random); a continued study mixes in its trial count.
        history: recorded measurements of this workload and target.
        storage: SQLAlchemy URL of Optuna's storage (None: in memory).
        study_name: the study to create, or to continue if the storage holds it.

    Raises:
        UserError: the storage holds a study of that name for another workload or target.
    """

    def __init__(
        self,
        workload: Workload,
        target: dict,
        *,
        batch_size: int,
        seed: int | None,
        history: Sequence[RecordView] = (),
        storage: str | None = None,
        study_name: str = "autosched",
    ) -> None:
        self._space = design_space(workload, target, seed=seed)
        self._batch_size = batch_size
        self._known = {record.program_hash: record.result for record in history}
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(
            storage=storage,
            sampler=_sampler(seed),
            study_name=study_name,
            direction="minimize",
            load_if_exists=True,
        )
        self._claim_study({"workload_key": workload.key, "target_key": target_key(target)})
        trials = len(self.study.get_trials(deepcopy=False))
        if trials and seed is not None:  # a study continued: not the random start it began with
            self.study.sampler = _sampler((seed + trials) % 2**32)

    def _claim_study(self, subject: dict[str, str]) -> None:
        attrs = self.study.user_attrs
        for key, value in subject.items():
            if key not in attrs:
                self.study.set_user_attr(key, value)
            elif attrs[key] != value:
                raise UserError(
                    f"Optuna study {self.study.study_name!r} belongs to another workload or "
                    f"target ({key} {attrs[key]}, not {value})"
                )

    def propose(self) -> list[Proposal]:
        """Up to ``batch_size`` distinct programs not measured before, one per group of trials.

        A trial whose sample a postprocessor refuses is told FAIL, one that samples a measured
        program is told that measurement, and both are replaced by new trials, within a bound.
        """
        batch: dict[str, _Candidate] = {}
        for _ in range(ATTEMPTS_PER_CANDIDATE * self._batch_size):
            if len(batch) == self._batch_size:
                break
            trial = self.study.ask()
            sch = self._space.sample(_suggest(trial))
            if sch is None:
                self.study.tell(trial, state=TrialState.FAIL)
                continue
            digest = program_hash(sch.mod)
            if digest in self._known:
                self._tell(trial, self._known[digest])
                continue
            batch.setdefault(digest, _Candidate(sch)).trials.append(trial)
        return [
            Proposal(
                trace_to_json(candidate.sch.trace),
                digest,
                predicted_score=None,
                handle=tuple(candidate.trials),
            )
            for digest, candidate in batch.items()
        ]

    def tell(self, proposals: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
        """Complete every trial of each proposal with its median latency in seconds, or FAIL."""
        self.observe(proposals, results)
        for proposal, result in zip(proposals, results, strict=True):
            for trial in proposal.handle:
                self._tell(trial, result)

    def observe(self, proposals: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
        """Remember the measurements, to answer the trials that later sample those programs."""
        for proposal, result in zip(proposals, results, strict=True):
            self._known[proposal.program_hash] = result

    def _tell(self, trial: Trial, result: MeasureResult) -> None:
        if result.median is None:
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        else:
            self.study.tell(trial, result.median, skip_if_finished=True)


def _sampler(seed: int | None) -> TPESampler:
    """TPE over the decisions jointly, steering the trials of a batch apart (constant liar)."""
    with warnings.catch_warnings():  # both options are experimental in Optuna 4
        warnings.simplefilter("ignore", ExperimentalWarning)
        return TPESampler(seed=seed, multivariate=True, constant_liar=True)


def _suggest(trial: Trial) -> Chooser:
    """The chooser that asks ``trial`` for each decision."""

    def choose(name: str, choices: Sequence[int]) -> int:
        return trial.suggest_categorical(name, choices)

    return choose
