"""A real Slurm on this machine for the Slurm tests (tests/integration/slurm/) and for trying ``--backend slurm`` by
hand: Debian's munge and Slurm 22.05 (``make slurm-deps`` installs them), the project's own configuration
(tests/slurm/slurm.conf.template), every daemon a child of the process that starts it, stopped by its pid (and
ended with that process, even after its ``kill -9``: ``setpriv --pdeathsig``).

- munged with a key, socket, pid, seed and log file of its own (as the ``munge`` user, in the foreground);
- slurmctld and one slurmd per node, ``slurmd -D -N n1`` / ``-N n2`` / ``-N n3``, each on a free port of 127.0.0.1
  (NodeAddr: the address the host's name resolves to, checked to be 127.0.0.x; NodeHostname the machine's name:
  Debian builds Slurm with several slurmd per host); every daemon and srun binds to that address alone
  (CommunicationParameters=NoCtldInAddrAny,NoInAddrAny), not to every interface, Slurm's default;
- partitions: ``nodes`` (the default: n1 and n2, 4 CPUs each) and ``small`` (n3 alone, 1 CPU: one job fills it);
- state, spool, pid and log files in one private temp folder (``SlurmCluster.root``; logs in ``root/log/``);
- clients (srun, salloc, sbatch, sinfo, squeue, scancel, scontrol) find it by ``SLURM_CONF`` (``cluster.env``).

Nodes are told apart by ``SLURMD_NODENAME`` (n1, n2) or ``SLURM_NODEID``, not by ``hostname`` (the same host).

By hand (as root)::

    .venv/bin/python tests/slurm_cluster.py up        # starts it, prints `export SLURM_CONF=...`, stops on Ctrl-C
    .venv/bin/python tests/slurm_cluster.py start --dir /tmp/my-slurm   # leaves it running (pids in cluster.json)
    SLURM_CONF=/tmp/my-slurm/slurm.conf srun -N2 -n2 printenv SLURMD_NODENAME
    .venv/bin/python tests/slurm_cluster.py stop --dir /tmp/my-slurm    # ends each recorded daemon by its pid

In Python: ``with running_cluster() as cluster: subprocess.run([...], env={**os.environ, **cluster.env})``.

Stopping cancels every job first (scancel; KillWait is 5 s here), then ends the slurmd's, slurmctld and munged
by their recorded pids (SIGTERM, then SIGKILL after STOP_GRACE), then any slurmstepd of this cluster still left
(a step's daemon outlives its slurmd; found by its cwd, this cluster's folder), then removes the folder.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import psutil

TEMPLATE = Path(__file__).resolve().parent / "slurm" / "slurm.conf.template"
# Debian's packages (22.05 on bookworm); `make slurm-deps` installs them, .ci/run through `make test`.
PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client")
COMMANDS = ("munged", "munge", "slurmctld", "slurmd", "srun", "salloc", "sbatch", "sinfo", "squeue", "scancel",
            "scontrol")  # fmt: skip
NODES = ("n1", "n2", "n3")
PARTITION = "nodes"  # the default partition: n1 and n2
SMALL_PARTITION = "small"  # n3 alone, one CPU
NODE_CPUS = 4  # per node of `nodes` (more than the machine has: SlurmdParameters=config_overrides)
KILL_WAIT = 5  # s between a cancelled step's SIGTERM and SIGKILL (slurm.conf KillWait; Slurm's default is 30)
START_TIMEOUT = 60.0  # s for each daemon to answer (well under a second on a quiet machine)
JOBS_GONE_TIMEOUT = 30.0  # s for the jobs left at the end to go after scancel (KillWait and some)
STOP_GRACE = 10.0  # s a daemon gets after SIGTERM before SIGKILL
MUNGE_USER = "munge"  # Debian's munge package makes it; munged refuses to run as root
# Starts tried: a daemon may lose its free port to another process between free_port() and its own bind (racy, as
# every bind-close-bind is); the failed start is stopped and the next one gets fresh ports.
START_ATTEMPTS = 2
PORT_TAKEN = "Address already in use"  # a daemon's log line when its port was taken
LOOK_TIMEOUT = 2.0  # s for one look (scontrol ping, sinfo) while the daemons start: asked again after it


def missing_commands() -> list[str]:
    """The Slurm and munge commands this machine lacks (empty: the tests can run)."""
    path = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
    return [name for name in COMMANDS if shutil.which(name, path=path) is None]


def install_hint() -> str:
    return f"apt-get install -y {' '.join(PACKAGES)} (make slurm-deps)"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _sbin(name: str) -> str:
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") or name


@dataclass
class Daemon:
    name: str
    pid: int
    create_time: float  # psutil's: the same pid later is this process only if this matches

    def process(self) -> psutil.Process | None:
        """This daemon's process while it runs (None once it ended or its pid is another process's)."""
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.create_time) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE:
                return proc
        return None


@dataclass
class SlurmCluster:
    root: Path
    ports: dict[str, int] = field(default_factory=dict)  # slurmctld and each node's slurmd
    daemons: list[Daemon] = field(default_factory=list)  # in start order
    children: dict[int, subprocess.Popen] = field(default_factory=dict)  # those this process started, to reap
    startup_seconds: dict[str, float] = field(default_factory=dict)  # munged, slurmctld, slurmd (all nodes), total
    # every daemon gets SIGTERM when the process that started it dies, even by kill -9 (setpriv --pdeathsig); off for
    # the CLI's `start`, whose daemons outlive it
    die_with_parent: bool = True

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def env(self) -> dict[str, str]:
        """What a client needs (srun, salloc, sinfo, ...): this cluster's configuration."""
        return {"SLURM_CONF": str(self.conf)}

    def client_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    # --- start -------------------------------------------------------------------------------------------------
    def write_config(self) -> None:
        """The folders, the munge key and slurm.conf (readable by every user: clients run as the test user)."""
        self.root.chmod(0o755)
        for sub in ("state", "run"):
            (self.root / sub).mkdir(mode=0o700)
        for sub in ("spool", "log"):  # spool: a batch job's script is run from it as the job's user
            (self.root / sub).mkdir(mode=0o755)
        munge = pwd.getpwnam(MUNGE_USER)
        munge_dir = self.root / "munge"
        munge_dir.mkdir(mode=0o755)
        os.chown(munge_dir, munge.pw_uid, munge.pw_gid)
        key = munge_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        os.chown(key, munge.pw_uid, munge.pw_gid)
        hostname = socket.gethostname()
        address = socket.gethostbyname(hostname)  # what CommunicationParameters=NoInAddrAny binds every daemon to
        if not address.startswith("127.0.0."):
            raise RuntimeError(f"this host's name {hostname!r} resolves to {address}: the test Slurm's daemons bind to "
                               "the address the host's name resolves to, and they must stay on 127.0.0.x (a line "
                               f"'127.0.0.1 {hostname}' in /etc/hosts before any other for {hostname} does it)")
        self.ports = {"ctld": free_port(), **{node: free_port() for node in NODES}}
        values = {
            "hostname": hostname, "address": address, "root": str(self.root), "munge_socket": str(self.munge_socket),
            "ctld_port": self.ports["ctld"], "node_cpus": NODE_CPUS, "kill_wait": KILL_WAIT,
            **{f"{node}_port": self.ports[node] for node in NODES},
        }  # fmt: skip
        self.conf.write_text(string.Template(TEMPLATE.read_text()).substitute(values))
        self.conf.chmod(0o644)

    def _spawn(self, name: str, argv: list[str], setpriv: tuple[str, ...] = ()) -> Daemon:
        """Start a daemon in the foreground, its output into log/NAME.out; ``setpriv``: its options (another user)."""
        if self.die_with_parent:
            setpriv = (*setpriv, "--pdeathsig", "TERM")
        if setpriv:
            argv = ["setpriv", *setpriv, *argv]
        out = open(self.log_dir / f"{name}.out", "ab")
        with out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=self.root, env={**os.environ, **self.env}, start_new_session=True)  # fmt: skip
        self.children[proc.pid] = proc
        with contextlib.suppress(psutil.Error):
            daemon = Daemon(name, proc.pid, psutil.Process(proc.pid).create_time())
            self.daemons.append(daemon)
            return daemon
        raise RuntimeError(f"{name} ended at once: {self.tail(name)}")

    def tail(self, name: str, lines: int = 20) -> str:
        """The last lines of a daemon's output and of its Slurm log (for an error message)."""
        found = []
        for path in (self.log_dir / f"{name}.out", self.log_dir / f"{name}.log"):
            if path.exists():
                found.append(f"--- {path}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(found) or "(no output)"

    def _wait(self, what: str, ready, daemons: list[Daemon]) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            for daemon in daemons:
                if daemon.process() is None:
                    raise RuntimeError(f"{daemon.name} ended before {what}:\n{self.tail(daemon.name)}")
                if PORT_TAKEN in self.tail(daemon.name):  # it retries its bind for ~20 s before it gives up
                    raise RuntimeError(f"{daemon.name}'s port was taken before it bound it:\n{self.tail(daemon.name)}")
            with contextlib.suppress(subprocess.TimeoutExpired):  # a client waits for a daemon that is not up yet
                if ready():
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not after {START_TIMEOUT:.0f} s:\n"
                                   + "\n".join(self.tail(d.name) for d in daemons))  # fmt: skip
            time.sleep(0.05)

    def client(self, *argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """A Slurm command as this process's user (root) on this cluster."""
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=self.client_env())

    def as_user(self, uid: int, gid: int, home: Path, *argv: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        """A command (srun, salloc, sbatch...) as another user (``setpriv``), in its home, with a plain environment
        and this cluster's SLURM_CONF."""
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", **self.env}
        return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv], cwd=home,
                              env=env, capture_output=True, text=True, timeout=timeout)  # fmt: skip

    def jobs(self) -> list[str]:
        """The jobs Slurm still has (pending, running or completing): ``JOBID STATE USER NAME`` each."""
        return self.client("squeue", "-h", "-o", "%i %T %u %j", timeout=10).stdout.splitlines()

    def _munge_works(self) -> bool:
        if not self.munge_socket.exists():
            return False
        cred = subprocess.run(["munge", "-n", "-S", str(self.munge_socket)], capture_output=True, timeout=10)
        return cred.returncode == 0 and subprocess.run(
            ["unmunge", "-S", str(self.munge_socket)], input=cred.stdout, capture_output=True, timeout=10
        ).returncode == 0

    def node_states(self) -> dict[str, str]:
        """Each node's state as sinfo says it (idle, alloc, mix, down*, ...); empty when slurmctld does not answer."""
        answer = self.client("sinfo", "-h", "-N", "-o", "%N %T", timeout=LOOK_TIMEOUT)
        return dict(line.split(maxsplit=1) for line in answer.stdout.splitlines() if " " in line) if (
            answer.returncode == 0) else {}  # fmt: skip

    def start(self) -> "SlurmCluster":
        started = time.monotonic()
        self.write_config()
        munge = pwd.getpwnam(MUNGE_USER)
        munge_dir = self.root / "munge"
        munged = self._spawn("munged", [
            _sbin("munged"), "--foreground", f"--socket={self.munge_socket}", f"--key-file={munge_dir / 'munge.key'}",
            f"--pid-file={munge_dir / 'munged.pid'}", f"--seed-file={munge_dir / 'munged.seed'}",
            f"--log-file={munge_dir / 'munged.log'}",
        ], setpriv=(f"--reuid={munge.pw_uid}", f"--regid={munge.pw_gid}", "--clear-groups"))  # fmt: skip
        self._wait("munged answers", self._munge_works, [munged])
        self.startup_seconds["munged"] = time.monotonic() - started
        mark = time.monotonic()
        ctld = self._spawn("slurmctld", [_sbin("slurmctld"), "-D", "-f", str(self.conf)])
        self._wait("slurmctld answers",
                   lambda: "UP" in self.client("scontrol", "ping", timeout=LOOK_TIMEOUT).stdout, [ctld])  # fmt: skip
        self.startup_seconds["slurmctld"] = time.monotonic() - mark
        mark = time.monotonic()
        slurmds = [self._spawn(f"slurmd-{node}", [_sbin("slurmd"), "-D", "-N", node, "-f", str(self.conf)])
                   for node in NODES]  # fmt: skip
        self._wait("every node idle", lambda: all(state == "idle" for state in self.node_states().values())
                   and len(self.node_states()) == len(NODES), [ctld, *slurmds])  # fmt: skip
        self.startup_seconds["slurmd"] = time.monotonic() - mark
        self.startup_seconds["total"] = time.monotonic() - started
        return self

    # --- stop --------------------------------------------------------------------------------------------------
    def cancel_all_jobs(self) -> None:
        """scancel every job of this cluster and wait (up to JOBS_GONE_TIMEOUT) until none is left."""
        if not any(daemon.name == "slurmctld" and daemon.process() for daemon in self.daemons):
            return  # no slurmctld, no job (and squeue would wait for it in vain)
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            jobs = self.client("squeue", "-h", "-o", "%i", timeout=10).stdout.split()
            if jobs:
                self.client("scancel", *jobs, timeout=10)
            deadline = time.monotonic() + JOBS_GONE_TIMEOUT
            while jobs and time.monotonic() < deadline:
                time.sleep(0.2)
                jobs = self.client("squeue", "-h", "-o", "%i", timeout=10).stdout.split()

    def stepds(self) -> list[psutil.Process]:
        """The slurmstepd processes of this cluster (a step's daemon): started by its slurmd, they work in its folder
        (their cwd; their environment is overwritten by their process title, so SLURM_CONF cannot be read there)."""
        found = []
        for proc in psutil.process_iter(["name"]):
            with contextlib.suppress(psutil.Error):
                if proc.info["name"] == "slurmstepd" and Path(proc.cwd()) == self.root:
                    found.append(proc)
        return found

    def stop(self) -> list[str]:
        """Cancel the jobs, end every daemon by its pid, then this cluster's leftover slurmstepds; remove the
        folder. Returns what had to be killed (SIGKILL) or was left over: empty on a clean stop."""
        problems: list[str] = []
        self.cancel_all_jobs()
        # the slurmd's, then slurmctld, then munged (the others need it to the end)
        for group in (lambda d: d.name.startswith("slurmd"), lambda d: d.name == "slurmctld",
                      lambda d: d.name == "munged"):  # fmt: skip
            procs = {daemon.name: proc for daemon in self.daemons if group(daemon) and (proc := daemon.process())}
            for proc in procs.values():
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(signal.SIGTERM)
            _, alive = psutil.wait_procs(list(procs.values()), timeout=STOP_GRACE)
            for name, proc in procs.items():
                if proc in alive:
                    problems.append(f"{name} (pid {proc.pid}) did not end on SIGTERM: killed")
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
            psutil.wait_procs(alive, timeout=STOP_GRACE)
        for pid, child in list(self.children.items()):  # reap them
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=1)
                del self.children[pid]
        leftover = []
        for stepd in self.stepds():  # with the job's processes it started (a step's tasks)
            with contextlib.suppress(psutil.Error):
                leftover += [stepd, *stepd.children(recursive=True)]
        for proc in leftover:
            with contextlib.suppress(psutil.Error):
                problems.append(f"left: pid {proc.pid} {' '.join(proc.cmdline())}: killed")
                proc.kill()
        psutil.wait_procs(leftover, timeout=STOP_GRACE)
        shutil.rmtree(self.root, ignore_errors=True)
        return problems

    # --- a cluster started by one process and stopped by another (the CLI's start/stop) ------------------------
    def save(self) -> None:
        record = {"ports": self.ports, "daemons": [vars(d) for d in self.daemons], "startup": self.startup_seconds}
        (self.root / "cluster.json").write_text(json.dumps(record, indent=1))

    @classmethod
    def load(cls, root: Path) -> "SlurmCluster":
        record = json.loads((root / "cluster.json").read_text())
        return cls(root, record["ports"], [Daemon(**d) for d in record["daemons"]], {}, record["startup"])


def new_root(parent: str | None = None) -> Path:
    return Path(tempfile.mkdtemp(prefix="nbworkers-slurm-", dir=parent))


def started_cluster(root: Path | None = None, die_with_parent: bool = True) -> SlurmCluster:
    """A started cluster in ``root`` (default: a new temp folder). A start that fails is stopped (every daemon it
    started, the folder removed) and tried again on fresh ports, START_ATTEMPTS times in all."""
    errors = []
    for _ in range(START_ATTEMPTS):
        cluster = SlurmCluster(root or new_root(), die_with_parent=die_with_parent)
        cluster.root.mkdir(parents=True, exist_ok=True)
        try:
            return cluster.start()
        except RuntimeError as error:
            errors.append(str(error))
            cluster.stop()
        except BaseException:
            cluster.stop()
            raise
    raise RuntimeError(f"the test Slurm did not start ({START_ATTEMPTS} tries):\n" + "\n---\n".join(errors))


@contextlib.contextmanager
def running_cluster(root: Path | None = None, problems: list[str] | None = None) -> Iterator[SlurmCluster]:
    """A started cluster (``started_cluster``), stopped (every daemon by its pid) and removed at the end. What the
    stop had to kill goes into ``problems`` (printed when it is None)."""
    missing = missing_commands()
    if missing:
        raise RuntimeError(f"Slurm is not installed (no {', '.join(missing)}): {install_hint()}")
    if os.geteuid() != 0:
        raise RuntimeError("the test Slurm's daemons run as root (slurmd starts each job as its user): run as root")
    cluster = started_cluster(root)
    try:
        yield cluster
    finally:
        found = cluster.stop()
        if problems is not None:
            problems.extend(found)
        elif found:
            print("slurm_cluster: " + "; ".join(found), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("command", choices=("up", "start", "stop"),
                        help="up: start, print the environment, stop on Ctrl-C or SIGTERM; start: start and leave it "
                             "running (pids in DIR/cluster.json); stop: stop the one started in DIR")  # fmt: skip
    parser.add_argument("--dir", type=Path, help="the cluster's folder (start: new, empty or absent; default: a new "
                                                 "temp folder)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.command == "stop":
        if args.dir is None or not (args.dir / "cluster.json").exists():
            parser.error("stop needs --dir, the folder a `start` printed (it holds cluster.json)")
        problems = SlurmCluster.load(args.dir).stop()
        print("\n".join(problems) or f"stopped; {args.dir} removed")
        return 1 if problems else 0
    root = args.dir or new_root()
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        parser.error(f"{root} is not empty")
    if args.command == "start":
        cluster = started_cluster(root, die_with_parent=False)
        cluster.save()
        print(f"export SLURM_CONF={cluster.conf}\n# up in {cluster.startup_seconds['total']:.2f} s; "
              f"stop: {sys.executable} {__file__} stop --dir {root}")  # fmt: skip
        return 0
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    with running_cluster(root) as cluster:
        print(f"export SLURM_CONF={cluster.conf}\n# up in {cluster.startup_seconds['total']:.2f} s "
              f"({', '.join(f'{k} {v:.2f} s' for k, v in cluster.startup_seconds.items())}); Ctrl-C stops it",
              flush=True)  # fmt: skip
        with contextlib.suppress(KeyboardInterrupt):
            while not stop:
                time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
