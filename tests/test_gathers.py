"""Programs refused before they are built: wide vectors that gather under an unroll annotation."""

from __future__ import annotations

import pytest
from tvm.s_tir import Schedule

from autosched.errors import UserError
from autosched.measure import LocalMeasurer, MeasureConfig
from autosched.measure.gathers import MAX_GATHER_LANES, check_gathers
from autosched.records import ErrorKind
from autosched.schedule import trace_to_json
from autosched.target import host_target
from autosched.workload import Workload, workload_from_tvmscript

UNROLL = {"pragma_auto_unroll_max_step": 64, "pragma_unroll_explicit": 1}


def mean_rows(lanes: int, *, gathering: bool = True) -> Workload:
    """A CNN's global mean over 56x56 pixels of 16 channels as MetaSchedule's rfactor writes it:
    per channel, rows of ``lanes`` lanes. Gathering, a lane reads every 16th float (the pixels of
    one channel); otherwise the vector runs along ``lanes`` channels, read contiguously, and the
    rows along the pixels."""
    pixel = f"(vr * T.int64({lanes}) + vi)"
    read = (
        f"p0[T.int64(0), {pixel} // T.int64(56), {pixel} % T.int64(56), vc]"
        if gathering
        else "p0[T.int64(0), vr // T.int64(56), vr % T.int64(56), vi]"
    )
    channels, rows = (16, 3136 // lanes) if gathering else (1, 3136)
    text = f"""
@T.prim_func(s_tir=True)
def mean_rows(
    p0: T.Buffer((T.int64(1), T.int64(56), T.int64(56), T.int64({16 if gathering else lanes})),
                 "float32"),
    rows: T.Buffer((T.int64({channels}), T.int64({lanes})), "float32"),
):
    for c, r, i in T.grid(T.int64({channels}), T.int64({rows}), T.int64({lanes})):
        with T.sblock("rows"):
            vc, vr, vi = T.axis.remap("SRS", [c, r, i])
            with T.init():
                rows[vc, vi] = T.float32(0)
            rows[vc, vi] = rows[vc, vi] + {read}
"""
    return workload_from_tvmscript(text, name=f"mean{lanes}")


def scheduled(workload: Workload, annotations: dict[str, int]) -> Schedule:
    """The program as MetaSchedule's postprocessor finishes it: channels parallel, lanes
    vectorized, the parallel loop annotated."""
    sch = Schedule(workload.mod)
    c, _, i = sch.get_loops(sch.get_sblock("rows"))
    sch.parallel(c)
    sch.vectorize(i)
    for key, value in annotations.items():
        sch.annotate(c, key, value)
    return sch


def test_a_vector_of_over_32_lanes_that_gathers_under_an_unroll_annotation_is_refused() -> None:
    sch = scheduled(mean_rows(56), UNROLL)
    with pytest.raises(UserError, match=r"^refused before building: a vector of 56 lanes that "
                       r"gathers from p0 under an unroll annotation"):  # fmt: skip
        check_gathers(sch.mod["main"])


@pytest.mark.parametrize(
    ("workload", "annotations"),
    [
        (mean_rows(MAX_GATHER_LANES), UNROLL),
        (mean_rows(56), {}),
        (mean_rows(64, gathering=False), UNROLL),
    ],
    ids=["32 lanes", "not unrolled", "contiguous"],
)
def test_a_narrower_vector_one_not_unrolled_or_one_that_reads_contiguously_is_built(
    workload: Workload, annotations: dict[str, int]
) -> None:
    check_gathers(scheduled(workload, annotations).mod["main"])


@pytest.mark.slow
def test_a_measurer_reports_the_refusal_as_a_failed_build_and_measures_the_narrower_vector() -> (
    None
):
    config = MeasureConfig(repeat=2, min_repeat_ms=1, build_timeout_secs=60)
    measurer = LocalMeasurer(host_target(), config)
    wide, narrow = mean_rows(56), mean_rows(MAX_GATHER_LANES)
    try:
        (refused,) = measurer.measure(wide.ref, [trace_to_json(scheduled(wide, UNROLL).trace)])
        (measured,) = measurer.measure(narrow.ref, [trace_to_json(scheduled(narrow, UNROLL).trace)])
    finally:
        measurer.close()
    assert not refused.ok and refused.error_kind is ErrorKind.BUILD
    assert "refused before building: a vector of 56 lanes that gathers" in refused.error_msg
    assert measured.ok and len(measured.samples) == 2
