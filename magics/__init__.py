"""The kernel side of nbworkers: ``%%worker``, ``%workers``, clusters, backends, the relay, the views.

Kept free of imports at package level: the worker host (``backends.host``) is a fresh interpreter that
imports this package and must start fast. Nothing here imports TensorFlow.
"""


def load_ipython_extension(ipython) -> None:
    from nbworkers.magics.notebook.magic import WorkerMagics
    from nbworkers.magics.settings import configure

    configure(ipython.config)
    ipython.register_magics(WorkerMagics)
    from nbworkers.magics.rundir.layout import UnsafeRunRoot, checked_run_root

    try:
        checked_run_root()  # another user's, writable by others, a symlink: %load_ext fails naming it and the fix
    except UnsafeRunRoot as error:
        from IPython.core.error import UsageError

        raise UsageError(str(error)) from None
    from nbworkers.magics.rundir.leftovers import scan_at_load

    scan_at_load()  # reap what kernels that died left behind (in the background)
    from nbworkers.magics.backends.zygotes import zygotes

    try:
        zygotes().prewarm()  # the zygote imports TensorFlow now, in its own process (settings: zygote_prewarm)
    except OSError as error:  # no zygote yet: the first run starts one (or spawns), as without prewarm
        import warnings

        warnings.warn(f"nbworkers: could not prewarm the zygote ({error}); the first %%worker run starts it. "
                      "Set NBWORKERS_ZYGOTE_PREWARM=0 to skip this.", stacklevel=2)
    from nbworkers.magics.backends import registry

    registry.prewarm()  # each backend's, in the background (Ray with RAY_ADDRESS: each node's zygote, ray/kind.py)
