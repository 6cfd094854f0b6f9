"""`autosched check` as a user runs it: the untuned program, a short tuning and the peer (PyTorch
where installed, though autosched's processes keep it out until a peer asks for it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from helpers import Cli

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


def test_a_check_times_no_final(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    # a check of correctness: its short tuning re-times no finalists, nor a slow untuned program
    from autosched import tuner

    def no_final(*_args: object) -> list:
        raise AssertionError("a check ran a final")

    monkeypatch.setattr(tuner, "check_in_rank_order", no_final)
    monkeypatch.setattr(tuner, "contenders", no_final)
    result = cli("check", "matmul", "-p", "M=16", "-p", "N=16", "-p", "K=16", "--trials", "2")
    assert result.code == 0, result.err


def test_check_of_an_unknown_workload_is_a_one_line_error(cli: Cli) -> None:
    result = cli("check", "no_such_kernel")
    assert result.code == 2
    assert "unknown workload 'no_such_kernel'" in result.err


def test_a_convolutions_peer_is_pytorch_in_both_layouts_where_torch_is_kept_out() -> None:
    # a process of its own, started as autosched's are: this one has imported PyTorch already
    program = (
        "from autosched.torch_guard import keep_torch_out\n"
        "keep_torch_out()\n"
        "from autosched.check import check_peer\n"
        "from autosched.workloads import get_workload\n"
        "params = {'H': 8, 'W': 8, 'CI': 4, 'CO': 8}\n"
        "print(check_peer(get_workload('conv2d_nhwc', params), seed=0).detail)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    torch = r"torch [0-9.]+ CPU"
    assert re.fullmatch(
        f"{torch}, NCHW and {torch}, channels-last match the reference\n", result.stdout
    )
