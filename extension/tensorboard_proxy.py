"""TensorBoard behind the notebook's authentication: ``<base url>nbworkers/tensorboard/<name>/...``.

A run's TensorBoard (``%workers tensorboard NAME``) serves on a Unix socket in a private 0700 directory
(``magics/notebook/tensorboard_server.py``): no TCP port, no other local user. The Jupyter server forwards the
requests of its authenticated, authorized users to it (GET and POST: TensorBoard's data endpoints use both),
and nothing else reaches it. The socket is found through ``<run dir>/tensorboard.socket`` (the run directory
checked as the REST API's are) and must be a socket owned by this user in a private directory.

jupyter-server-proxy would do the forwarding, but it brings its own dependencies (aiohttp, simpervisor) and
proxies any local port to every logged-in user by default; this route forwards to one kind of socket only.
Cross-site requests: TensorBoard's frontend sends ``X-XSRF-Protected: 1`` with every POST, a header no other
site can make a browser send (CORS), so such a POST is accepted without Jupyter's own XSRF token; any other
POST needs Jupyter's.
"""

from __future__ import annotations

import http.client
import os
import socket
import stat
from pathlib import Path

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from tornado import web

AUTH_RESOURCE = "nbworkers"
ROUTE = "nbworkers/tensorboard"
FORWARDED_REQUEST_HEADERS = ("Accept", "Accept-Encoding", "Accept-Language", "Content-Type", "If-None-Match",
                             "If-Modified-Since", "X-XSRF-Protected")
DROPPED_RESPONSE_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                                      "content-length", "server", "date"})


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket (TensorBoard's, see the module docstring)."""

    def __init__(self, socket_path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class NoTensorBoard(LookupError):
    """No TensorBoard of this user serves that run."""


def socket_of(run_dir: Path) -> str:
    """The Unix socket of the run's TensorBoard: named by ``tensorboard.socket``, a socket of this user's in a
    private directory; NoTensorBoard otherwise."""
    from nbworkers.magics.rundir import layout as rundir
    from nbworkers.protocol.private.dirs import check_private
    from nbworkers.protocol.private.files import read_own

    hint = f"`%workers tensorboard {run_dir.name}` in a notebook starts it"
    try:
        path = read_own(rundir.tensorboard_socket_file(run_dir)).decode("utf-8").strip()
        info = os.lstat(path)
        check_private(Path(path).parent)
    except (OSError, ValueError):
        raise NoTensorBoard(f"no TensorBoard is serving cluster {run_dir.name!r}: {hint}.") from None
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        raise NoTensorBoard(f"the TensorBoard socket of {run_dir.name!r} is not yours: {hint} again.")
    return path


def forward(socket_path: str, method: str, path: str, body: bytes | None, headers: dict[str, str],
            timeout: float) -> tuple[int, str, list[tuple[str, str]], bytes]:
    """One request to TensorBoard: (status, reason, headers, body)."""
    conn = UnixHTTPConnection(socket_path, timeout)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.reason, response.getheaders(), response.read()
    finally:
        conn.close()


class TensorBoardProxyHandler(JupyterHandler):
    auth_resource = AUTH_RESOURCE

    def initialize(self, api, executor) -> None:
        self.api = api
        self.executor = executor

    def write_error(self, status_code: int, **kwargs) -> None:
        """The error as plain text with what to do (Jupyter's HTML 404 page would drop the message)."""
        error = (kwargs.get("exc_info") or (None, None, None))[1]
        message = self._reason
        if isinstance(error, web.HTTPError) and error.log_message:
            message = error.log_message % error.args if error.args else error.log_message
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(f"{status_code}: {message}\n")

    def check_xsrf_cookie(self) -> None:
        if self.request.headers.get("X-XSRF-Protected") == "1":  # TensorBoard's own CSRF marker (module docstring)
            return None
        return super().check_xsrf_cookie()

    @web.authenticated
    @authorized
    async def get(self, name: str, path: str) -> None:
        await self._proxy(name, path)

    @web.authenticated
    @authorized
    async def post(self, name: str, path: str) -> None:
        await self._proxy(name, path)

    async def _proxy(self, name: str, path: str) -> None:
        import asyncio

        from nbworkers.magics.launch.names import valid_name
        from nbworkers.magics.rundir import layout as rundir

        if not valid_name(name):
            raise web.HTTPError(400, "%r is not a cluster name", name)
        if path is None:  # .../<name> without the slash: TensorBoard's relative links need it
            self.redirect(self.request.path + "/" + (f"?{self.request.query}" if self.request.query else ""))
            return
        loop = asyncio.get_running_loop()
        try:
            run_dir = await loop.run_in_executor(self.executor, rundir.run_dir_of, name, self.api.run_root)
            socket_path = await loop.run_in_executor(self.executor, socket_of, run_dir)
        except (rundir.RunNotFound, NoTensorBoard) as error:
            raise web.HTTPError(404, "%s", error) from None  # the message has '%': tornado formats log_message
        except rundir.UnsafeRunRoot as error:
            raise web.HTTPError(500, "%s", error) from None
        target = "/" + path + (f"?{self.request.query}" if self.request.query else "")
        headers = {k: v for k, v in self.request.headers.items() if k in FORWARDED_REQUEST_HEADERS}
        body = self.request.body if self.request.method == "POST" else None
        try:
            status, reason, reply_headers, data = await loop.run_in_executor(
                self.executor, forward, socket_path, self.request.method, target, body, headers,
                self.api.tensorboard_timeout)
        except OSError as error:
            raise web.HTTPError(502, "TensorBoard of %r did not answer (%s): `%%workers tensorboard %s` starts it "
                                     "again.", name, error, name) from None
        self.set_status(status, reason)
        self.clear_header("Content-Type")
        for key, value in reply_headers:
            if key.lower() not in DROPPED_RESPONSE_HEADERS:
                self.add_header(key, value)
        self.finish(data)
