"""nbworkers: interactive multi-worker TensorFlow training from a Jupyter notebook cell.

``%load_ext nbworkers``, then ``%%worker -n 2`` on a cell runs it on two worker processes with their own
``TF_CONFIG``. The kernel never imports TensorFlow.

Every process of a run imports this package (``nbworkers.host...``, ``nbworkers.distlib...`` are below it), so the
functions here import the kernel side when they are called, not at the top: a worker host or a worker never loads
the magics, IPython or the widget.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    """``nbworkers.__version__`` (from the package metadata) and ``nbworkers.RunFailed`` (what a waited-for failed
    run raises), both looked up on first use: a worker that never asks imports neither."""
    if name == "__version__":
        from nbworkers.version import installed_version

        return installed_version()
    if name == "RunFailed":
        from nbworkers.magics.errors import RunFailed

        return RunFailed
    raise AttributeError(f"module 'nbworkers' has no attribute {name!r}")


def load_ipython_extension(ipython) -> None:
    from nbworkers.magics import load_ipython_extension as load

    load(ipython)


def get_cluster(name: str):
    """The cluster handle of that name started by this kernel, or a detached run's (``%%worker --detach``) started
    by any kernel: a live handle (``.snapshot() .stop() .restart() .wait() .logs()``) read from its run directory."""
    from nbworkers.magics.notebook import registry
    from nbworkers.magics.notebook.remote.detach import detached_run

    try:
        return registry.get(name)
    except KeyError:
        cluster = detached_run(name)
        if cluster is None:
            raise
        return cluster


def session(name: str):
    """The interactive session of that name (``%%worker -n 2 --session NAME``): ``.pull(expression, worker=0)``,
    ``.stop()``, ``.interrupt()``, ``.logs()``, ``.wait()``, ``.cells``."""
    from nbworkers.magics.notebook import registry
    from nbworkers.magics.notebook.remote.detached_session import DetachedSession, detached_session
    from nbworkers.magics.sessions.session import Session

    cluster: Any
    try:
        cluster = registry.get(name)
    except KeyError:
        cluster = detached_session(name)  # a detached session (--detach --session NAME): any kernel's
        if cluster is None:
            raise
    if not isinstance(cluster, (Session, DetachedSession)):
        raise KeyError(f"{name!r} is a plain %%worker run, not a session: start one with %%worker -n 2 --session NAME")
    return cluster


def clusters() -> list:
    from nbworkers.magics.notebook import registry

    return registry.all_clusters()


def settings():
    """The kernel side's tunables (timeouts, run directory, ...): ``nbworkers.settings().stop_grace = 10``."""
    from nbworkers.magics.settings import settings as current

    return current()


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """The prebuilt JupyterLab / Notebook 7 sidebar (``nbworkers/labextension``, built from ``labextension/``)."""
    return [{"src": "labextension", "dest": "nbworkers"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The Jupyter server extension (REST API over clusters), enabled by jupyter-config/.../nbworkers.json."""
    return [{"module": "nbworkers"}]


def _load_jupyter_server_extension(serverapp) -> None:
    from nbworkers.serverext import load

    load(serverapp)
