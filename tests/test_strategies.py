"""Random and TPE search: their decisions replay into valid programs, seeds reproduce, studies
persist. Nothing is built or measured here; latencies told to the strategies are made up."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Sequence

import optuna
import pytest
from optuna.trial import TrialState

from autosched.errors import UserError
from autosched.records import ErrorKind, MeasureResult
from autosched.schedule import apply_trace, program_hash
from autosched.search.base import Proposal
from autosched.search.random import RandomSearch
from autosched.search.space import design_space, replay_with_choices
from autosched.search.tpe import TPESearch
from autosched.target import host_target
from autosched.workloads import get_workload

SMALL = {
    "matmul": {"M": 32, "N": 32, "K": 32},
    "conv2d_nhwc": {"N": 1, "H": 8, "W": 8, "CI": 8, "CO": 8},
    "conv1d_glu": {"L": 16, "C": 16},  # its epilogue does not fuse: the unfused CPU space
}


def _made_up(proposals: Sequence[Proposal]) -> list[MeasureResult]:
    """A latency per program that depends only on the program."""
    return [
        MeasureResult(samples=(1e-4 * (1 + int(p.program_hash[:6], 16) % 97),)) for p in proposals
    ]


class _Recorder:
    """A seeded random chooser that remembers the choices offered and made under each name."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.offered: dict[str, set[tuple[int, ...]]] = defaultdict(set)
        self.chosen: dict[str, int] = {}

    def __call__(self, name: str, choices: Sequence[int]) -> int:
        self.offered[name].add(tuple(choices))
        self.chosen[name] = self.rng.choice(choices)
        return self.chosen[name]


@pytest.mark.parametrize("name", SMALL)
def test_tpe_proposals_replay_into_the_programs_proposed_and_vary(name: str) -> None:
    workload = get_workload(name, SMALL[name])
    search = TPESearch(workload, host_target(), batch_size=10, seed=0)
    programs = set()
    for _ in range(3):
        proposals = search.propose()
        for proposal in proposals:
            replayed = apply_trace(workload.mod, proposal.trace_json)
            assert program_hash(replayed.mod) == proposal.program_hash
        search.tell(proposals, _made_up(proposals))
        programs.update(p.program_hash for p in proposals)
    assert len(search.study.trials) >= 30
    assert len(programs) > 10


def test_each_decision_name_always_offers_the_same_choices_and_tvm_keeps_the_choice() -> None:
    space = design_space(get_workload("conv2d_nhwc", SMALL["conv2d_nhwc"]), host_target(), seed=0)
    offered: dict[str, set[tuple[int, ...]]] = defaultdict(set)
    locations_checked = 0
    for seed in range(20):
        chooser = _Recorder(seed)
        sch = space.sample(chooser)
        assert sch is not None
        for name, choices in chooser.offered.items():
            offered[name] |= choices
        prefix = f"s{chooser.chosen.get('space', 0)}"
        for index, inst in enumerate(sch.trace.insts):
            if inst.kind.name != "SampleComputeLocation":
                continue
            chosen = [v for n, v in chooser.chosen.items() if n.startswith(f"{prefix}.i{index}.")]
            assert chosen in ([], [int(sch.trace.get_decision(inst))])
            locations_checked += len(chosen)
    assert {name: len(choices) for name, choices in offered.items() if len(choices) > 1} == {}
    assert locations_checked > 0


def test_tile_and_categorical_decisions_respect_their_constraints() -> None:
    workload = get_workload("matmul", {"M": 48, "N": 64, "K": 8})
    design = apply_trace(workload.mod, "[[],[]]")
    i, j, _ = design.get_loops(design.get_sblock("C"))
    design.sample_partitioned_tile(i, n=4, partition_pos=2, innerpart_factor=4)
    design.sample_perfect_tile(j, n=3, max_innermost_factor=4)
    design.sample_categorical([10, 20, 30], [0.5, 0.0, 0.5])
    for seed in range(30):
        sch = replay_with_choices(design.trace, workload.mod, _Recorder(seed), "t")
        assert sch is not None
        partitioned, perfect, categorical = (
            sch.trace.get_decision(x) for x in sch.trace.insts[-3:]
        )
        partitioned, perfect = [int(f) for f in partitioned], [int(f) for f in perfect]
        assert math.prod(partitioned) == 48 and math.prod(partitioned[2:]) % 4 == 0
        assert math.prod(perfect) == 64 and perfect[-1] <= 4
        assert int(categorical) in (0, 2)


def test_random_search_is_reproducible_with_a_seed_and_proposes_distinct_programs() -> None:
    workload = get_workload("conv1d_glu", SMALL["conv1d_glu"])

    def batches(seed: int) -> list[list[str]]:
        search = RandomSearch(workload, host_target(), batch_size=6, seed=seed)
        proposals = [search.propose() for _ in range(2)]
        return [[p.trace_json for p in batch] for batch in proposals]

    first, again, other = batches(7), batches(7), batches(8)
    assert first == again
    assert first != other
    traces = first[0] + first[1]
    assert len(traces) == 12
    assert len({program_hash(apply_trace(workload.mod, t).mod) for t in traces}) == 12


def test_random_search_does_not_propose_programs_measured_before() -> None:
    workload = get_workload("matmul", {"M": 2, "N": 2, "K": 2})  # a few hundred programs
    search = RandomSearch(workload, host_target(), batch_size=8, seed=1)
    seen: set[str] = set()
    while proposals := search.propose():
        batch = {p.program_hash for p in proposals}
        assert len(batch) == len(proposals) and not batch & seen
        seen |= batch
        search.tell(proposals, _made_up(proposals))
    assert len(seen) > 100


def test_tpe_study_is_persisted_and_continued(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    workload = get_workload("matmul", SMALL["matmul"])
    search = TPESearch(
        workload, host_target(), batch_size=4, seed=0, storage=url, study_name="matmul"
    )
    proposals = search.propose()
    results = _made_up(proposals)
    results[0] = MeasureResult(error_kind=ErrorKind.RUN, error_msg="boom")
    search.tell(proposals, results)

    trials = optuna.load_study(study_name="matmul", storage=url).trials
    by_number = {t.number: t for t in trials}
    for proposal, result in zip(proposals, results, strict=True):
        for trial in proposal.handle:
            stored = by_number[trial.number]
            if result.ok:
                assert stored.state is TrialState.COMPLETE and stored.value == result.median
            else:
                assert stored.state is TrialState.FAIL and stored.value is None
    assert sum(t.state is TrialState.COMPLETE for t in trials) >= 3

    again = TPESearch(
        workload, host_target(), batch_size=4, seed=0, storage=url, study_name="matmul"
    )
    more = again.propose()
    assert min(t.number for p in more for t in p.handle) == len(trials)
    assert not {p.program_hash for p in more} & {p.program_hash for p in proposals}
    other = get_workload("matmul", {"M": 16, "N": 32, "K": 32})
    with pytest.raises(UserError, match="another workload"):
        TPESearch(other, host_target(), batch_size=4, seed=0, storage=url, study_name="matmul")
