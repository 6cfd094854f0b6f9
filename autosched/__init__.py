"""autosched: an auto-scheduler and autotuning service for tensor programs."""

__version__ = "0.1.0"
