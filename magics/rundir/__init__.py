"""The run directory under the run root: its layout, a fresh private directory per run, liveness read from the
state file, listings and stops for the REST API and ``%workers attach``, and the reaper of dead kernels' runs.
"""
