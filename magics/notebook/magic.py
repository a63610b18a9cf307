"""``%%worker`` (run a cell on N worker processes) and ``%workers`` (list, logs, stop, wait)."""

from __future__ import annotations

import sys

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from nbworkers.magics.backends.arguments import backend_arguments
from nbworkers.magics.errors import LaunchError, RunFailed
from nbworkers.magics.frameworks.arguments import framework_arguments
from nbworkers.magics.notebook import idle_interrupt, registry, tensorboard
from nbworkers.magics.notebook.help_cell import install
from nbworkers.magics.notebook.listing import cluster_table as _cluster_table
from nbworkers.magics.notebook.parse import build_spec
from nbworkers.magics.notebook.remote.detach import detached_run, run_detached, workers_attach
from nbworkers.magics.notebook.session_magic import (
    restore_session,
    run_session_cell,
    stop_cell,
)
from nbworkers.magics.notebook.version_info import version_text
from nbworkers.magics.run.cluster import Cluster
from nbworkers.magics.run.failed import mark_error_below, run_failure
from nbworkers.magics.rundir.layout import RunNotFound, run_dir_of
from nbworkers.magics.settings import settings
from nbworkers.magics.views.summary import ECHOED_KEY, render_summary_html, render_text
from nbworkers.magics.views.view import HtmlBundle
from nbworkers.protocol.private.dirs import UnsafeDirectory


@magics_class
class WorkerMagics(Magics):
    def __init__(self, shell=None, **kwargs):
        super().__init__(shell, **kwargs)
        if shell is not None:
            install(shell)  # `%%worker --help` alone in a cell

    @magic_arguments()
    @argument("-n", "--workers", type=int, default=2, help="number of worker processes (default 2)")
    @argument("--name", default="", help="the cluster's name (default: a fresh readable name)")
    @argument("--python", default="", metavar="PATH",
              help="interpreter the workers run (default: the kernel's); it must have nbworkers installed")
    @argument("--env", action="append", default=[], metavar="KEY=VALUE",
              help="an environment variable for every worker (repeatable)")
    @argument("--cwd", default="", metavar="DIR", help="directory the cell runs in (default: the notebook's)")
    @argument("--gpus-per-worker", type=int, default=None, metavar="G",
              help="GPUs per worker; 0 hides GPUs (CUDA_VISIBLE_DEVICES=-1); default: an equal share")
    @argument("--block", action="store_true", help="wait until the run ends (scripts, headless runs); a failed "
              "run then fails the cell (RunFailed) and the workers' output is written into the cell")
    @argument("--no-raise", action="store_true", help="--block: a failed run does not fail the cell")
    @argument("--timeout", type=float, default=None, metavar="SECONDS",
              help="stop the run and mark it failed after this many seconds")
    @argument("--max-restarts", type=int, default=None, metavar="K",
              help="restarts of the whole group after a crash, OOM kill, preemption or stall (default 3)")
    @argument("--stall-timeout", type=float, default=None, metavar="SECONDS",
              help="no progress for this long: dump stacks, then restart or fail the group (default 1800; 0: off)")
    @argument("--chief", action="store_true",
              help="add a 'chief' task that takes the chief's duties (checkpoints, summaries) instead of worker 0")
    @argument("--evaluator", nargs="?", type=int, const=1, default=0, metavar="1",
              help="add one 'evaluator' task, outside the training cluster (Estimator's train_and_evaluate)")
    @argument("--ps", type=int, default=None, metavar="N",
              help="N parameter servers for ParameterServerStrategy: the cell runs on the chief (the coordinator, "
                   "implied), the -n workers and the parameter servers run TensorFlow servers it drives")
    @backend_arguments()  # --backend and each registered backend's flags (magics/backends/arguments.py)
    @framework_arguments()  # --framework and each registered framework's flags (magics/frameworks/arguments.py)
    @argument("--min-workers", type=int, default=None, metavar="M",
              help="ray: elastic — start with as many workers as the cluster can place (at least M, at most -n), "
                   "go on with fewer after a node loss while M fit, grow back when room returns")
    @argument("--push", action="append", default=[], metavar="NAME[,NAME...]",
              help="kernel variables (picklable) placed in the workers' globals before the cell runs")
    @argument("--display", choices=("0", "all"), default="0",
              help="session cells: whose rich output (display(...), plt.show()) the cell shows: worker 0's "
                   "(default) or every worker's")
    @argument("--detach", action="store_true", default=None,
              help="run it in a supervisor process of its own: it trains on after a kernel restart or crash; "
                   "`%%workers attach NAME` from any kernel, `%%workers stop NAME` stops it (default: the setting "
                   "`detach`)")
    @argument("--session", default=None, metavar="NAME",
              help="run the cell in the live session NAME (its workers and variables stay between cells); "
                   "start it (with -n and the other flags) when there is none")
    @cell_magic
    def worker(self, line: str, cell: str):
        """Run this cell on N background worker processes, each with its own TF_CONFIG.

        The cell returns at once (unless --block) and shows a live view of the workers; the returned
        cluster handle (also `%workers` NAME) has .status, .wait(), .stop(), .logs(worker).

        Example::

            %%worker -n 2
            import tensorflow as tf
            strategy = tf.distribute.MultiWorkerMirroredStrategy()
        """
        if _wants_help(line):
            print(_usage(self.worker, "%%worker"))
            return None
        try:
            args = parse_argstring(self.worker, line)
        except UsageError as error:
            raise UsageError(f"{error}\nSee `%%worker --help`.") from None
        if args.session is not None:  # interactive sessions (--detach too): magics/notebook/session_magic.py
            return run_session_cell(self, args, cell)
        if args.display != "0":
            raise UsageError("--display: only for session cells (`%%worker --session NAME --display all`); a run "
                             "without --session shows no rich output.")
        try:
            user_ns = self.shell.user_ns if self.shell is not None else {}
            spec = build_spec(args, cell, user_ns, taken=registry.names(), running=_running_names())
            if args.detach if args.detach is not None else settings().detach:
                return run_detached(spec, block=args.block)  # magics/notebook/remote/detach.py
            cluster = Cluster(spec)
            cluster.start()  # raises before anything runs, or leaves nothing behind
            registry.add(cluster)
        except (LaunchError, UnsafeDirectory) as error:  # UnsafeDirectory: a runtime dir's parent others may change
            raise UsageError(str(error)) from None
        if not args.block:
            idle_interrupt.watch(self.shell, cluster.name)  # ■ while it runs, the kernel idle: says how to stop it
            return cluster
        cluster.show()
        try:
            cluster.wait(raise_on_failure=not args.no_raise, echo=_echo())
        except KeyboardInterrupt:
            print(f"Stopped waiting; cluster {cluster.name!r} is still running. "
                  f"`%workers stop {cluster.name}` stops it.", file=sys.stderr)
        except RunFailed as error:
            raise error from None  # shown as its message alone (RunFailed._render_traceback_)
        return None

    @magic_arguments()
    @argument("action", nargs="?", default="list",
              help="list (default), logs, stop, wait, attach, tensorboard, resize, restore")
    @argument("name", nargs="?", default=None, help="the cluster's name")
    @argument("-w", "--worker", type=int, default=None, help="logs: only this worker's")
    @argument("--tail", type=int, default=None, help="logs: only the last N lines")
    @argument("--all", action="store_true", help="stop: every running cluster")
    @argument("--cell", action="store_true", help="stop NAME --cell: interrupt the session's running cell only")
    @argument("--timeout", type=float, default=None, help="wait: give up after this many seconds")
    @argument("--no-raise", action="store_true",
              help="wait: a failed run (or a wait that timed out) does not fail the cell")
    @argument("--version", action="store_true",
              help="nbworkers' version, and a line with it, Python's, TensorFlow's and Ray's for a bug report")
    @line_magic
    def workers(self, line: str):
        """The clusters and their state, and what to do with one (ACTION NAME):

          (no action), list  this kernel's clusters; after a restart, this notebook's earlier runs too
          logs NAME          print the workers' logs from disk (-w I: one worker's; --tail N: the last lines)
          stop NAME          stop it (--all: every running cluster; --cell: a session's running cell only)
          wait NAME          wait for its end (--timeout S; --no-raise: a failed run does not fail the cell)
          attach NAME        show a run this kernel did not start (one a restarted kernel left, a --detach run)
          tensorboard NAME   TensorBoard on the run's summaries
          resize NAME        an elastic run grows now when its cluster has room
          restore NAME       a session's models, variables and values saved before its processes restarted
          --version          nbworkers' version, and a line for a bug report
        """
        if _wants_help(line):
            self.workers.parser.usage = "%(prog)s [ACTION] [NAME] [options]"  # the actions come first, listed
            print(_usage(self.workers, "%workers"))
            return None
        try:
            args = parse_argstring(self.workers, line)
        except UsageError as error:
            raise UsageError(f"{error}\nSee `%workers --help`.") from None
        if args.version:
            print(version_text())
            return None
        action = args.action
        if action == "list":
            from nbworkers.magics.rundir.layout import UnsafeRunRoot, checked_run_root

            try:
                checked_run_root()  # the listing says when the run root is not this user's alone
            except UnsafeRunRoot as error:
                raise UsageError(str(error)) from None
            display(HtmlBundle(*_cluster_table()))
            return None
        if action not in ("logs", "stop", "wait", "attach", "tensorboard", "resize", "restore"):
            raise UsageError(f"unknown action {action!r}: use list, logs, stop, wait, attach, tensorboard, resize or "
                             "restore. See `%workers --help`.")
        if action == "stop" and args.all:
            stopping = registry.running()
            for cluster in stopping:
                cluster.stop()
            for cluster in stopping:
                cluster.wait(timeout=cluster.settings.stop_grace + cluster.settings.stop_wait_margin)
            print(_stopped_text(stopping, _release_idle_ray_groups()))
            return None
        if not args.name:
            raise UsageError(f"`%workers {action}` needs a cluster name (or --all for stop); `%workers` lists them.")
        if action == "tensorboard":
            _tensorboard(args.name)
            return None
        if action == "restore":  # a session's saved state (magics/notebook/session_magic.py)
            return restore_session(args.name)
        if action == "attach":
            try:
                workers_attach(args.name).show()
            except (RunNotFound, LaunchError) as error:  # LaunchError: UnsafeRunRoot
                raise UsageError(str(error)) from None
            return None
        if args.name not in registry.names():
            detached_run(args.name)  # a detached run this kernel did not start: attached (registered) on the fly
        try:
            cluster = registry.get(args.name)
        except KeyError as error:
            raise UsageError(error.args[0]) from None
        if action == "logs":
            try:
                print(cluster.logs(args.worker, tail=args.tail))
            except ValueError as error:
                raise UsageError(str(error)) from None
            return None
        if action == "resize":  # an elastic run (--min-workers) grows now if its cluster has room
            print(f"{cluster.name}: {cluster.resize()}")
            return None
        if action == "stop" and args.cell:  # a session's running cell (magics/notebook/session_magic.py)

            print(stop_cell(args.name))
            return None
        if action == "stop":
            cluster.stop()
            cluster.wait(timeout=cluster.settings.stop_grace + cluster.settings.stop_wait_margin)
            display(HtmlBundle(render_text(cluster.snapshot()), render_summary_html(cluster.snapshot())))
            return None
        echo = _echo()
        try:
            ended = cluster.wait(timeout=args.timeout, echo=echo)
        except KeyboardInterrupt:
            from nbworkers.magics.notebook.session_magic import stop_on_interrupt
            from nbworkers.magics.sessions.session import Session

            if isinstance(cluster, Session):  # ■ is Stop of the session's pending cells (CellStopped)
                stop_on_interrupt(cluster, list(cluster.cells), echo)
            print(f"Stopped waiting; cluster {cluster.name!r} is still {cluster.status}.", file=sys.stderr)
            return None
        snapshot = cluster.snapshot()
        failure = None if args.no_raise else run_failure(snapshot, ended=ended, waited=args.timeout)
        shown = mark_error_below(snapshot) if failure is not None else snapshot
        if echo is not None:  # the output is above already
            shown = shown.copy()
            shown[ECHOED_KEY] = True
        display(HtmlBundle(render_text(shown), render_summary_html(shown)))
        if failure is not None:
            raise failure from None  # shown as its message alone (RunFailed._render_traceback_)
        if not ended:
            print(f"cluster {cluster.name!r} is still {cluster.status} after {args.timeout:g} s", file=sys.stderr)
        return None


def _echo():
    """What a blocking wait writes of the workers' output into the cell (magics/views/echo.py); None when off."""
    from nbworkers.magics.views.echo import blocking_echo

    return blocking_echo()


def _tensorboard(name: str) -> None:
    """`%workers tensorboard NAME`: TensorBoard on the run's summaries, inline, and its URL (``tensorboard``)."""
    try:
        run_dir = registry.get(name).run_dir
    except KeyError:
        try:
            run_dir = run_dir_of(name)  # a run this kernel did not start
        except (RunNotFound, LaunchError) as error:  # LaunchError: UnsafeRunRoot
            raise UsageError(str(error)) from None
    try:
        board = tensorboard.start(run_dir, settings().tensorboard_start_timeout, settings().tensorboard_reload_interval)
    except LaunchError as error:
        raise UsageError(str(error)) from None
    tensorboard.show(board)
    print(f"TensorBoard on {board.logdir}: {board.url} on this Jupyter server, behind its login "
          "(stopped with this kernel)")


def _release_idle_ray_groups() -> int:
    """`%workers stop --all` lets the idle Ray worker groups kept for warm runs go too (backends/ray/groups/pool.py)."""
    from nbworkers.magics.backends.registry import release_idle  # imports no Ray

    return release_idle()


def _running_names() -> set[str]:
    return {c.name for c in registry.running()}


def _stopped_text(stopped: list, idle_groups: int = 0) -> str:
    """What `%workers stop --all` did, one line per cluster (and the idle Ray worker groups let go)."""
    released = (f"\nReleased {idle_groups} idle Ray worker group{'s' if idle_groups != 1 else ''} (kept for warm runs)."
                if idle_groups else "")
    if not stopped:
        return "No running clusters to stop." + released
    lines = [f"Stopped {len(stopped)} cluster{'s' if len(stopped) != 1 else ''}:"]
    lines += [f"  {c.name}: {len(c.snapshot()['workers'])} workers, now {c.status}" for c in stopped]
    return "\n".join(lines) + released




def _wants_help(line: str) -> bool:
    return any(token in ("-h", "--help") for token in line.split())


def _usage(magic, prog: str) -> str:
    """The usage text of a magic's argument parser (magic_arguments' parsers have no --help of their own)."""
    parser = magic.parser
    parser.prog = prog[1:]  # IPython's formatter prefixes one '%'
    text = parser.format_help()
    return "usage: " + text.split("::", 1)[-1].lstrip("\n ") if text.startswith("::") else text





