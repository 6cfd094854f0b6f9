"""The README's quick start, run as a newcomer runs it: on a fresh clone of the committed HEAD,
its ``bash`` blocks read from the clone's README and run one after the other by bash in the
clone, with this test's virtual environment first on the PATH.

The ``pip install`` lines are left out: the environment is already set up, and an editable
install of the clone would repoint the installed package at it (CI runs the set-up commands for
real; here they are only parsed). What the test must change, it changes and no more: the model
file ``MODEL.onnx`` is a tiny MLP it writes; ``--trials`` is lowered, the matmul is 128 on a side
(its untuned program at 512 takes a third of a second a call, timed in every final) and `run
--time` takes three rounds (each sample waits a quarter second for the cores to settle); and the
service listens on a free port instead of 8000 (the address rewritten in the commands, and
``AUTOSCHED_PORT`` and ``AUTOSCHED_SERVER`` set for those that take the default).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import free_port
from model_files import write_mlp_onnx

ROOT = Path(__file__).resolve().parent.parent
TRIALS = 4
MATMUL_SIDE = 128
TIMING_ROUNDS = 3
DEFAULT_ADDRESS = "127.0.0.1:8000"
# Every command that fails, in the script or in a command substitution (`export X=$(...)`, whose
# status `export` would hide), ends the whole script with its status and the command named.
PRELUDE = """\
set -eEuo pipefail
trap 'echo "quick start: exit $? of: $BASH_COMMAND" >&2; kill -TERM $$' ERR
"""


def _bash_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", markdown, re.DOTALL | re.MULTILINE)


def _section(markdown: str, heading: str) -> str:
    """The text under the ``## heading`` of ``markdown``, up to the next heading of its level."""
    start = markdown.index(f"\n## {heading}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : None if end < 0 else end]


def quick_start_script(readme: str, port: int) -> str:
    """The quick start's commands as one bash script, with the test's substitutions."""
    lines = [PRELUDE]
    for block in _bash_blocks(_section(readme, "Quick start")):
        for line in block.splitlines():
            if line.startswith("pip install"):
                continue
            line = re.sub(r"--trials \d+", f"--trials {TRIALS}", line)
            line = re.sub(r"-p ([MNK])=\d+", rf"-p \1={MATMUL_SIDE}", line)
            line = line.replace("--time", f"--time --rounds {TIMING_ROUNDS}")
            lines.append(line.replace(DEFAULT_ADDRESS, f"127.0.0.1:{port}"))
    return "\n".join(lines) + "\n"


def _last_status(output: str, what: str) -> str:
    """The status ``what`` (a job or model job) was last shown with by `autosched status`."""
    shown = re.findall(r"^\s*status\s+(\w+)\s*$", output, re.MULTILINE)
    assert shown, f"no status of {what} in:\n{output}"
    return shown[-1]


def test_the_set_up_commands_parse_and_install_the_package() -> None:
    readme = (ROOT / "README.md").read_text()
    setup = _bash_blocks(readme[: readme.index("\n## ")])
    assert len(setup) == 2
    for block in setup:
        assert "pip install -e " in block
        parsed = subprocess.run(["bash", "-n", "-c", block], capture_output=True, text=True)
        assert parsed.returncode == 0, parsed.stderr


@pytest.mark.slow
def test_the_quick_start_runs_as_written_on_a_fresh_clone(tmp_path: Path) -> None:
    clone = tmp_path / "autosched"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    write_mlp_onnx(clone / "MODEL.onnx")
    port = free_port()
    script = tmp_path / "quickstart.sh"
    script.write_text(quick_start_script((clone / "README.md").read_text(), port))
    env = {key: value for key, value in os.environ.items() if not key.startswith("AUTOSCHED_")}
    if os.environ.get("AUTOSCHED_UNSAFE_NO_SANDBOX"):  # conftest's, where bubblewrap is missing
        env["AUTOSCHED_UNSAFE_NO_SANDBOX"] = "1"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["AUTOSCHED_PORT"] = str(port)
    env["AUTOSCHED_SERVER"] = f"http://127.0.0.1:{port}"
    output_file = tmp_path / "quickstart.out"
    with output_file.open("w") as output:  # a file, not a pipe: the server and worker keep it
        process = subprocess.Popen(
            ["bash", str(script)],
            cwd=clone,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        code = process.wait(timeout=900)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the server and the worker started with `&`
    out = output_file.read_text()
    assert code == 0, f"the quick start ended with {code}:\n{out}"
    assert (clone / "matmul.so").is_file() and (clone / "MODEL.so").is_file(), out
    model_view = re.search(r"^\s*model job\s+\d+", out, re.MULTILINE)  # its --watch's first
    assert model_view is not None, out
    assert _last_status(out[: model_view.start()], "the job") == "finished", out
    assert _last_status(out[model_view.start() :], "the model job") == "finished", out
