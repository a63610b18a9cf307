"""From ``%%worker`` flags and a cell to a checked ``LaunchSpec``: every mistake is caught here, before
anything starts, with a message that says what to do."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from argparse import Namespace
from typing import Any

from nbworkers.magics.backends import registry
from nbworkers.magics.backends.arguments import chosen
from nbworkers.magics.backends.registry import BackendKind
from nbworkers.magics.backends.zygotes import zygotes
from nbworkers.magics.errors import CellSyntaxError, ClusterNameError, LaunchError, PushError, WorkerPythonError
from nbworkers.magics.frameworks import arguments as frameworks_arguments
from nbworkers.magics.launch.bounds import check_bounds, existing_run_names
from nbworkers.magics.launch.names import fresh_name, valid_name
from nbworkers.magics.launch.roles import check_roles
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.settings import settings
from nbworkers.protocol import cell_scan
from nbworkers.version import installed_version

_checked_pythons: dict[tuple[str, float], None] = {}


def check_syntax(cell: str) -> None:
    try:
        compile("\n" + cell, "<%%worker cell>", "exec")  # line 1 is the %%worker line, as in the notebook
    except SyntaxError as error:
        where = f"line {error.lineno}" if error.lineno else "the cell"
        shown = (error.text or "").rstrip("\n")
        pointer = ""
        if shown and error.offset:
            pointer = "\n    " + " " * (error.offset - 1) + "^"
        raise CellSyntaxError(
            f"SyntaxError in the %%worker cell at {where}: {error.msg}\n    {shown}{pointer}\n"
            "Nothing was started. The cell runs as plain Python on the workers (no %magics or !commands)."
        ) from None


def check_python(python: str) -> str:
    """The worker interpreter's absolute path, once we know it can run nbworkers' worker bootstrap, of this kernel's
    version (the messages between a worker, its host and the kernel change between versions: an older worker would
    never say that its cell ran to its end, and every run would fail)."""
    if not python:
        return sys.executable
    path = os.path.abspath(os.path.expanduser(python))
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise WorkerPythonError(f"--python {python}: no such executable. Give the path of a Python interpreter.")
    if path == sys.executable:
        return path
    key = (path, os.path.getmtime(path))
    if key in _checked_pythons:
        return path
    try:
        result = subprocess.run(
            # no working directory on sys.path (nothing another user planted there is imported)
            [path, "-c",
             "import sys\nif sys.path[:1] == ['']: del sys.path[0]\nimport nbworkers.distlib.worker.bootstrap\n"
             "from importlib.metadata import version\nprint(version('nbworkers'))"],
            capture_output=True, text=True,
            timeout=settings().python_check_timeout,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise WorkerPythonError(f"--python {python}: could not run it ({error}).") from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise WorkerPythonError(
            f"--python {python} cannot run nbworkers workers: {last}\n"
            f"Install nbworkers there: `{path} -m pip install nbworkers` (with --no-deps to keep its TensorFlow)."
        )
    theirs, ours = (result.stdout.strip().splitlines() or [""])[-1], installed_version()
    if theirs != ours:
        raise WorkerPythonError(
            f"--python {python} has nbworkers {theirs or '(unknown)'}, this kernel {ours}: a worker must run the "
            f"kernel's version. Install it there: `{path} -m pip install --no-deps nbworkers=={ours}`."
        )
    _checked_pythons[key] = None
    return path


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not key.replace("_", "a").isalnum():
            raise LaunchError(f"--env {pair!r}: expected KEY=VALUE, for example --env TF_USE_LEGACY_KERAS=1")
        env[key] = value
    return env


def collect_push(names: list[str], user_ns: dict[str, Any]) -> dict[str, Any]:
    wanted = [n.strip() for item in names for n in item.split(",") if n.strip()]
    missing = [n for n in wanted if n not in user_ns]
    if missing:
        raise PushError(f"--push: no variable named {', '.join(missing)} in the notebook. Define it first.")
    pushed = {n: user_ns[n] for n in wanted}
    for name, value in pushed.items():
        try:
            pickle.dumps(value)
        except Exception as error:
            raise PushError(
                f"--push {name}: its value cannot be pickled ({type(error).__name__}: {error}). "
                "Push plain data, or build the object inside the cell."
            ) from None
    return pushed


def build_spec(args: Namespace, cell: str, user_ns: dict[str, Any], taken: set[str], running: set[str]) -> LaunchSpec:
    chief, evaluator, ps = getattr(args, "chief", False), getattr(args, "evaluator", 0), getattr(args, "ps", None)
    cwd = os.path.abspath(os.path.expanduser(args.cwd)) if args.cwd else os.getcwd()
    scan = cell_scan.scan(cell, cwd)  # what the cell uses, once: roles, zygotes, the workers (cell_scan.py)
    check_roles(args.workers, chief, evaluator, ps, cell, scan.names)  # --chief, --evaluator, --ps N (roles.py)
    if args.workers < 1:
        raise LaunchError(f"-n {args.workers}: a cluster needs at least 1 worker, for example -n 2.")
    check_bounds(args)  # -n upper bound, finite --timeout/--stall-timeout (magics/launch/bounds.py)
    if args.gpus_per_worker is not None and args.gpus_per_worker < 0:
        raise LaunchError(f"--gpus-per-worker {args.gpus_per_worker}: use 0 (CPU only) or more.")
    if args.timeout is not None and args.timeout <= 0:
        raise LaunchError(f"--timeout {args.timeout:g}: give a positive number of seconds.")
    if args.max_restarts is not None and args.max_restarts < 0:
        raise LaunchError(f"--max-restarts {args.max_restarts}: use 0 (never restart) or more.")
    if args.stall_timeout is not None and args.stall_timeout < 0:
        raise LaunchError(f"--stall-timeout {args.stall_timeout:g}: use 0 (no watchdog) or a number of seconds.")
    if not cell.strip():
        raise LaunchError("the %%worker cell is empty: put the training code below the %%worker line.")
    check_syntax(cell)
    check_min_workers(args)
    if not _kind(args).runs_here:  # its workers run elsewhere: the local zygote's import would only compete
        zygotes().yield_prewarm()
    kind, options = check_backend(args)  # the registered backend, its options (--backend ray: Ray answering)
    framework, framework_options = frameworks_arguments.chosen(args)  # --framework, its flags (frameworks/)
    name = args.name or fresh_name(taken | existing_run_names())  # never another kernel's run directory
    if not valid_name(name):
        raise ClusterNameError(f"--name {name!r}: use letters, digits, '.', '_' and '-' (at most 64).")
    if name in running:
        raise ClusterNameError(
            f"cluster {name!r} is still running: `%workers stop {name}` first, or pick another --name.")
    if not os.path.isdir(cwd) and kind.runs_here:  # else (ray): the directory is looked for on each node
        raise LaunchError(f"--cwd {args.cwd}: no such directory.")
    python = check_python(args.python) if kind.runs_here else nodes_python(args.python)
    if kind.runs_here:
        frameworks_arguments.check_installed(framework, python)  # --framework jax without JAX: say so, start nothing
    return LaunchSpec(
        code=cell,
        workers=args.workers,
        name=name,
        python=python,
        env=parse_env(args.env),
        cwd=cwd,
        gpus_per_worker=args.gpus_per_worker,
        block=args.block,
        timeout=args.timeout,
        push=collect_push(args.push, user_ns),
        max_restarts=args.max_restarts,
        stall_timeout=args.stall_timeout,
        chief=chief or bool(ps),
        evaluator=evaluator,
        ps=ps or 0,
        backend=kind.name,
        options=options,
        framework=framework.name,
        framework_options=framework_options,
        min_workers=getattr(args, "min_workers", None),
        scan=scan,
    )


def check_min_workers(args: Namespace) -> None:
    """``--min-workers M``: an elastic group of M to -n plain workers on Ray (magics/run/core/elastic.py)."""
    least = getattr(args, "min_workers", None)
    if least is None:
        return
    if not 1 <= least <= args.workers:
        raise LaunchError(f"--min-workers {least}: give 1 to -n ({args.workers}), for example -n 4 --min-workers 2.")
    if not _kind(args).elastic:
        elastic = registry.names(lambda kind: kind.elastic)
        raise LaunchError(f"--min-workers: only for the {registry.titles(lambda kind: kind.elastic)} backend, where "
                          "nodes come and go (one machine keeps its -n workers). Add "
                          f"{' or '.join('--backend ' + name for name in elastic) or 'another backend'}, or leave it "
                          "out.")
    roles = [flag for attr, flag in (("chief", "--chief"), ("evaluator", "--evaluator"), ("ps", "--ps"))
             if getattr(args, attr, None)]
    if roles:
        raise LaunchError(f"--min-workers with {', '.join(roles)}: an elastic group is -n plain workers "
                          "(MultiWorkerMirroredStrategy). Leave one of them out.")


def check_backend(args: Namespace) -> tuple[BackendKind[Any], Any]:
    """``--backend`` and its flags: (its registration, its options), checked as it says (for ray, Ray must import
    and its address answer: nothing starts otherwise); another backend's flags are refused."""
    return chosen(args)


def _kind(args: Namespace) -> BackendKind[Any]:
    try:
        return registry.get(getattr(args, "backend", None) or registry.DEFAULT)
    except LookupError as error:
        raise LaunchError(str(error)) from None


def nodes_python(python: str) -> str:
    """The workers' interpreter on another machine (the Ray nodes): as given (it must exist there), or "" for the
    node's own."""
    return os.path.abspath(os.path.expanduser(python)) if python else ""
