"""The tuning service's central side, installed as ``autosched.server``: the REST API (``api``), the
search engine that drives submitted jobs (``engine``), the trainer of the shared cost models
(``trainer``), its settings, and the `autosched` commands that run and use it (``cli``).
"""
