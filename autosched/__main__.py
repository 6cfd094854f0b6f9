"""`python -m autosched` runs the command line."""

from autosched.cli import main

main()
