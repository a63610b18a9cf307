"""Keras 3's private symbols (``keras.src``), as the workers use them: ``mwms``: Keras 3's own ``fit`` /
``evaluate`` / ``predict`` under MultiWorkerMirroredStrategy; ``fit_guard``: the guard that turns the failures it
cannot fix into clear errors (and ``use_tf_keras``); ``model``: what ``distlib.fit`` reads of a model and a
distributed dataset; ``optimizer``: what a session's saved state reads of an optimizer; ``backup``: where
``BackupAndRestore`` keeps its files (a JAX run's processes resume from the same epoch). Registered in
``compat/internals.py`` under ``keras3/<module>``.
"""
