"""JAX's private symbols (``jax._src``), as the workers use them: ``backends``: has a backend started (a zygote's
fork guard), the coordination service's key-value store, leaving without JAX's distributed shutdown;
``compile_cache``: the persistent compilation cache, one key for every process on CPU. Registered in
``compat/internals.py`` under ``jax/<module>``. (Inside, ``import jax`` is JAX itself: imports are absolute.)
"""
