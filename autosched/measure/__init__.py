"""Measurement: building and timing candidates in isolated processes, and checking their results.

Nothing here reads or writes the tuning log; a recorded log replayed as a measurer lives in
``autosched.replay``.
"""

from autosched.measure.config import MeasureConfig
from autosched.measure.gate import CorrectnessGate
from autosched.measure.local import LocalMeasurer, Measurer, Retimer

__all__ = ["CorrectnessGate", "LocalMeasurer", "MeasureConfig", "Measurer", "Retimer"]
