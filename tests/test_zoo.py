"""The workload zoo: each definition against its numpy reference on inputs that reach corners the
default random inputs do not, presets, peers, and bad parameters."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from test_workloads import SMALL, assert_matches_reference, run_unscheduled

from autosched.check import check_peer
from autosched.errors import UserError
from autosched.workload import Workload, random_inputs
from autosched.workloads import get_workload, workload_specs
from autosched.workloads.nn import MOBILENET_V2_DEPTHWISE, RESNET50_LAYERS
from autosched.workloads.peers import has_peer


def test_every_workload_has_a_peer_that_agrees_with_its_reference() -> None:
    for spec in workload_specs():
        assert has_peer(spec.name), f"{spec.name} has no peer"
        result = check_peer(get_workload(spec.name, SMALL[spec.name]), seed=5)
        assert result.ok is not False, result.detail


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("dense_bias_relu", {"M": 9, "N": 7, "K": 300, "dtype": "float16"}),
        ("conv2d_nchw", {"N": 1, "H": 6, "W": 5, "CI": 4, "CO": 3, "KH": 1, "padding": 0}),
        ("depthwise_conv2d", {"H": 9, "W": 9, "C": 5, "KH": 5, "KW": 5, "padding": 2}),
        ("conv1d_glu", {"L": 9, "C": 6, "KW": 5, "dtype": "float64"}),
        ("layernorm", {"rows": 3, "cols": 100, "dtype": "float16"}),
        ("attention_luong", {"B": 1, "T": 4, "S": 9, "D": 6, "dtype": "float16"}),
        ("attention_chunked", {"B": 2, "L": 12, "D": 4, "chunk": 3, "dtype": "float64"}),
        ("attention_naive", {"B": 1, "L": 12, "D": 4, "dtype": "float64"}),
        ("ragged_batch_matmul", {"lengths": "7", "K": 3, "N": 2}),
        ("matmul_int8", {"M": 4, "N": 5, "K": 7, "layout": "plain"}),
    ],
)
def test_definition_matches_reference(name: str, params: dict[str, object]) -> None:
    workload = get_workload(name, params)
    inputs = random_inputs(workload, seed=3)[: -workload.num_outputs]
    assert_matches_reference(workload, inputs)


def _run(workload: Workload, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return run_unscheduled(workload, inputs)


def test_int4_weights_use_both_nibbles_zeros_and_scales() -> None:
    workload = get_workload("matmul_int4_weight", {"M": 2, "N": 3, "K": 8, "group": 4})
    rng = np.random.default_rng(0)
    inputs = [
        rng.uniform(-1, 1, (2, 8)).astype(np.float32),
        rng.integers(0, 256, (3, 4), dtype=np.uint8),  # every bit pattern of both nibbles
        rng.uniform(0.5, 2, (3, 2)).astype(np.float32),
        rng.integers(0, 16, (3, 2), dtype=np.uint8),
    ]
    (got,) = _run(workload, inputs)
    low, high = inputs[1] & 0xF, inputs[1] >> 4
    q = np.stack([low, high], axis=-1).reshape(3, 8).astype(np.float64)
    w = (q - np.repeat(inputs[3], 4, axis=1)) * np.repeat(inputs[2], 4, axis=1)
    np.testing.assert_allclose(got, inputs[0] @ w.T, rtol=1e-5, atol=1e-5)


def test_lut_gemv_matches_a_dense_product_of_two_bit_weights() -> None:
    workload = get_workload("gemv_lut_lowbit", {"N": 4, "K": 16})
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, 16).astype(np.float32)
    q = rng.integers(0, 4, (4, 16))  # the 2-bit weights
    groups = q.reshape(4, 4, 4)  # (n, group, i)
    index = [(((groups >> b) & 1) << np.arange(4)).sum(axis=-1) for b in range(2)]  # (n, group)
    planes = np.stack([(idx[:, 0::2] | (idx[:, 1::2] << 4)) for idx in index]).astype(np.uint8)
    scale = rng.uniform(0.5, 2, 4).astype(np.float32)
    (got,) = _run(workload, [x, planes, scale])
    np.testing.assert_allclose(got, (scale[:, None] * (q - 2)) @ x, rtol=1e-5, atol=1e-5)


def test_mxfp8_is_bit_exact_over_many_magnitudes_ties_and_zero_blocks() -> None:
    import ml_dtypes

    workload = get_workload("mxfp8_quantize", {"rows": 32, "cols": 128})
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((32, 128)) * np.exp2(rng.integers(-40, 40, (32, 1)))).astype(
        np.float32
    )
    x[0, :32] = 0  # an all-zero block
    x[1, :32] = 448 * 2.0**-4  # amax exactly at a power-of-two multiple of 448
    x[2, :32] = np.arange(32) * 2.0**-9 * 448 / 7  # small values: FP8 subnormals after scaling
    elements, scales = _run(workload, [x])
    expected_elements, expected_scales = workload.reference([x])
    np.testing.assert_array_equal(scales, expected_scales)
    np.testing.assert_array_equal(elements, expected_elements)
    assert scales[0, 0] == 0 and scales[1, 0] == 127 - 4
    decoded = elements.view(ml_dtypes.float8_e4m3fn).astype(np.float32).reshape(32, 4, 32)
    restored = decoded * np.exp2(scales.astype(np.float32) - 127)[..., None]
    np.testing.assert_allclose(restored.reshape(32, 128), x, rtol=2**-3, atol=1e-30)


def test_presets_fill_parameters_and_give_the_same_workload() -> None:
    preset = get_workload("conv2d_nhwc", {"preset": "resnet50_res4_3x3"})
    spelled = get_workload("conv2d_nhwc", RESNET50_LAYERS["resnet50_res4_3x3"])
    assert preset.key == spelled.key and preset.params == spelled.params
    overridden = get_workload("conv2d_nchw", {"preset": "resnet50_res4_3x3", "N": 2})
    assert overridden.params["N"] == 2 and overridden.params["CI"] == 256
    for name in MOBILENET_V2_DEPTHWISE:
        assert get_workload("depthwise_conv2d", {"preset": name}).flops
    with pytest.raises(UserError, match="unknown preset 'resnet18' of conv2d_nhwc; presets: "):
        get_workload("conv2d_nhwc", {"preset": "resnet18"})


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("attention_chunked", {"L": 100, "chunk": 64}, "chunk 64 does not divide L=100"),
        ("matmul_int4_weight", {"K": 100, "group": 64}, "group 64 does not divide K=100"),
        ("matmul_int8", {"N": 20, "layout": "vnni"}, "lane count 16 does not divide N=20"),
        ("mxfp8_quantize", {"cols": 40}, "block size 32 does not divide cols=40"),
        ("conv1d_glu", {"KW": 4}, "kernel width KW must be odd"),
        ("ragged_batch_matmul", {"lengths": "4,x"}, "lengths must be like 512,128,64"),
        ("ragged_batch_matmul", {"lengths": "4,0"}, "1 to 64 positive integers"),
        ("blur3x3", {"H": 2}, "at least 3x3, got 2x2048"),
        ("dropout_philox", {"drop_percent": 100}, "must be at most 99"),
    ],
)
def test_bad_zoo_parameters_are_one_line_user_errors(
    name: str, params: dict[str, object], message: str
) -> None:
    with pytest.raises(UserError, match=message) as caught:
        get_workload(name, params)
    assert "\n" not in str(caught.value)


def test_vnni_layout_tensorises_with_a_working_intrinsic() -> None:
    """MetaSchedule's design space for the vnni layout uses the VNNI dot product, and it builds."""
    from tvm.s_tir.meta_schedule import TuneContext

    from autosched.intrinsics import use_tensor_intrinsics
    from autosched.target import host_target, to_tvm_target

    target = host_target()
    if not tvm.target.codegen.target_has_features("avx512vnni", to_tvm_target(target)):
        pytest.skip("this CPU has no AVX-512 VNNI")
    workload = get_workload("matmul_int8", {"M": 16, "N": 32, "K": 16, "layout": "vnni"})
    use_tensor_intrinsics(target)
    context = TuneContext(
        mod=workload.mod, target=to_tvm_target(target), space_generator="post-order-apply"
    )
    space = context.generate_design_space()[0]
    assert "dot_16x4_vnni" in str(space.trace)
    module = tvm.compile(space.mod, target=to_tvm_target(target)).jit()
    inputs = random_inputs(workload, seed=0)
    tensors = [tvm.runtime.tensor(array) for array in inputs]
    module["main"](*tensors)
    np.testing.assert_array_equal(tensors[-1].numpy(), workload.reference(inputs[:2])[0])


def test_every_workload_has_a_design_space_its_postprocessors_accept() -> None:
    """The search has something to measure beyond the untuned program: a schedule sampled from
    each workload's design space passes the space's postprocessors (a block that reads what it
    writes cannot be parallelised, and its whole space was refused)."""
    from autosched.search.space import design_space
    from autosched.target import host_target

    for spec in workload_specs():
        space = design_space(get_workload(spec.name, SMALL[spec.name]), host_target(), seed=0)
        pick = np.random.default_rng(0).choice
        samples = [space.sample(lambda _, choices, pick=pick: pick(choices)) for _ in range(8)]
        assert any(sample is not None for sample in samples), spec.name
