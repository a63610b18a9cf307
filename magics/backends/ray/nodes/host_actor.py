"""The node side of the Ray backend: one Ray actor per worker, hosting that worker's process on its node.

The actor starts the same worker host as the local backend (``python -m nbworkers.host.worker_host
... -- PYTHON -u -m nbworkers.distlib.worker.bootstrap``) as its child, in a session of its own, holding a pipe to
its stdin. So on the node everything behaves as it does locally: the host tees the worker's output to the
log file and the relay, ``stop`` / ``stacks`` / end-of-file on its stdin stop the worker group or dump its
stacks, and the host's exit code is the worker's (128+N: killed by signal N).

When the actor dies for any reason (``ray.kill``, the kernel — the Ray driver that owns the actor — died,
the node's raylet went away), its end of the pipe closes and the host stops the worker group (TERM, grace,
KILL), exactly as when a local kernel dies. For that the host is the actor's grandchild
(``nbworkers.procs.grandchild`` between them, in the host's process group): an exiting Ray worker process SIGKILLs
its direct children (``RAY_kill_child_processes_on_worker_exit``, on by default), which kills that small process and
leaves the host to stop its worker its own way. (Setting that variable to false in the actor's ``runtime_env`` did
the same, but Ray starts a process with a ``runtime_env`` through ``setup_worker.py``, one more interpreter that
imports all of Ray: ~2 s of CPU per actor. The node zygotes' actors do without it too: zygote_actor.py.)

This module is imported on the nodes (Ray unpickles the actor class by reference: nbworkers must be
installed there). It imports neither TensorFlow nor IPython, and Ray only inside the actor's methods.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from nbworkers.host.command import ZYGOTE_MODULE, host_command
from nbworkers.magics.backends.ray.nodes import state_copy
from nbworkers.magics.backends.ray.nodes.tls import tls_of
from nbworkers.magics.rundir.layout import cell_path, push_path
from nbworkers.procs.kill import kill_group
from nbworkers.procs.ownership import RUN_ID_ENV, started_since_boot
from nbworkers.protocol import env_settings, wire
from nbworkers.protocol.private.dirs import check_importable, module_command, private_dir, runtime_dir
from nbworkers.protocol.private.files import open_own
from nbworkers.protocol.relay_curve import client_keypair
from nbworkers.version import installed_version

GRANDCHILD_MODULE = "nbworkers.procs.grandchild"  # runs the host (a node zygote) as the actor's grandchild
# private, under $XDG_RUNTIME_DIR or the node's temp dir (+ "-<uid>"), when the kernel's run directory cannot be
# made there
NODE_RUN_ROOT = "nbworkers-ray"
APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT
PROBE_BYTES = 4096  # bytes of the end of the kernel's log file compared to tell a shared file system


def free_port(bind_host: str = "0.0.0.0") -> int:
    """A TCP port free on this node right now (TensorFlow's server binds it a moment later; the cluster
    relaunches the group on fresh ports when that race is lost, as for the local backend)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((bind_host, 0))
        return sock.getsockname()[1]


def log_probe(path: Path) -> tuple[int, bytes]:
    """(size, last bytes) of a file: the kernel's view of a log file, for ``same_file`` on the node (this user's
    own regular file only: a symlink or a FIFO planted at the path is (-1, b""), never followed or waited on)."""
    try:
        with os.fdopen(open_own(path), "rb") as file:
            file.seek(0, os.SEEK_END)
            size = file.tell()
            file.seek(max(0, size - PROBE_BYTES))
            return size, file.read()
    except OSError:
        return -1, b""


def same_file(path: str, probe: tuple[int, bytes]) -> bool:
    """Does ``path`` here hold what the kernel just wrote into its log file? (Same machine or a shared file
    system: the node then writes the kernel's log file itself and nothing needs copying back.) The file ends
    with the launch header the kernel wrote a moment ago, fresh ports in its TF_CONFIG included."""
    size, tail = probe
    return size > 0 and log_probe(Path(path)) == (size, tail)


def write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def usable_cwd(wanted: str, run_dir: Path) -> tuple[str, str, bool]:
    """(the worker's working directory on this node, why not ``wanted`` or "", whether ``wanted`` was refused as
    unsafe): the kernel's ``wanted`` when it
    exists here and no other user can put a module in it or swap it (``check_importable``: it goes first on the
    worker's ``sys.path``), else the run's private directory on this node."""
    where = f"on this node ({socket.gethostname()})"
    if not wanted or not os.path.isdir(wanted):
        missing = f"{wanted or 'the cell directory'} does not exist {where}; the cell runs in {run_dir}"
        return str(run_dir), missing, False
    try:
        check_importable(wanted)
    except OSError as error:
        return str(run_dir), (f"the cell does not run in {wanted} {where}: {error} It runs in the private "
                              f"directory {run_dir} instead (relative paths, e.g. a checkpoint_dir, land there)."), True
    return wanted, "", False


def node_run_dir(name: str) -> Path:
    """The run directory on a node that does not see the kernel's: under the node's temp dir, never the
    kernel's path, and private (``private_dirs``: another user's or an open ``nbworkers-ray`` is never used; on a
    file system that only looked unshared, e.g. NFS with stale attributes, the node would write the very file the
    kernel copies its log into)."""
    return private_dir(runtime_dir(NODE_RUN_ROOT) / name)


class NbworkersWorkerHost:
    """Hosts one worker on its node. Wrapped with ``ray.remote`` (threaded: ``wait`` blocks in one thread
    while ``tell``, ``read_log`` and ``kill`` answer in others) by the kernel side."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._host: subprocess.Popen | None = None
        self._log_path: Path | None = None
        self._worker_pgid: int | None = None
        self._forked: tuple[int, float] | None = None  # a forked worker: (pid, create time), see note_worker
        self._run_id = ""
        self._relay_keys: tuple[str, str] | None = None  # this node's CurveZMQ client keypair (relay_curve.py)
        self._own_run_dir: Path | None = None  # the node's run directory, when it does not share the kernel's
        self._launch = 0  # launches hosted so far: a pooled actor hosts one run's worker after another (groups/pool.py)

    # ------------------------------------------------------------------ placement
    def where(self) -> dict[str, Any]:
        """Where this actor landed: the node's address, a free port there for the worker's TensorFlow
        server, the GPUs Ray gave it, and facts for diagnosis."""
        import ray

        context = ray.get_runtime_context()

        self._relay_keys = client_keypair()  # the secret half never leaves this node
        return {
            "relay_client_key": self._relay_keys[0],
            "ip": ray.util.get_node_ip_address(),
            "port": free_port(),
            "gpus": [str(g) for g in ray.get_gpu_ids()],
            "node_id": context.get_node_id(),
            "hostname": socket.gethostname(),
            "actor_pid": os.getpid(),
            "python": sys.executable,
            "version": installed_version(),  # this node's
            "ray_tls": list(tls_of(os.environ)),  # does this node's Ray run with TLS (the raylet's environment)
        }

    # ------------------------------------------------------------------ the worker
    def start(self, request: dict[str, Any]) -> dict[str, Any]:
        """Start the worker host. ``request``: index, generation, role, grace, python ("" = this node's
        interpreter), env (the variables that make the worker: TF_CONFIG, relay, --env, ...), cwd, run_dir
        and log (the kernel's paths), probe (``log_probe`` of the kernel's log), files (name -> bytes: the
        cell and the pushed variables, written here when the node does not share the kernel's files)."""
        with self._lock:
            if self._host is not None and self._host.poll() is None:
                raise RuntimeError("this actor already hosts a running worker")
            notes = []
            shared = same_file(request["log"], request["probe"])
            env = dict(os.environ)
            env.update(request["env"])
            if env.get(wire.ENV_RELAY_SERVERKEY) and self._relay_keys is not None:
                env[wire.ENV_RELAY_CLIENTKEY], env[wire.ENV_RELAY_CLIENTSECRET] = self._relay_keys
            if shared:
                run_dir = Path(request["run_dir"])
                log_path = Path(request["log"])
            else:
                run_dir = node_run_dir(request["node_dir_name"])
                log_path = run_dir / Path(request["log"]).name
                if request["generation"] == 0:
                    os.close(open_own(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
                for name, data in request["files"].items():
                    write_atomically(run_dir / name, data)
                if request.get("state"):
                    notes.append(self._write_state(run_dir, request["state"]))
                env[wire.ENV_RUN_DIR] = str(run_dir)
                env[env_settings.SAVE_COPY_MAX_BYTES.name] = str(int(request.get("state_max_bytes") or 0))
                env[wire.ENV_CODE] = str(cell_path(run_dir))
                if env.get(wire.ENV_PUSH):
                    env[wire.ENV_PUSH] = str(push_path(run_dir))
            cwd, cwd_note, unsafe = usable_cwd(request["cwd"], run_dir)
            if cwd_note:
                notes.append(f"--- nbworkers: {cwd_note}\n")
            env[wire.ENV_CWD] = cwd
            python = request["python"] or sys.executable
            offset = log_path.stat().st_size if log_path.exists() else 0
            with os.fdopen(open_own(log_path, APPEND), "ab") as log:  # no link, no FIFO (own_files.py)
                for note in notes:
                    if note:
                        log.write(note.encode())
            zygote = request.get("zygote")  # [socket, fork timeout, connect timeout, pid or None]: zygote_actor.py
            command = host_command(python, [
                "--log", str(log_path), "--grace", str(request["grace"]), "--role", request["role"],
                *(["--zygote", zygote[0], "--zygote-timeout", str(zygote[1]), "--zygote-connect-timeout",
                   str(zygote[2])] if zygote else []),
                *(["--zygote-pid", str(zygote[3])] if zygote and len(zygote) > 3 and zygote[3] else [])])
            with os.fdopen(open_own(log_path, APPEND), "ab") as stderr:
                self._host = subprocess.Popen(  # procs.grandchild's process: the host's group and exit code
                    module_command(sys.executable, GRANDCHILD_MODULE, "--", *command), stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL, stderr=stderr, env=env, cwd=cwd, start_new_session=True, close_fds=True,
                )
            self._log_path = log_path
            self._own_run_dir = None if shared else run_dir
            self._worker_pgid, self._forked = None, None
            self._run_id = request["env"].get(RUN_ID_ENV, "")
            self._launch += 1
            return {"launch": self._launch, "shared": shared, "log": str(log_path), "offset": 0 if shared else offset,
                    "host_pid": self._host.pid, "cwd": cwd, "python": python, "cwd_refused": cwd_note if unsafe else ""}

    @staticmethod
    def _write_state(run_dir: Path, files: dict[str, bytes]) -> str:
        """The save the kernel sent, written into this node's run directory; the log's note ("" when it went well)."""
        try:
            folders = state_copy.write_tree(run_dir, files)
        except (OSError, state_copy.StateCopyError) as error:
            return f"--- nbworkers: the session's saved state could not be written on this node: {error}\n"
        return f"--- nbworkers: the session's saved state ({', '.join(folders)}) copied to this node\n"

    def read_state(self, generation: int, worker: int, max_bytes: int) -> tuple[dict[str, bytes], str]:
        """This worker's session save of ``generation`` in this node's run directory (``state_copy.read_worker_save``:
        at most ``max_bytes``, else none and why), for the kernel to keep; none when the node shares its files."""
        if self._own_run_dir is None:
            return {}, ""
        return state_copy.read_worker_save(self._own_run_dir, generation, worker, max_bytes)

    def wait(self) -> int:
        """Block until the host exits; its exit code (the worker's; 128+N when killed by signal N)."""
        host = self._host
        if host is None:
            raise RuntimeError("no worker was started")
        return host.wait()

    def tell(self, command: str, launch: int | None = None) -> None:
        """``stop`` (INT, TERM, grace, KILL the worker group) or ``stacks`` (the worker dumps its Python stacks);
        ``launch``: only if that launch is still the one hosted (a call that came late is for a run that ended)."""
        host = self._host
        if launch is not None and launch != self._launch:
            return
        if host is None or host.stdin is None or host.poll() is not None:
            return
        try:
            host.stdin.write(f"{command}\n".encode())
            host.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def note_worker(self, pid: int) -> bool:
        """The pid the worker reported (its ``hello``, relayed by the kernel): recorded with its create time when it
        is this host's forked worker — a child of a zygote (zygote_actor.py) carrying this run's id in its
        environment — so that ``kill`` reaches it too (a spawned worker is the host's own child)."""
        try:
            import psutil

            proc = psutil.Process(pid)
            parent = psutil.Process(proc.ppid())
            forked = ZYGOTE_MODULE in " ".join(parent.cmdline()) and proc.environ().get(RUN_ID_ENV) == self._run_id
            created = started_since_boot(pid)
        except Exception:
            return False
        if forked and self._run_id:
            self._forked = (pid, created)
        return forked

    def _worker_group(self) -> int | None:
        """The worker's process group: the host's child, in a session (and group) of its own, or the forked
        worker ``note_worker`` recorded (while its pid is still that process)."""
        if self._forked is not None:
            try:
                if started_since_boot(self._forked[0]) == self._forked[1]:
                    return self._forked[0]
            except Exception:
                return None
        if self._worker_pgid is None and self._host is not None:
            try:
                import psutil

                hosts = psutil.Process(self._host.pid).children()  # the host, under procs.grandchild
                children = hosts[0].children() if hosts else []
                if children:
                    self._worker_pgid = children[0].pid
            except Exception:
                pass
        return self._worker_pgid

    def kill(self, launch: int | None = None) -> None:
        """SIGKILL the host's and the worker's process groups, now (``launch``: as for ``tell``)."""
        host = self._host
        if host is None or (launch is not None and launch != self._launch):
            return
        worker_group = self._worker_group()
        if worker_group:
            kill_group(worker_group)  # SIGKILL (process_kill.py)
        if host.poll() is None:
            kill_group(host.pid)

    def release(self, grace: float) -> bool:
        """Leave nothing behind: stop the worker group (INT, TERM, ``grace``, KILL) if it still runs, reap the
        host. True when everything is gone."""
        host = self._host
        if host is None:
            return True
        if host.poll() is None:
            self.tell("stop")
            try:
                host.wait(timeout=grace + 2.0)
            except subprocess.TimeoutExpired:
                self.kill()
                try:
                    host.wait(timeout=5.0)
                except subprocess.TimeoutExpired:
                    return False
        if host.stdin:
            try:
                host.stdin.close()
            except OSError:
                pass
        return True

    # ------------------------------------------------------------------ logs
    def read_log(self, offset: int, limit: int) -> tuple[bytes, int]:
        """Up to ``limit`` bytes of the node's log file from ``offset``, and the offset after them."""
        if self._log_path is None:
            return b"", offset
        try:
            with os.fdopen(open_own(self._log_path), "rb") as file:
                file.seek(offset)
                data = file.read(limit)
        except OSError:
            return b"", offset
        return data, offset + len(data)

    def processes(self) -> list[int]:
        """Pids of the host and everything under it that still runs (diagnosis and tests)."""
        host = self._host
        if host is None or host.poll() is not None:
            return []
        try:
            import psutil

            proc = psutil.Process(host.pid)
            return [host.pid] + [child.pid for child in proc.children(recursive=True)]
        except Exception:
            return []
