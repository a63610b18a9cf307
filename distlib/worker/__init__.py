"""The worker process itself: its entry point (``bootstrap``), the zygote that forks it, the hooks around the
cell (``startup``), sessions, roles, status reports, a stop (``stop_signal``, ``step_points``), preemption, and
``mwms/``: how MultiWorkerMirroredStrategy starts across the workers (early collectives, the leader wait, the setup's
status reports and device check).
"""
