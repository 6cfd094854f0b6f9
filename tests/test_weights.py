"""Weights transformed ahead: marked stages of a constant weight leave the timed program, which
takes their result in place of the weight; a stage that also reads what is not constant stays, one
that reads another stage's result is refused."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from autosched.weights import WEIGHT_TRANSFORM, transform_weights_ahead

_MARK = {WEIGHT_TRANSFORM: 1}


def _module(data: te.Tensor, weight: te.Tensor, out: te.Tensor) -> tvm.IRModule:
    """``main(data, weight, out)`` with ``weight`` a constant weight."""
    func = te.create_prim_func([data, weight, out]).with_attr("layout_free_buffers", [1])
    return tvm.IRModule({"main": func})


def _inputs() -> tuple[te.Tensor, te.Tensor]:
    """The data and the weight of a program, eight floats each."""
    return te.placeholder((8,), name="data"), te.placeholder((8,), name="weight")


def _doubled(weight: te.Tensor) -> te.Tensor:
    """A stage marked as a weight transform: the weight doubled."""
    return te.compute((8,), lambda i: weight[i] * 2.0, name="doubled", attrs=_MARK)


def test_the_program_takes_the_transformed_weight_and_gives_the_same_result() -> None:
    data, weight = _inputs()
    doubled = _doubled(weight)
    out = te.compute((8,), lambda i: doubled[7 - i] + data[i], name="out")
    ahead = transform_weights_ahead(_module(data, weight, out))
    assert [param.name for param in ahead["main"].params] == ["data", "doubled", "out"]
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 8)).astype("float32")
    program = tvm.compile(ahead, target={"kind": "llvm"}).jit()
    tensors = [tvm.runtime.tensor(a) for a in (x, 2 * w, np.zeros(8, "float32"))]
    program["main"](*tensors)
    np.testing.assert_allclose(tensors[2].numpy(), 2 * w[::-1] + x, rtol=1e-6)


def test_a_marked_stage_that_reads_another_stage_is_refused() -> None:
    data, weight = _inputs()
    half = te.compute((8,), lambda i: data[i] * 0.5, name="half")
    scaled = te.compute((8,), lambda i: weight[i] * half[i], name="scaled", attrs=_MARK)
    out = te.compute((8,), lambda i: scaled[i] + 1.0, name="out")
    with pytest.raises(ValueError, match="reads more than weights"):
        transform_weights_ahead(_module(data, weight, out))


def test_a_weight_the_program_also_reads_as_given_is_refused() -> None:
    data, weight = _inputs()
    doubled = _doubled(weight)
    out = te.compute((8,), lambda i: doubled[i] + weight[i] + data[i], name="out")
    with pytest.raises(ValueError, match="one weight into one buffer"):
        transform_weights_ahead(_module(data, weight, out))


def test_a_transform_of_what_is_not_constant_stays_in_the_program() -> None:
    data, weight = _inputs()
    doubled = _doubled(weight)
    out = te.compute((8,), lambda i: doubled[i] + data[i], name="out")
    mod = tvm.IRModule({"main": te.create_prim_func([data, weight, out])})
    assert transform_weights_ahead(mod) is mod  # the weight is not declared constant
    scaled = te.compute((8,), lambda i: weight[i] * data[i], name="scaled", attrs=_MARK)
    out = te.compute((8,), lambda i: scaled[i] + 1.0, name="out")
    mod = _module(data, weight, out)
    assert transform_weights_ahead(mod) is mod  # the stage reads the data too
