"""Processes nbworkers starts and may signal: whether a process is ours (``ownership``), the one place that
signals (``kill``), what a run root left behind (``strays``), a command tied to the kernel's life (``tied``).
Imports psutil and ``nbworkers.protocol`` only.
"""
