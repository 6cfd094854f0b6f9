"""Search: the design space of a workload, the strategies that pick which candidates to measure
next (``registry`` names them), and the search session that runs one job's search.

Import the modules themselves: this package imports nothing, so that the list of strategy names
(``autosched.search.registry``) costs no TVM import.
"""
