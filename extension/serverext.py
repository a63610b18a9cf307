"""The Jupyter server extension: an authenticated REST API over the clusters under the run root.

    GET    /nbworkers/api/clusters                          every cluster: name, kernel, backend, workers,
                                                            status (checked: a dead kernel's run is "lost"),
                                                            started, restarts, ...
    GET    /nbworkers/api/clusters/<name>                   per-worker status and latest metrics
    GET    /nbworkers/api/clusters/<name>/logs/<worker>?tail=N
                                                            a worker's log (text/plain) as the user reads
                                                            it: nbworkers' bookkeeping lines and TensorFlow's
                                                            start-up chatter left out (magics/run/noise.py;
                                                            the file keeps them)
    DELETE /nbworkers/api/clusters/<name>                   stop it, even while its kernel is busy
    DELETE /nbworkers/api/clusters/<name>?remove=1          remove an ended run (its directory); 409 while
                                                            it runs or has processes left (stop it first)
    POST   /nbworkers/api/clusters/<name>/restart           restart a running run's group (its supervisor
                                                            takes the request, even while its kernel is busy);
                                                            409 for a run that ended or whose kernel is gone
    GET/POST /nbworkers/tensorboard/<name>/...              the run's TensorBoard (``%workers tensorboard``),
                                                            forwarded to its private Unix socket
                                                            (``tensorboard_proxy.py``)

It reads what the clusters write (``<run_root>/<name>/state.json``), so it never needs a kernel to be idle;
stopping writes the ``stop-requested`` file the cluster's supervisor thread obeys, then kills what is left
directly when the kernel is gone. Blocking work runs in thread pools, never on the server's event loop: reads
(GET) and stops (DELETE, which may wait the stop grace) in separate pools, so slow stops never stall reads.
A DELETE only ever signals processes that are the run's own (same user, started after the run, carrying its
NBWORKERS_RUN_ID: ``procs/ownership.py``), whatever pids its state file lists. Restart and remove:
``magics/rundir/actions.py``. The JupyterLab sidebar (``labextension/``) is this API's front end.
Every endpoint needs an authenticated, authorized user; names and worker ids cannot leave the run root.

Configure with ``c.NbworkersAPI.<setting>`` in ``jupyter_server_config.py``.
"""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from traitlets import Float, Int, Unicode, default
from traitlets.config import Configurable

# The kernel side's modules are imported when a request needs them, not when the server loads the extension, so
# the server starts as it would without nbworkers. (Importing them at load time was seen to make the first request
# tests/integration/test_serverext.py sends right after the server's info file appears be refused: keep them lazy.)
if TYPE_CHECKING:
    from nbworkers.magics.shapes import ClusterSnapshot, RunRow

AUTH_RESOURCE = "nbworkers"
API_PREFIX = "nbworkers/api"
TAIL = re.compile(r"[0-9]{1,9}")  # ?tail=N: ASCII digits only


class NbworkersAPI(Configurable):
    """Settings of the nbworkers REST API (every timeout named here)."""

    run_root = Unicode(help="The run root the clusters write to (default: the kernels' default, "
                            "$NBWORKERS_RUN_ROOT or ~/.nbworkers/runs).").tag(config=True)
    stop_timeout = Float(help="Seconds a DELETE waits for the cluster's own supervisor to stop it before it "
                              "kills the processes directly (default: the workers' stop_grace + "
                              "stop_wait_margin).").tag(config=True)
    kill_grace = Float(help="Seconds between SIGTERM and SIGKILL when processes are killed directly (default: "
                            "the kernels' own, procs/kill.py's KILL_GRACE).").tag(config=True)
    log_max_bytes = Int(help="Most bytes of a log returned by one request (its end; default: the kernels' own, "
                             "magics/rundir/layout.py's LOG_MAX_BYTES).").tag(config=True)
    tensorboard_timeout = Float(60.0, help="Seconds a request forwarded to a run's TensorBoard may take "
                                           "(/nbworkers/tensorboard/<name>/).").tag(config=True)
    stop_threads = Int(4, help="Threads that run stops (DELETE) off the event loop.").tag(config=True)
    read_threads = Int(4, help="Threads that run reads (GET: directory scans, state and log files) off the event "
                              "loop; separate from the stop threads, so a slow stop never stalls a read.").tag(
                                  config=True)

    @default("run_root")
    def _default_run_root(self) -> str:
        from nbworkers.magics.settings import WorkerSettings

        return WorkerSettings().run_root

    @default("kill_grace")
    def _default_kill_grace(self) -> float:
        from nbworkers.procs.kill import KILL_GRACE

        return KILL_GRACE

    @default("log_max_bytes")
    def _default_log_max_bytes(self) -> int:
        from nbworkers.magics.rundir.layout import LOG_MAX_BYTES

        return LOG_MAX_BYTES

    @default("stop_timeout")
    def _default_stop_timeout(self) -> float:
        from nbworkers.magics.settings import WorkerSettings

        worker_settings = WorkerSettings()
        return worker_settings.stop_grace + worker_settings.stop_wait_margin


def unsafe_root_error(error: Exception) -> web.HTTPError:
    """A run root other users could change (``layout.checked_run_root``): 500 with the folder and the fix; nothing
    in it is read or signalled."""
    return web.HTTPError(500, reason="nbworkers run root refused", log_message=str(error))


class ClusterAPIHandler(APIHandler):
    auth_resource = AUTH_RESOURCE

    def initialize(self, api: NbworkersAPI, executor: ThreadPoolExecutor,
                   stop_executor: ThreadPoolExecutor | None = None) -> None:
        self.api = api
        self.executor = executor
        self.stop_executor = stop_executor or executor

    async def run_blocking(self, func, *args, pool: ThreadPoolExecutor | None = None) -> Any:
        from nbworkers.magics.rundir.layout import UnsafeRunRoot

        try:
            return await asyncio.get_running_loop().run_in_executor(pool or self.executor, func, *args)
        except UnsafeRunRoot as error:
            raise unsafe_root_error(error) from None

    def run_dir(self, name: str) -> Path:
        from nbworkers.magics.launch.names import valid_name
        from nbworkers.magics.rundir import layout as rundir

        if not valid_name(name or ""):
            raise web.HTTPError(400, f"{name!r} is not a cluster name: letters, digits, '.', '_', '-' (at most 64).")
        try:
            return rundir.run_dir_of(name, self.api.run_root)
        except rundir.RunNotFound as error:
            raise web.HTTPError(404, str(error)) from None
        except rundir.UnsafeRunRoot as error:
            raise unsafe_root_error(error) from None

    def write_json(self, data: ClusterSnapshot | list[RunRow] | dict[str, Any]) -> None:
        """A run (``shapes.ClusterSnapshot``), a listing (``shapes.RunRow``) or an error body, as JSON."""
        from nbworkers.magics.rundir.rest_fields import shape  # ISO 8601 times beside the Unix ones, short errors

        self.finish(json.dumps(shape(data), default=str))


class ClustersHandler(ClusterAPIHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        from nbworkers.magics.rundir import listing as run_listing

        runs = await self.run_blocking(run_listing.list_runs, self.api.run_root)
        self.write_json({"run_root": self.api.run_root, "clusters": runs})


class ClusterHandler(ClusterAPIHandler):
    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        from nbworkers.magics.rundir import listing as run_listing

        run_dir = self.run_dir(name)
        data = await self.run_blocking(lambda: run_listing.describe(run_dir, full=True))
        if data is None:
            raise web.HTTPError(404, f"cluster {name!r} has no readable state; `%workers` in its notebook lists the "
                                     "kernel's clusters, GET /nbworkers/api/clusters every run")
        self.write_json(data)

    @web.authenticated
    @authorized
    async def delete(self, name: str) -> None:
        from nbworkers.magics.rundir import actions as run_actions
        from nbworkers.magics.rundir import stop as run_stop

        run_dir = self.run_dir(name)
        remove = self.get_argument("remove", "")
        if remove not in ("", "0", "1", "true", "false"):
            raise web.HTTPError(400, f"remove={remove!r}: give remove=1 to remove an ended run, or nothing to stop it")
        if remove in ("1", "true"):
            try:
                await self.run_blocking(run_actions.remove_run, run_dir, pool=self.stop_executor)
            except run_actions.RunNotRemovable as error:
                raise web.HTTPError(409, str(error)) from None
            self.write_json({"name": name, "removed": True})
            return
        result = await self.run_blocking(
            lambda: run_stop.stop_run(run_dir, stop_timeout=self.api.stop_timeout, kill_grace=self.api.kill_grace),
            pool=self.stop_executor,
        )
        self.write_json(result)


class RestartHandler(ClusterAPIHandler):
    @web.authenticated
    @authorized
    async def post(self, name: str) -> None:
        from nbworkers.magics.rundir import actions as run_actions
        from nbworkers.magics.rundir import listing as run_listing

        run_dir = self.run_dir(name)
        try:
            await self.run_blocking(run_actions.restart_run, run_dir)
        except run_actions.RunNotRestartable as error:
            raise web.HTTPError(409, str(error)) from None
        row = await self.run_blocking(run_listing.describe, run_dir)
        self.set_status(202)  # accepted: the run's supervisor restarts the group in the next poll
        self.write_json(dict(row or {"name": name}))


class LogHandler(ClusterAPIHandler):
    @web.authenticated
    @authorized
    async def get(self, name: str, worker: str) -> None:
        from nbworkers.magics.run import noise
        from nbworkers.magics.rundir import layout as rundir

        run_dir = self.run_dir(name)
        if not rundir.WORKER_ID.fullmatch(worker):
            raise web.HTTPError(400, f"worker {worker!r}: give the worker's index, 0, 1, ...")
        tail_arg = self.get_argument("tail", None)
        tail = None
        if tail_arg not in (None, ""):
            if not TAIL.fullmatch(tail_arg):
                raise web.HTTPError(400, f"tail={tail_arg!r}: give a number of lines, for example tail=100")
            tail = int(tail_arg)
        try:  # the user's view of the log: nbworkers' bookkeeping and TensorFlow's chatter left out (noise.py)
            text = await self.run_blocking(
                lambda: noise.shown_log(rundir.read_log(run_dir, worker, None, self.api.log_max_bytes), tail)
            )
        except rundir.RunNotFound as error:
            raise web.HTTPError(404, str(error)) from None
        self.finish(text, set_content_type="text/plain; charset=utf-8")


class NotFoundHandler(ClusterAPIHandler):
    """Anything else under /nbworkers/api: authenticated like the rest, then 404."""

    @web.authenticated
    @authorized
    def get(self, *args) -> None:
        raise web.HTTPError(404, "no such nbworkers endpoint: see GET /nbworkers/api/clusters (or `%workers` in a "
                                 "notebook)")

    delete = post = put = patch = get


def handlers(base_url: str, api: NbworkersAPI, executor: ThreadPoolExecutor,
             stop_executor: ThreadPoolExecutor | None = None) -> list[tuple]:
    from nbworkers.tensorboard_proxy import ROUTE, TensorBoardProxyHandler

    prefix = url_path_join(base_url, API_PREFIX)
    kwargs = {"api": api, "executor": executor, "stop_executor": stop_executor or executor}
    name = r"(?P<name>[^/]+)"
    return [
        (url_path_join(base_url, ROUTE) + rf"/{name}(?:/(?P<path>.*))?", TensorBoardProxyHandler,
         {"api": api, "executor": executor}),
        (prefix + r"/clusters/?", ClustersHandler, kwargs),
        (prefix + rf"/clusters/{name}/?", ClusterHandler, kwargs),
        (prefix + rf"/clusters/{name}/restart/?", RestartHandler, kwargs),
        (prefix + rf"/clusters/{name}/logs/(?P<worker>[^/]+)/?", LogHandler, kwargs),
        (prefix + r"(?:/.*)?", NotFoundHandler, kwargs),
    ]


def load(serverapp) -> None:
    """Called by jupyter_server (through ``nbworkers._load_jupyter_server_extension``)."""
    api = NbworkersAPI(parent=serverapp)
    executor = ThreadPoolExecutor(max_workers=max(1, api.read_threads), thread_name_prefix="nbworkers-api")
    stop_executor = ThreadPoolExecutor(max_workers=max(1, api.stop_threads), thread_name_prefix="nbworkers-api-stop")
    web_app = serverapp.web_app
    register = getattr(serverapp.contents_manager, "register_pre_save_hook", None)
    if register is not None:  # finished runs' outputs saved as their summary, not a dead widget: saved_notebook.py
        from nbworkers.saved_notebook import pre_save_hook

        register(pre_save_hook)
    web_app.add_handlers(".*$", handlers(web_app.settings["base_url"], api, executor, stop_executor))
    from nbworkers.magics.rundir.layout import UnsafeRunRoot, checked_run_root

    try:
        checked_run_root(api.run_root)  # every request checks again; say it at start too
    except UnsafeRunRoot as error:
        serverapp.log.warning("nbworkers: %s", error)
    serverapp.log.info("nbworkers: REST API at %s over %s",
                       url_path_join(web_app.settings["base_url"], API_PREFIX, "clusters"), api.run_root)
