"""`python -m autosched` runs the command line."""

from autosched.cli.main import run

run()
