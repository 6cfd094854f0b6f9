"""PyTorch kept out of a process: TVM loads without it, libraries that look for it in
``sys.modules`` see it absent, and code that needs it still gets it; and out of the processes
other code starts, through their environment."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autosched.torch_guard import torch_free_environment

pytestmark = pytest.mark.slow  # a fresh interpreter that loads TVM, scipy and PyTorch


def test_torch_stays_out_through_tvm_and_scipy_until_it_is_asked_for() -> None:
    program = textwrap.dedent(
        """
        import sys
        from autosched.torch_guard import import_torch, keep_torch_out
        keep_torch_out()
        import numpy as np
        import tvm
        assert "torch" not in sys.modules, "TVM brought PyTorch in"
        try:
            import torch
        except ImportError as error:
            print("refused:", error)
        from scipy import signal  # its array-API layer looks torch up in sys.modules
        print("scipy:", signal.correlate(np.ones(4), np.ones(2), mode="valid").tolist())
        torch = import_torch()
        print("let in:", torch.ones(2).sum().item())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "refused: PyTorch is kept out of this process (autosched.torch_guard)",
        "scipy: [2.0, 2.0, 2.0]",
        "let in: 2.0",
    ]


def test_a_process_started_with_the_torch_free_environment_loads_tvm_without_torch(
    tmp_path: Path,
) -> None:
    # as stock MetaSchedule starts its builders: a plain interpreter that imports TVM
    env = torch_free_environment(tmp_path, {**os.environ, "PYTHONPATH": "elsewhere"})
    assert env["PYTHONPATH"] == os.pathsep.join([str(tmp_path), "elsewhere"])
    program = textwrap.dedent(
        """
        import sys
        import tvm
        print("torch" in sys.modules)
        try:
            import torch
        except ImportError as error:
            print("refused:", error)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "False",
        "refused: PyTorch is kept out of this process (autosched.torch_guard)",
    ]
