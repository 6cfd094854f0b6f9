"""The records a job starts from (another machine's, or the nearest shapes' replayed): measured
first, and what the strategy learns of them is their measurement here, never the timing recorded
with them. Nothing is built or measured; latencies are made up."""

from __future__ import annotations

import random
from collections.abc import Sequence

from autosched.costmodel.adapter import SearchCostModel
from autosched.costmodel.xgb import XGBCostModel
from autosched.records import MeasureResult, RecordView
from autosched.schedule import program_hash, trace_to_json
from autosched.search.base import Proposal
from autosched.search.evolutionary import EvolutionarySearch
from autosched.search.session import SearchSession
from autosched.search.space import design_space
from autosched.target import host_target
from autosched.workloads import get_workload

FOREIGN = (1e-9, 1e-9)  # what the seeds' records say: far faster than anything measured here


class Recorder:
    """A strategy that proposes two new programs a round and records what it hears."""

    def __init__(self) -> None:
        self.rounds = 0
        self.told: list[tuple[str, MeasureResult]] = []
        self.observed: list[tuple[str, MeasureResult]] = []

    def propose(self) -> list[Proposal]:
        self.rounds += 1
        return [Proposal("[[],[]]", f"own-{self.rounds}-{i}", None, i) for i in range(2)]

    def tell(self, proposals: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
        self.told += zip((p.program_hash for p in proposals), results, strict=True)

    def observe(self, proposals: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
        self.observed += zip((p.program_hash for p in proposals), results, strict=True)


def _seed(
    digest: str, trace_json: str = "[[],[]]", samples: tuple[float, ...] = FOREIGN
) -> RecordView:
    return RecordView(
        candidate_id=0,
        trace_json=trace_json,
        program_hash=digest,
        median_secs=samples[0],
        samples=samples,
        error_kind=None,
        error_msg=None,
        verified=True,
        job_id=None,
        measured_at=None,
    )


def _here(digest: str) -> MeasureResult:
    return MeasureResult(samples=(1e-3 * (1 + len(digest)),))


def test_seeds_go_first_and_the_strategy_observes_their_measurements_not_their_records() -> None:
    strategy = Recorder()
    seeds = [_seed(f"seed-{i}") for i in range(3)]
    session = SearchSession(strategy, [], "baseline", seeds=seeds)

    first = session.propose(2)
    assert [p.program_hash for p in first] == ["seed-0", "seed-1"]
    assert strategy.rounds == 0  # a round full of seeds asks the strategy nothing
    session.learn((p.program_hash, _here(p.program_hash)) for p in first)
    assert strategy.observed == [(p.program_hash, _here(p.program_hash)) for p in first]
    assert strategy.told == []

    second = session.propose(3)  # the last seed, then the strategy's own proposals
    assert [p.program_hash for p in second] == ["seed-2", "own-1-0", "own-1-1"]
    session.learn((p.program_hash, _here(p.program_hash)) for p in second)
    assert [digest for digest, _ in strategy.observed] == ["seed-0", "seed-1", "seed-2"]
    assert strategy.told == [(d, _here(d)) for d in ("own-1-0", "own-1-1")]
    heard = [result for _, result in strategy.observed + strategy.told]
    assert all(result.samples != FOREIGN for result in heard)


def test_the_evolutionary_search_learns_from_the_programs_it_observes() -> None:
    workload = get_workload("matmul", {"M": 32, "N": 32, "K": 32})
    target = host_target()
    model = XGBCostModel(seed=0)
    search = EvolutionarySearch(
        workload, target, SearchCostModel(model, workload.key), batch_size=4, seed=0
    )
    space, rng = design_space(workload, target, seed=1), random.Random(1)
    observed: dict[str, Proposal] = {}
    while len(observed) < 8:
        if (sch := space.sample(lambda _name, choices: rng.choice(choices))) is not None:
            digest = program_hash(sch.mod)
            observed[digest] = Proposal(trace_to_json(sch.trace), digest, None, None)
    search.observe(list(observed.values()), [_here(digest) for digest in observed])
    assert model.num_samples == len(observed)
    assert search.propose()  # and it goes on proposing from what it learnt


def test_the_evolutionary_search_resumed_from_history_proposes_only_new_programs() -> None:
    # MetaSchedule seeds its population with the best recorded programs but knows only its own
    # proposals as measured: left alone it proposes recorded programs again
    workload = get_workload("matmul", {"M": 32, "N": 32, "K": 32})
    target = host_target()
    space, rng = design_space(workload, target, seed=1), random.Random(1)
    history: dict[str, RecordView] = {}
    while len(history) < 48:
        if (sch := space.sample(lambda _name, choices: rng.choice(choices))) is not None:
            digest = program_hash(sch.mod)
            history[digest] = _seed(digest, trace_to_json(sch.trace), _here(digest).samples)
    model = XGBCostModel(seed=0)
    search = EvolutionarySearch(
        workload,
        target,
        SearchCostModel(model, workload.key),
        batch_size=8,
        seed=0,
        history=list(history.values()),
        population_size=64,
    )
    assert model.trained  # the history's 48 measurements fitted it: it favours the fastest
    seen = set(history)
    for _ in range(4):
        proposals = search.propose()
        digests = {p.program_hash for p in proposals}
        assert len(proposals) == len(digests) == 8
        assert not digests & seen
        seen |= digests
        search.tell(proposals, [_here(p.program_hash) for p in proposals])
