"""PyTorch stays out of the processes that do not use it.

TVM's FFI imports PyTorch, when it is installed, as it is itself imported: about 4 s more for every
process that imports TVM on a 2-core machine (`python -c "import tvm"`: 2.2 s without, 6.6 s with
torch 2.13 installed), paid again by every measuring child, server and worker. A process entry
point calls `keep_torch_out` first; code that does use PyTorch (loading a `.pt2` model, checking a
compiled model against it) imports it through `import_torch`.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType


def keep_torch_out() -> None:
    """Make `import torch` fail in this process until `import_torch` lets it in."""
    sys.modules.setdefault("torch", None)  # type: ignore[arg-type]


def import_torch() -> ModuleType:
    """PyTorch, imported even where `keep_torch_out` kept it out.

    Raises:
        ImportError: PyTorch is not installed.
    """
    if "torch" in sys.modules and sys.modules["torch"] is None:
        del sys.modules["torch"]
    return importlib.import_module("torch")
