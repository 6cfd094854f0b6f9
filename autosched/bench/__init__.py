"""Benchmarks run from the command line: ``autosched bench kernels`` (the workload zoo against its
peers and the roofline). The Typer sub-app lives in ``autosched.cli.bench``.
"""
