"""Charts of the benchmarks: matplotlib, imported only when a chart is asked for."""

from __future__ import annotations

from types import ModuleType

from autosched.errors import UserError


def pyplot() -> ModuleType:
    """matplotlib's pyplot on the file-only Agg backend.

    Raises:
        UserError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        raise UserError("--plot needs matplotlib: pip install 'autosched[zoo]'") from None
    return plt
