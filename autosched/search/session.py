"""The search session of one tuning job: the one loop between a strategy and the measurements,
shared by `autosched tune` (which measures each batch itself) and the service engine (whose
workers report measurements as they arrive).

A session knows every program measured for the job's workload and target, so nothing is measured
twice; it tells the strategy about every proposal it made, at once for programs measured before
and on arrival for the others, and lets it observe the measurements of the programs it did not
propose (seeds, samples); it knows whether the untuned baseline was measured. When the
strategy proposes fewer new programs than the budget allows (it keeps returning to programs
measured before), the session fills the round with programs sampled from the design space
itself, each decision drawn at random, so a job spends its whole budget; the space counts as
exhausted only when rounds of such samples bring no new program either.

A session can outlive its job (``autosched.sessions``): `catch_up` then takes in what other jobs
measured in the meantime.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING

from autosched.records import BASELINE_TRACE, SPACE_EXHAUSTED, MeasureResult, RecordView
from autosched.search.base import Proposal, SearchStrategy
from autosched.search.registry import SearchJob, make_strategy

if TYPE_CHECKING:
    from autosched.search.space import DesignSpace

# Rounds in a row in which neither the strategy nor samples of the design space bring a new
# program, before the space counts as exhausted.
STALE_ROUNDS = 3
# Samples of the design space drawn per program missing from a round, before settling for fewer.
SAMPLES_PER_MISSING = 4
# The handle of proposals the session made itself (seeds, samples): the strategy observes them.
_NOT_PROPOSED = object()

Admit = Callable[[Sequence[Proposal]], Collection[str]]
"""Takes fresh proposals to measure (the service queues them) and returns the program hashes it
took; a program it did not take is measured elsewhere, and the session forgets the proposal."""


class SearchSession:
    """One job's search over ``strategy``, from the workload and target's recorded ``history``.

    Args:
        strategy: proposes candidates and learns from their measurements.
        history: the recorded measurements of the workload on the target, by any job.
        baseline_hash: the program hash of the untuned workload.
        space: builds the design space to sample rounds full from (None: never sample).
        seed: seeds those samples.
        seeds: records to measure first (``SearchJob.seeds``); the strategy observes their
            measurements, never the timings recorded with them.
    """

    def __init__(
        self,
        strategy: SearchStrategy,
        history: Sequence[RecordView],
        baseline_hash: str,
        *,
        space: Callable[[], DesignSpace] | None = None,
        seed: int | None = None,
        seeds: Sequence[RecordView] = (),
    ) -> None:
        self._strategy = strategy
        self._known: dict[str, MeasureResult] = {r.program_hash: r.result for r in history}
        self._seeds = [
            Proposal(r.trace_json, r.program_hash, None, _NOT_PROPOSED)
            for r in seeds
            if r.program_hash not in self._known
        ]
        self._pending: dict[str, Proposal] = {}
        self._stale = 0
        self._space_factory = space
        self._space: DesignSpace | None = None
        self._rng = random.Random(seed)
        self._fruitless_samples = 0
        self.baseline = Proposal(BASELINE_TRACE, baseline_hash, None, None)

    @property
    def needs_baseline(self) -> bool:
        """Whether the untuned program still has to be measured."""
        return self.baseline.program_hash not in self._known

    @property
    def baseline_latency(self) -> float | None:
        """The untuned program's median latency, once measured (None if it failed)."""
        result = self._known.get(self.baseline.program_hash)
        return None if result is None else result.median

    @property
    def exhausted(self) -> bool:
        """Whether the last `STALE_ROUNDS` rounds of proposals brought no new program."""
        return self._stale >= STALE_ROUNDS

    @property
    def stop_reason(self) -> str | None:
        """Why the search stopped short, once `exhausted`."""
        if not self.exhausted:
            return None
        return (
            f"{SPACE_EXHAUSTED}: {len(self._known)} distinct programs measured; neither the "
            f"strategy nor {self._fruitless_samples} samples of the design space brought a new one"
        )

    def catch_up(self, history: Iterable[RecordView]) -> int:
        """Take in the recorded measurements of the workload and target that the session has
        not learnt: those of its own proposals that arrived unseen, and those other jobs made
        since it started, which the strategy observes; so nothing is measured twice. Returns how
        many were new."""
        new = [record for record in history if record.program_hash not in self._known]
        self.learn((r.program_hash, r.result) for r in new if r.program_hash in self._pending)
        foreign = [record for record in new if record.program_hash not in self._known]
        if foreign:
            self._known.update((record.program_hash, record.result) for record in foreign)
            self._strategy.observe(
                [Proposal(r.trace_json, r.program_hash, None, _NOT_PROPOSED) for r in foreign],
                [record.result for record in foreign],
            )
        return len(new)

    def propose(self, limit: int, admit: Admit | None = None) -> list[Proposal]:
        """Up to ``limit`` proposals of programs never measured nor in flight, each program once.

        Proposals of programs measured before are told to the strategy at once, with their
        recorded measurement. ``admit`` (default: all) decides which fresh proposals go out; the
        returned ones await `learn`.
        """
        fresh: dict[str, Proposal] = {}
        while self._seeds and len(fresh) < limit:
            seeded = self._seeds.pop(0)
            if seeded.program_hash not in self._known and seeded.program_hash not in self._pending:
                fresh.setdefault(seeded.program_hash, seeded)
        # a round full of seeds asks the strategy nothing: it proposes once it has observed them
        proposals = self._strategy.propose() if len(fresh) < limit else []
        known = [p for p in proposals if p.program_hash in self._known]
        if known:
            self._strategy.tell(known, [self._known[p.program_hash] for p in known])
        for proposal in proposals:
            digest = proposal.program_hash
            if digest not in self._known and digest not in self._pending:
                fresh.setdefault(digest, proposal)
        batch = list(fresh.values())[: max(limit, 0)]
        if len(batch) < limit:
            batch += self._sample(limit - len(batch), {p.program_hash for p in batch})
        if admit is not None and batch:
            taken = set(admit(batch))
            batch = [p for p in batch if p.program_hash in taken]
        self._pending.update((p.program_hash, p) for p in batch)
        self._stale = 0 if batch else self._stale + 1
        return batch

    def learn(self, measured: Iterable[tuple[str, MeasureResult]]) -> None:
        """Take in measurements (program hash, result) of the workload on the target: tell the
        strategy those of its proposals, and let it observe those of the session's own."""
        arrived: list[tuple[Proposal, MeasureResult]] = []
        for digest, result in measured:
            self._known[digest] = result
            proposal = self._pending.pop(digest, None)
            if proposal is not None:
                arrived.append((proposal, result))
        observed = [(p, r) for p, r in arrived if p.handle is _NOT_PROPOSED]
        told = [(p, r) for p, r in arrived if p.handle is not _NOT_PROPOSED]
        if observed:
            self._strategy.observe([p for p, _ in observed], [r for _, r in observed])
        if told:
            self._strategy.tell([p for p, _ in told], [r for _, r in told])

    def _sample(self, wanted: int, taken: set[str]) -> list[Proposal]:
        """Up to ``wanted`` programs of the design space, each decision drawn at random, that
        were never measured, are not in flight and are not in ``taken``."""
        if self._space_factory is None:
            return []
        from autosched.schedule import program_hash, trace_to_json

        if self._space is None:
            self._space = self._space_factory()
        sampled: list[Proposal] = []
        for _ in range(SAMPLES_PER_MISSING * wanted):
            if len(sampled) == wanted:
                break
            sch = self._space.sample(lambda _name, choices: self._rng.choice(choices))
            if sch is None:
                continue
            digest = program_hash(sch.mod)
            if digest in self._known or digest in self._pending or digest in taken:
                self._fruitless_samples += 1
                continue
            taken.add(digest)
            sampled.append(Proposal(trace_to_json(sch.trace), digest, None, _NOT_PROPOSED))
        if sampled:
            self._fruitless_samples = 0
        return sampled


def start_session(strategy: str, job: SearchJob) -> SearchSession:
    """The search session of ``job`` with the strategy named ``strategy``, filling its rounds
    from the job's design space.

    Raises:
        UserError: an unknown strategy, or a design space MetaSchedule cannot build.
    """
    from autosched.schedule import program_hash
    from autosched.search.space import design_space

    return SearchSession(
        make_strategy(strategy, job),
        job.history,
        program_hash(job.workload.mod),
        space=lambda: design_space(job.workload, job.target, seed=job.seed),
        seed=job.seed,
        seeds=job.seeds,
    )
