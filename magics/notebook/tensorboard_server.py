"""TensorBoard on a Unix socket: ``python -m nbworkers.magics.notebook.tensorboard_server --logdir D --socket S``.

TensorBoard's own server listens on a TCP port without authentication: any local user could read the run's
summaries there. This runs TensorBoard's WSGI application (``tensorboard.program.TensorBoard``, its documented
``server_class`` hook and ``launch()``) on a Unix socket instead, inside a private 0700 directory
(``private_dirs.runtime_dir``): only this user can connect. The notebook reaches it through the Jupyter server,
behind its authentication (``extension/tensorboard_proxy.py``). ``--load_fast false``: no separate data server
(it would listen on a local TCP port). Prints ``SERVING_LINE`` once the socket listens.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

SERVING_LINE = "nbworkers: TensorBoard serving on unix:"


def make_server_class(socket_path: str):
    """A ``TensorBoardServer`` factory serving on ``socket_path`` (werkzeug's ``unix://`` address)."""
    from tensorboard import program
    from werkzeug import serving

    class UnixSocketServer(serving.ThreadedWSGIServer, program.TensorBoardServer):
        def __init__(self, wsgi_app, flags):
            if os.path.lexists(socket_path):
                os.unlink(socket_path)
            serving.ThreadedWSGIServer.__init__(self, f"unix://{socket_path}", 0, wsgi_app)
            os.chmod(socket_path, 0o600)

        def get_url(self) -> str:
            return f"unix:{socket_path}"

        def print_serving_message(self) -> None:
            pass  # main() prints SERVING_LINE once launched

    return UnixSocketServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nbworkers-tensorboard")
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--socket", required=True, help="the Unix socket to serve on (in a private directory)")
    parser.add_argument("--reload-interval", default="5")
    args = parser.parse_args(argv)
    from tensorboard import program

    board = program.TensorBoard(server_class=make_server_class(args.socket))
    board.configure(argv=["", "--logdir", args.logdir, "--reload_interval", args.reload_interval,
                          "--load_fast", "false"])
    board.launch()  # serves in a thread; no info file for ``tensorboard.notebook`` (it would name a TCP port)
    print(f"{SERVING_LINE}{args.socket}", flush=True)
    signal.pause()  # until SIGTERM / SIGKILL (its tied host stops it with the kernel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
