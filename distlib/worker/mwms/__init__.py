"""How MultiWorkerMirroredStrategy starts across the workers, around its private setup (``compat/mwms_patch.py``,
``compat/collectives_at_start.py``): ``collective_startup``: collectives configured when the first op starts
TensorFlow (the tutorials' "dataset first, strategy after" order); ``leader_wait``: wait for the coordination leader's
server before connecting to it; ``strategy_setup``: "waiting" / "running" around the setup and the device check;
``worker_facts``: small facts exchanged through the coordination service (the device check, shared folders,
preemption). Installed by ``worker/startup.py`` (or ``distlib.strategy()``) before the cell.
"""
