"""The global pooling sketch: offered for a channels-last mean that leaves the cores idle, nowhere
else; what it builds computes the mean, and its trace is one a worker admits and replays."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
from tvm import te, topi
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule import TuneContext
from tvm.s_tir.schedule import SBlockRV

from autosched.schedule import apply_trace, trace_to_json
from autosched.search.global_pooling import GlobalPooling
from autosched.search.space import _seed_state, design_space
from autosched.target import host_target, to_tvm_target
from autosched.trace_check import check_trace
from autosched.workload import Workload, normalize_func
from autosched.workloads import get_workload


def _module(*tensors: te.Tensor) -> tvm.IRModule:
    return tvm.IRModule({"main": normalize_func(te.create_prim_func(list(tensors)))})


def _reduction_block(sch: Schedule) -> SBlockRV:
    """The first block of ``sch`` that reduces."""
    root = sch.get_sblock("root")
    return next(
        block
        for block in sch.get_child_blocks(root)
        if any(int(axis.iter_type) == 2 for axis in sch.get(block).iter_vars)
    )


def _sketches(mod: tvm.IRModule, cores: int = 2) -> int:
    sch = Schedule(mod)
    return len(GlobalPooling(cores).apply(sch, _reduction_block(sch)))


def _nhwc_mean(n: int, h: int, w: int, c: int) -> tvm.IRModule:
    data = te.placeholder((n, h, w, c), "float32", name="data")
    return _module(data, topi.sum(data, [1, 2], keepdims=True))


def test_a_channels_last_mean_gets_a_second_sketch() -> None:
    assert _sketches(_nhwc_mean(1, 56, 56, 32)) == 2
    assert _sketches(_nhwc_mean(1, 7, 7, 2048)) == 2  # a classifier's pool


@pytest.mark.parametrize(
    "case",
    ["nchw_mean", "batch_fills_the_cores", "pooling_window", "few_pixels", "matmul", "softmax"],
)
def test_other_reductions_keep_metaschedule_sketches_alone(case: str) -> None:
    if case == "nchw_mean":  # the pixels innermost: MetaSchedule's own rfactor reads them in order
        data = te.placeholder((1, 32, 56, 56), "float32", name="data")
        mod = _module(data, topi.sum(data, [2, 3], keepdims=True))
    elif case == "batch_fills_the_cores":
        mod = _nhwc_mean(4, 56, 56, 32)
    elif case == "pooling_window":  # 3x3 windows: parallel over the output pixels already
        data = te.placeholder((1, 56, 56, 32), "float32", name="data")
        mod = _module(data, topi.nn.pool2d(data, (3, 3), (2, 2), (1, 1), (0, 0, 0, 0), "max",
                                           layout="NHWC"))  # fmt: skip
    elif case == "few_pixels":
        mod = _nhwc_mean(1, 4, 4, 32)
    else:
        mod = get_workload(case, {}).mod
    assert _sketches(mod) == 1


def test_the_sketch_computes_the_mean_and_its_trace_is_admitted_and_replayed() -> None:
    workload: Workload = get_workload("global_avg_pool", {"H": 28, "W": 28, "C": 48})
    space = design_space(workload, host_target(), seed=0)
    pooled = [
        index
        for index, sch in enumerate(space.schedules)
        if any(inst.kind.name == "Parallel" for inst in sch.trace.insts)
    ]
    assert len(pooled) == 1  # MetaSchedule's sketches parallelize only in postprocessing

    sch = space.sample(lambda name, choices: pooled[0] if name == "space" else choices[-1])
    assert sch is not None
    text = trace_to_json(sch.trace)
    check_trace(text)
    replayed = apply_trace(workload.mod, text)
    tvm.ir.assert_structural_equal(replayed.mod, sch.mod)

    library = tvm.compile(sch.mod, target=to_tvm_target(host_target()))
    data = np.random.default_rng(0).uniform(-1, 1, (1, 28, 28, 48)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((1, 48), "float32"))
    library["main"](tvm.runtime.tensor(data), out)
    np.testing.assert_allclose(out.numpy(), data.mean(axis=(1, 2)), rtol=1e-5, atol=1e-6)


def test_metaschedule_sketches_of_other_programs_stay_as_they_were() -> None:
    """Neither rule of this project leaves a trace where it does not apply: a matmul's sketches
    are MetaSchedule's own, instruction for instruction (their sampled decisions apart)."""
    workload, target = get_workload("matmul", {}), host_target()
    ours = design_space(workload, target, seed=0).schedules
    context = TuneContext(
        mod=workload.mod,
        target=to_tvm_target(target),
        space_generator="post-order-apply",
        rand_state=_seed_state(0),
        num_threads=1,
    )
    theirs = context.generate_design_space()

    def instructions(sketches: list[Schedule]) -> list[list]:
        return [json.loads(trace_to_json(sch.trace))[0] for sch in sketches]

    assert instructions(ours) == instructions(theirs)
