"""Whole models: imported (``load``), split into tuning tasks (``tasks``), their budget split by
the task scheduler (``scheduler``), tuned (``tuning``), compiled and checked (``compile``).

This module itself imports nothing heavy, so the command line can tell a model file from a
workload name without loading TVM.
"""

MODEL_SUFFIXES = (".onnx", ".pt2", ".py")


def is_model_file(argument: str) -> bool:
    """Whether a command's argument names a model file rather than a built-in workload."""
    return argument.endswith(MODEL_SUFFIXES)
