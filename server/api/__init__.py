"""The REST API: the FastAPI app (``app``), its dependencies and auth (``deps``), what requests
name made concrete (``resolve``) and the route groups (``routes``). Bodies are in
``autosched.protocol``.
"""
