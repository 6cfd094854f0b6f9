"""Target parsing, host detection, canonical forms and keys, and device fingerprints."""

from __future__ import annotations

import json
import re

import psutil
import pytest
import tvm
from tvm.target import codegen

from autosched.errors import UserError
from autosched.machine.cpu import cpu_flags
from autosched.target import (
    canonical_target,
    device_fingerprint,
    host_target,
    parse_target,
    target_key,
    target_kind,
    to_tvm_target,
    withheld_features,
)

HAS_CUDA_GPU = tvm.cuda(0).exist


def test_host_target_describes_this_cpu() -> None:
    host = host_target()
    withheld = host.pop("mattr", [])
    assert host == {
        "kind": "llvm",
        "mtriple": codegen.llvm_get_system_triple(),
        "mcpu": codegen.llvm_get_system_cpu(),
        "num-cores": psutil.cpu_count(logical=False),
    }
    assert host["mcpu"] and host["mtriple"]
    assert to_tvm_target(host).kind.name == "llvm"
    # every vector extension the target may use is one this machine reports
    flags = cpu_flags()
    if flags is not None:
        features = codegen.llvm_get_cpu_features(to_tvm_target({**host, "mattr": withheld}))
        spelled = {flag.replace("_", "") for flag in flags}
        vector = [str(f) for f in features if str(f).startswith(("avx", "amx"))]
        assert all(f.replace("-", "") in spelled for f in vector), (vector, withheld)


ZEN4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4"}
ZEN4_AVX2_FLAGS = frozenset(
    ["sse", "sse2", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "vaes"]
)
ZEN4_FLAGS = ZEN4_AVX2_FLAGS | {
    "avx512f", "avx512dq", "avx512ifma", "avx512cd", "avx512bw", "avx512vl", "avx512_bf16",
    "avx512vbmi", "avx512_vbmi2", "avx512_vnni", "avx512_bitalg", "avx512_vpopcntdq",
}  # fmt: skip


def test_vector_extensions_a_virtual_machine_withholds_are_turned_off() -> None:
    # a Zen 4 guest whose hypervisor hides AVX-512: LLVM would emit it from the CPU name alone
    assert withheld_features(ZEN4, ZEN4_AVX2_FLAGS) == ["avx512f"]
    features = codegen.llvm_get_cpu_features(to_tvm_target({**ZEN4, "mattr": ["-avx512f"]}))
    assert "avx2" in features and not any(str(f).startswith("avx512") for f in features)
    # only the BF16 dot products withheld: only they are turned off
    assert withheld_features(ZEN4, ZEN4_FLAGS - {"avx512_bf16"}) == ["avx512bf16"]
    assert withheld_features(ZEN4, ZEN4_FLAGS) == []
    assert withheld_features(ZEN4, None) == []
    assert withheld_features({**ZEN4, "mattr": ["-avx512f"]}, ZEN4_AVX2_FLAGS) == []


@pytest.mark.parametrize("text", [None, "", "llvm", "host", "  LLVM "])
def test_host_words_parse_to_the_host_target(text: str | None) -> None:
    assert parse_target(text) == host_target()


def test_json_object_is_validated_and_kept_as_given() -> None:
    text = '{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 4}'
    assert parse_target(text) == {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 4}
    assert parse_target('{"kind": "cuda", "arch": "sm_80"}') == {"kind": "cuda", "arch": "sm_80"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu", r"unknown target 'gpu'; use 'llvm' \(or 'host'\), 'cuda', or a JSON object"),
        ("[1, 2]", r"unknown target '\[1, 2\]'"),
        ('{"kind": "llvm",', r"target is not valid JSON"),
        ('{"kind": "quantum"}', r"invalid target: .*quantum"),
        ('{"kind": "llvm", "mcpu": 5}', r"invalid target: .*mcpu"),
        ('{"kind": "llvm", "colour": "red"}', r"invalid target: .*colour"),
        ('{"kind": "llvm", "mcpu": "skylake-avx51"}', r"LLVM knows no CPU 'skylake-avx51'"),
        ('{"kind": "llvm", "cl-opt": ["-print-after-all"]}', r"'cl-opt' is not an attribute"),
        ('{"kind": "llvm", "host": "llvm -cl-opt=-print-after-all"}', r"a host must be a target"),
        ('{"kind": "cuda", "host": {"kind": "llvm", "cl-opt": []}}', r"'cl-opt' is not an"),
        ('{"kind": "cuda", "host": {"kind": "llvm", "host": {}}}', r"'host' is not an attribute"),
        ('{"kind": "llvm", "mattr": ["+avx2,+x -print-after-all"]}', r"mattr may not be"),
        ('{"kind": "cuda", "tag": "nvidia/nvidia-a100"}', r"a tag names a target of TVM's"),
    ],
)
def test_bad_targets_are_one_line_user_errors(text: str, message: str) -> None:
    with pytest.raises(UserError, match=message) as caught:
        parse_target(text)
    assert "\n" not in str(caught.value)


def test_the_targets_autosched_makes_pass_as_a_clients_in_their_canonical_form() -> None:
    cuda = {"kind": "cuda", "arch": "sm_80", "max_threads_per_block": 1024, "host": host_target()}
    for target in (host_target(), canonical_target(host_target()), canonical_target(cuda)):
        assert parse_target(json.dumps(target)) == target


def test_the_api_refuses_llvm_options_in_a_job_or_a_workers_target(tmp_path) -> None:
    """LLVM's cl-opt options reached the server's own compile: -print-after-all wrote 44 MB of
    log from one request."""
    from fastapi.testclient import TestClient

    from autosched.server.api.app import create_app
    from autosched.server.settings import Settings

    target = {**host_target(), "cl-opt": ["-print-after-all"]}
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'api.db'}", no_auth=True)
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as http:
        job = {"workload": {"name": "matmul"}, "target": target}
        worker = {"name": "w", "target": target, "fingerprint": {}}
        for path, body in [("/api/v1/jobs", job), ("/api/v1/workers", worker)]:
            refused = http.post(path, json=body)
            assert refused.status_code == 422, refused.text
            detail = refused.json()["detail"]
            assert "'cl-opt' is not an attribute" in detail and "\n" not in detail
        assert http.get("/api/v1/jobs").json()["count"] == 0


def test_cuda_is_detected_from_the_local_gpu() -> None:
    if not HAS_CUDA_GPU:
        with pytest.raises(UserError, match=r"^no CUDA GPU found$"):
            parse_target("cuda")
        return
    target = parse_target("cuda")
    assert target["kind"] == "cuda"
    assert re.fullmatch(r"sm_\d+", target["arch"])
    assert target_kind(target) == "cuda"


def test_canonical_target_is_complete_json_and_idempotent() -> None:
    canonical = canonical_target({"mcpu": "skylake-avx512", "kind": "llvm"})
    assert canonical["kind"] == "llvm" and canonical["keys"] == ["cpu"]
    assert list(canonical) == sorted(canonical)
    assert json.loads(json.dumps(canonical)) == canonical
    assert canonical_target(canonical) == canonical
    nested = canonical_target({"kind": "cuda", "arch": "sm_80", "host": {"kind": "llvm"}})
    assert nested["host"]["kind"] == "llvm" and nested["keys"] == ["cuda", "gpu"]
    assert canonical_target(nested) == nested


def test_equivalent_targets_share_a_key_and_different_ones_do_not() -> None:
    plain = {"kind": "llvm", "mcpu": "skylake-avx512"}
    spelled_out = {"keys": ["cpu"], "mcpu": "skylake-avx512", "kind": "llvm", "tag": ""}
    key = target_key(plain)
    assert re.fullmatch(r"[0-9a-f]{32}", key)
    assert target_key(plain) == key == target_key(spelled_out)
    assert target_key(canonical_target(plain)) == key
    assert target_key({"kind": "llvm", "mcpu": "znver4"}) != key
    assert target_key({**plain, "num-cores": 8}) != key


def test_target_kind_and_tvm_target() -> None:
    assert target_kind(host_target()) == "llvm"
    assert target_kind({"kind": "cuda", "arch": "sm_90"}) == "cuda"
    assert isinstance(to_tvm_target({"kind": "llvm"}), tvm.target.Target)
    with pytest.raises(UserError, match="invalid target"):
        to_tvm_target({"mcpu": "skylake"})


def test_cpu_fingerprint_names_the_machine() -> None:
    fingerprint = device_fingerprint(host_target())
    assert fingerprint["kind"] == "llvm"
    assert isinstance(fingerprint["cpu_model"], str) and fingerprint["cpu_model"]
    assert fingerprint["logical_cores"] >= fingerprint["physical_cores"] >= 1
    assert fingerprint["physical_cores"] == psutil.cpu_count(logical=False)
    assert fingerprint["tvm_version"] == tvm.__version__
    assert fingerprint["hostname"] and fingerprint["platform"]
    assert json.loads(json.dumps(fingerprint)) == fingerprint


def test_cuda_fingerprint_names_the_gpu() -> None:
    target = {"kind": "cuda", "arch": "sm_80"}
    if not HAS_CUDA_GPU:
        with pytest.raises(UserError, match="no CUDA GPU found"):
            device_fingerprint(target)
        return
    fingerprint = device_fingerprint(target)
    assert fingerprint["gpu_name"] and fingerprint["compute_version"]
    assert fingerprint["tvm_version"] == tvm.__version__
