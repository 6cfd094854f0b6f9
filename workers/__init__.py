"""Worker daemons, installed as ``autosched.workers``: pull candidates from the tuning service,
measure them on this machine, report back (``daemon``); `autosched worker` runs one (``cli``).
"""
