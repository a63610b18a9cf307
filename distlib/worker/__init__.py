"""The worker process itself: its entry point (``bootstrap``), the zygote that forks it, the hooks around the
cell (``startup``), sessions, roles, status reports, preemption, and the collective start-up.
"""
