"""The client of a tuning server: ``http`` speaks its REST API (no SQL, no TVM), ``commands``
are the `autosched submit` and `autosched status` commands built on it."""
