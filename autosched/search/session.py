"""The search session of one tuning job: the one loop between a strategy and the measurements,
shared by `autosched tune` (which measures each batch itself) and the service engine (whose
workers report measurements as they arrive).

A session knows every program measured for the job's workload and target, so nothing is measured
twice; it tells the strategy about every proposal it made, at once for programs measured before
and on arrival for the others; it knows whether the untuned baseline was measured; and it decides
when the design space has nothing new left to offer.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence

from autosched.records import MeasureResult, RecordView
from autosched.schedule import BASELINE_TRACE
from autosched.search.base import Proposal, SearchStrategy

# Proposal rounds in a row that bring nothing new before the design space counts as exhausted.
STALE_ROUNDS = 3

Admit = Callable[[Sequence[Proposal]], Collection[str]]
"""Takes fresh proposals to measure (the service queues them) and returns the program hashes it
took; a program it did not take is measured elsewhere, and the session forgets the proposal."""


class SearchSession:
    """One job's search over ``strategy``, from the workload and target's recorded ``history``.

    Args:
        strategy: proposes candidates and learns from their measurements.
        history: the recorded measurements of the workload on the target, by any job.
        baseline_hash: the program hash of the untuned workload.
    """

    def __init__(
        self, strategy: SearchStrategy, history: Sequence[RecordView], baseline_hash: str
    ) -> None:
        self._strategy = strategy
        self._known: dict[str, MeasureResult] = {r.program_hash: r.result for r in history}
        self._pending: dict[str, Proposal] = {}
        self._stale = 0
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

    def propose(self, limit: int, admit: Admit | None = None) -> list[Proposal]:
        """Up to ``limit`` proposals of programs never measured nor in flight, each program once.

        Proposals of programs measured before are told to the strategy at once, with their
        recorded measurement. ``admit`` (default: all) decides which fresh proposals go out; the
        returned ones await `learn`.
        """
        proposals = self._strategy.propose()
        known = [p for p in proposals if p.program_hash in self._known]
        if known:
            self._strategy.tell(known, [self._known[p.program_hash] for p in known])
        fresh: dict[str, Proposal] = {}
        for proposal in proposals:
            digest = proposal.program_hash
            if digest not in self._known and digest not in self._pending:
                fresh.setdefault(digest, proposal)
        batch = list(fresh.values())[: max(limit, 0)]
        if admit is not None and batch:
            taken = set(admit(batch))
            batch = [p for p in batch if p.program_hash in taken]
        self._pending.update((p.program_hash, p) for p in batch)
        self._stale = 0 if batch else self._stale + 1
        return batch

    def learn(self, measured: Iterable[tuple[str, MeasureResult]]) -> None:
        """Take in measurements (program hash, result) of the workload on the target, and tell
        the strategy those of its proposals."""
        told: list[Proposal] = []
        results: list[MeasureResult] = []
        for digest, result in measured:
            self._known[digest] = result
            proposal = self._pending.pop(digest, None)
            if proposal is not None:
                told.append(proposal)
                results.append(result)
        if told:
            self._strategy.tell(told, results)
