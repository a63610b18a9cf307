"""Processes nbworkers starts and may signal: whether a process is ours (``ownership``), the one place that
signals (``kill``), what a run root left behind (``strays``), a command tied to the kernel's life (``tied``), a
command run as a grandchild, out of reach of a parent that kills its children when it exits (``grandchild``).
Imports psutil and ``nbworkers.protocol`` only.
"""
