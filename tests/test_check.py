"""`autosched check` as a user runs it: the untuned program, a short tuning and the peer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import Cli, autosched

# Builds real programs or starts processes.
pytestmark = pytest.mark.slow


def test_check_passes_untuned_tuned_and_peer_for_int8_vnni(cli: Cli) -> None:
    result = cli(
        "check", "matmul_int8", "-p", "M=16", "-p", "N=32", "-p", "K=16", "-p", "layout=vnni",
        "--trials", "4", "--json",
    )  # fmt: skip
    assert result.code == 0, result.err
    stages = {row["stage"]: row for row in json.loads(result.out)}
    assert set(stages) == {"untuned", "tuned", "peer"}
    assert all(row["ok"] for row in stages.values()), stages
    assert "matches the reference" in stages["tuned"]["detail"]


def test_check_of_an_unknown_workload_is_a_one_line_error(cli: Cli) -> None:
    result = cli("check", "no_such_kernel")
    assert result.code == 2
    assert "unknown workload 'no_such_kernel'" in result.err


def test_a_convolutions_peer_is_pytorch_in_both_layouts_though_the_cli_keeps_torch_out(
    tmp_path: Path,
) -> None:
    # a process of its own: in this one, the tests have imported PyTorch already
    result = autosched(
        "check", "conv2d_nhwc", "-p", "H=8", "-p", "W=8", "-p", "CI=4", "-p", "CO=8",
        "--trials", "1", "--json", cwd=tmp_path,
    )  # fmt: skip
    peer = next(row for row in json.loads(result.stdout) if row["stage"] == "peer")
    assert peer["ok"], peer
    assert peer["detail"].startswith("torch ") and "NCHW and torch " in peer["detail"]
    assert "channels-last match the reference" in peer["detail"]
