"""The service's model trainer: retrains each target family's shared cost model as results arrive.

It runs beside the API and the engine, off the search's hot path: every ``interval_secs`` it looks
at each family in the log and trains a new version once enough new measurements came in (see
``autosched.costmodel.shared.retrain_if_grown``). Jobs that start afterwards start from it.
"""

from __future__ import annotations

import logging
import threading

from autosched.background import BackgroundLoop
from autosched.costmodel.shared import retrain_if_grown
from autosched.log import TuningLog
from autosched.log.costmodels import CostModelStore

logger = logging.getLogger(__name__)


class ModelTrainer(BackgroundLoop):
    """Keeps every family's shared cost model current; run it with `start`/`stop`."""

    name = "model-trainer"

    def __init__(self, log: TuningLog, *, interval_secs: float = 60.0) -> None:
        self._log = log
        self._interval_secs = interval_secs

    def step(self) -> list[str]:
        """Retrain the families that grew enough; returns them."""
        trained = []
        for family in CostModelStore(self._log).families():
            try:
                result = retrain_if_grown(self._log, family)
            except Exception:  # a failed training must not stop the service
                logger.exception("training the %s cost model failed", family)
                continue
            if result is not None:
                model = result.model
                logger.info(
                    "%s cost model version %d: %d measurements, %.1f s",
                    family,
                    model.version,
                    model.trained_on,
                    result.secs,
                )
                trained.append(family)
        return trained

    def run(self, stop: threading.Event) -> None:
        """Check every ``interval_secs`` until ``stop`` is set, waiting out database outages."""
        if not stop.wait(self._interval_secs):
            self.run_rounds(stop, self.step, self._interval_secs)
