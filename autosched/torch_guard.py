"""PyTorch stays out of the processes that do not use it.

TVM's FFI imports PyTorch, when it is installed, as it is itself imported: about 3 s more for every
process that imports TVM on a 2-core machine (`python -c "import tvm"`: 1.0 s without, 3.9 s with
torch 2.14 installed, on an Intel Xeon), paid again by every command, server, worker and fork server
of measuring processes. A process entry point calls `keep_torch_out` first; code that does use
PyTorch (loading a `.pt2` model, checking a compiled model against it, a PyTorch peer) imports it
through `import_torch`.

The guard refuses the import from a finder at the head of ``sys.meta_path`` and leaves
``sys.modules`` alone: libraries that look for PyTorch there (scipy's array-API layer) see it
absent, not as a ``None`` they would use.
"""

from __future__ import annotations

import importlib
import importlib.abc
import os
import sys
from collections.abc import Mapping, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType


class _TorchRefused(importlib.abc.MetaPathFinder):
    """A finder that makes `import torch` (and its submodules) fail as if it were not installed."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == "torch" or fullname.startswith("torch."):
            raise ModuleNotFoundError(
                "PyTorch is kept out of this process (autosched.torch_guard)", name=fullname
            )
        return None


_REFUSED = _TorchRefused()


def keep_torch_out() -> None:
    """Make `import torch` fail in this process until `import_torch` lets it in; a no-op where
    PyTorch is loaded already."""
    if "torch" not in sys.modules and _REFUSED not in sys.meta_path:
        sys.meta_path.insert(0, _REFUSED)


def torch_free_environment(site: Path, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for processes that other code starts (stock MetaSchedule's builders and runners,
    which import TVM and so PyTorch): ``site`` first on ``PYTHONPATH``, with a ``sitecustomize``
    written there that keeps PyTorch out of every Python process started with it."""
    (site / "sitecustomize.py").write_text(
        "from autosched.torch_guard import keep_torch_out\n\nkeep_torch_out()\n"
    )
    path = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return {**env, "PYTHONPATH": path}


def import_torch() -> ModuleType:
    """PyTorch, imported even where `keep_torch_out` kept it out.

    Raises:
        ImportError: PyTorch is not installed.
    """
    if _REFUSED in sys.meta_path:
        sys.meta_path.remove(_REFUSED)
    return importlib.import_module("torch")
