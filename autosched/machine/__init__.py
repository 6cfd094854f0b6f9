"""Probes of the machine that measures: its CPU and theoretical peak (``cpu``), the FMA loop that
reaches it (``fmaloop``), the handoff of data between cores that reads where the host placed
them (``handoff``), and the measured roofline the two make (``roofline``, `autosched calibrate`).
"""
