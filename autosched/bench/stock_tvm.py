"""Entry point of the stock TVM contender of `autosched bench models`:
`python -m autosched.bench.stock_tvm MODULE_JSON TRIALS TARGET_JSON LIBRARY`.

Reads a model's Relax module (``tvm.ir.save_json``), tunes and rewrites it with TVM's own
``relax.pipeline.static_shape_tuning_pipeline`` (MetaSchedule with its local builder and runner,
CPU weight prepacking on, its logs and database beside the module), builds it with
``tvm.compile``, writes the library and, as its last line of output, the wall seconds of tuning
and building. It runs in a process of its own, with PyTorch kept out before TVM is imported, as
autosched's measuring processes keep it out.
"""

import json
import sys
import time
from pathlib import Path

from autosched.torch_guard import keep_torch_out

keep_torch_out()

import tvm  # noqa: E402
from tvm import relax  # noqa: E402

from autosched.target import to_tvm_target  # noqa: E402


def tune_and_build(module_json: Path, trials: int, target: dict, library: Path) -> float:
    """Tune the module with ``trials`` trials in all, build it into ``library``; the seconds
    that took."""
    mod = tvm.ir.load_json(module_json.read_text())
    tvm_target = to_tvm_target(target)
    started = time.perf_counter()
    pipeline = relax.pipeline.static_shape_tuning_pipeline(
        total_trials=trials,
        target=tvm_target,
        work_dir=str(module_json.parent / "metaschedule"),
        cpu_weight_prepack=True,
    )
    executable = tvm.compile(pipeline(mod), target=tvm_target)
    wall_secs = time.perf_counter() - started
    executable.export_library(str(library))
    return wall_secs


if __name__ == "__main__":
    module_path, trial_count, target_json, library_path = sys.argv[1:]
    seconds = tune_and_build(
        Path(module_path), int(trial_count), json.loads(target_json), Path(library_path)
    )
    print(json.dumps({"wall_secs": seconds}))
