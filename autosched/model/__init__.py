"""Whole models: imported (``load``), split into tuning tasks (``tasks``), their budget split by
the task scheduler (``scheduler``), tuned (``tuning``), compiled and checked (``compile``).

This module itself imports nothing heavy, so the command line can tell a model file from a
workload name without loading TVM.
"""

MODEL_SUFFIXES = (".onnx", ".pt2", ".py")

ROUND_TRIALS = 64
"""Trials of a task's round when a model is tuned, unless asked otherwise: each round sets its
search up anew (design space, cost model, population), so rounds as long as Ansor's and
MetaSchedule's keep that set-up well below the time spent measuring."""


def is_model_file(argument: str) -> bool:
    """Whether a command's argument names a model file rather than a built-in workload."""
    return argument.endswith(MODEL_SUFFIXES)


SERVICE_REFUSALS = {
    ".py": "a Relax model in TVMScript is not accepted over the network (TVM's parser evaluates "
    "it as Python); tune it on your machine with `autosched tune FILE.py`",
    ".pt2": "a PyTorch .pt2 file is not accepted over the network (torch.export.load unpickles "
    "it, which can run any code); export the model to ONNX, or tune it on your machine with "
    "`autosched tune FILE.pt2`",
}
"""Model files the tuning service refuses, by suffix, and why: it takes ONNX files, which are
data; the command line takes all three on the machine of whoever runs it."""
