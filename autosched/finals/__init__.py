"""The final of a job: its fastest candidates and the untuned program timed again side by side,
in rounds, on one device. ``ranking`` ranks the entrants by their re-timed medians with an
interval each (ties, the winner); ``checks`` checks the finalists' outputs in their ranking until
one passes; ``timings`` keeps every re-timed sample in the log; ``retiming`` plans a service job's
final and leases it to one worker, which reports it whole.
"""
