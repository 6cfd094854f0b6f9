"""Measurement: building and timing candidates in isolated processes, and checking their results."""

from autosched.measure.config import MeasureConfig
from autosched.measure.gate import CorrectnessGate
from autosched.measure.local import LocalMeasurer, Measurer
from autosched.measure.replay import ReplayMeasurer

__all__ = ["CorrectnessGate", "LocalMeasurer", "MeasureConfig", "Measurer", "ReplayMeasurer"]
