"""A real JupyterHub for tests/integration/test_jupyterhub.py: real Unix users, the hub as root, its proxy from npm.

- ``unix_users(prefix, names)``: ``useradd -m`` users with random passwords (``chpasswd``); at the end their
  processes are killed by pid (only theirs: the users are new) and ``userdel -r`` removes them with their homes.
- ``jupyterhub(...)``: the hub from this interpreter's venv (``python -m jupyterhub``), its database, cookie secret
  and config in a root-only (0700) temp dir, on free 127.0.0.1 ports, with the LocalProcessSpawner (each user's
  ``jupyterhub-singleuser`` from the same venv, as the user) and PAM (``pamela``) or, where PAM cannot log a user
  in, the DummyAuthenticator with one shared password. Stopped with SIGTERM, so its ``cleanup_servers`` stops the
  users' servers.
- ``as_user(user, code)``: Python code run with the user's uid and gid (``setpriv``), its JSON answer.

The proxy is ``build/hub-proxy/node_modules/.bin/configurable-http-proxy`` (``make hub-deps``).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import psutil

REPO = Path(__file__).resolve().parent.parent
PROXY = REPO / "build" / "hub-proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
VENV_BIN = Path(sys.executable).parent  # the hub's environment: this interpreter's venv (not resolved: a symlink)
HUB_START_TIMEOUT = 120.0  # s for the hub and its proxy to answer /hub/health
SPAWN_TIMEOUT = 240  # s for a user's server to start (Spawner.start_timeout / http_timeout; 2 shared cores)
USER_EXIT_TIMEOUT = 60.0  # s for the users' processes to end after the hub's shutdown


@dataclass
class UnixUser:
    name: str
    password: str
    uid: int
    gid: int
    home: Path


@dataclass
class Hub:
    url: str  # the proxy's public URL, http://127.0.0.1:PORT
    proc: subprocess.Popen
    log_path: Path
    authenticator: str  # "pam" or "dummy"
    why: str  # why that authenticator
    users: dict[str, UnixUser] = field(default_factory=dict)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def as_user(user: UnixUser, code: str, *args: str) -> Any:
    """Run ``code`` (which prints one JSON value last) with ``args`` as ``user``; returns that value."""
    result = subprocess.run(
        ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", sys.executable, "-I", "-c", code,
         *args],
        capture_output=True, text=True, timeout=120, cwd="/", env={"PATH": "/usr/bin:/bin", "HOME": str(user.home)},
    )  # fmt: skip
    assert result.returncode == 0, f"as {user.name}: exit {result.returncode}\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def processes_of(uids: set[int]) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["pid", "uids"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["uids"] and proc.info["uids"].real in uids:
                found.append(proc)
    return found


def kill_by_pid(procs: list[psutil.Process]) -> list[str]:
    """SIGKILL these processes (each by pid, checked to be the same process); what was killed."""
    killed = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            if proc.is_running():
                killed.append(f"{proc.pid} {' '.join(proc.cmdline())[:200]}")
                proc.kill()
    psutil.wait_procs(procs, timeout=10)
    return killed


@contextlib.contextmanager
def unix_users(prefix: str, names: list[str]) -> Iterator[dict[str, UnixUser]]:
    """New Unix users ``<prefix><name>`` with homes and random passwords; removed afterwards (processes first)."""
    made: dict[str, UnixUser] = {}
    try:
        for name in names:
            login = f"{prefix}{name}"
            subprocess.run(["useradd", "-m", "-s", "/bin/bash", login], check=True, capture_output=True)
            password = secrets.token_urlsafe(12)
            entry = pwd.getpwnam(login)
            made[name] = UnixUser(login, password, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))
            subprocess.run(["chpasswd"], input=f"{login}:{password}\n", text=True, check=True, capture_output=True)
        yield made
    finally:
        left = kill_by_pid(processes_of({u.uid for u in made.values()}))
        for user in made.values():
            subprocess.run(["userdel", "-r", user.name], capture_output=True)
        assert not left, f"processes of the test's users were left and killed: {left}"


def pam_works(user: UnixUser) -> tuple[bool, str]:
    """Whether PAM (pamela, JupyterHub's default PAMAuthenticator, service ``login``) accepts this user's password."""
    try:
        import pamela

        pamela.authenticate(user.name, user.password, service="login")
        pamela.check_account(user.name, service="login")
    except Exception as error:  # pamela.PAMError, or no libpam
        return False, f"PAM refused a fresh user's password here: {error}"
    return True, "PAM (pamela, service 'login') accepted the test users' passwords"


def write_as(user: UnixUser, path: Path, text: str) -> None:
    """Write a file under the user's home, owned by the user (directories too)."""
    for parent in reversed([p for p in path.parents if user.home in p.parents]):
        if not parent.exists():
            parent.mkdir(mode=0o755)
            os.chown(parent, user.uid, user.gid)
    path.write_text(text)
    os.chown(path, user.uid, user.gid)


def hub_config(state: Path, ports: dict[str, int], users: dict[str, UnixUser], authenticator: str,
               shared_password: str) -> str:
    singleuser = VENV_BIN / "jupyterhub-singleuser"
    lines = [
        f"c.JupyterHub.bind_url = 'http://127.0.0.1:{ports['public']}'",
        f"c.JupyterHub.hub_bind_url = 'http://127.0.0.1:{ports['hub']}'",
        f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{ports['proxy_api']}'",
        f"c.ConfigurableHTTPProxy.command = [{str(PROXY)!r}]",
        f"c.JupyterHub.db_url = 'sqlite:///{state}/jupyterhub.sqlite'",
        f"c.JupyterHub.cookie_secret_file = '{state}/jupyterhub_cookie_secret'",
        f"c.JupyterHub.pid_file = '{state}/jupyterhub.pid'",
        "c.JupyterHub.cleanup_servers = True",
        "c.JupyterHub.cleanup_proxy = True",
        "c.JupyterHub.spawner_class = 'localprocess'",
        f"c.Spawner.cmd = [{str(singleuser)!r}]",
        "c.Spawner.default_url = '/lab'",
        "c.Spawner.notebook_dir = '~'",
        f"c.Spawner.start_timeout = {SPAWN_TIMEOUT}",
        f"c.Spawner.http_timeout = {SPAWN_TIMEOUT}",
        "c.Spawner.environment = {'NBWORKERS_ZYGOTE_PREWARM': '0'}",
        "c.Spawner.args = ['--LabApp.news_url=None', "
        "'--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate', '--LabApp.expose_app_in_browser=True']",
        f"c.Authenticator.allowed_users = {sorted(u.name for u in users.values())!r}",
    ]
    if authenticator == "pam":
        lines += ["c.JupyterHub.authenticator_class = 'pam'", "c.PAMAuthenticator.open_sessions = False"]
    else:
        lines += ["c.JupyterHub.authenticator_class = 'dummy'", f"c.DummyAuthenticator.password = {shared_password!r}"]
    return "\n".join(lines) + "\n"


def wait_healthy(url: str, proc: subprocess.Popen, log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyterhub exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
        with contextlib.suppress(OSError, urllib.error.URLError):
            with urllib.request.urlopen(f"{url}/hub/health", timeout=5) as response:
                if response.status == 200:
                    return
        if time.monotonic() > deadline:
            raise TimeoutError(f"jupyterhub did not answer in {timeout} s:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.5)


def stop_hub(proc: subprocess.Popen, uids: set[int]) -> None:
    """SIGTERM: the hub stops every user's server (cleanup_servers) and its proxy, then exits; KILL after a
    minute. Then wait for the users' processes (servers, kernels, zygotes) to end; a child of the hub's still
    running as root (the proxy) is killed by pid."""
    children: list[psutil.Process] = []
    with contextlib.suppress(psutil.Error):
        children = psutil.Process(proc.pid).children(recursive=True)
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(USER_EXIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    deadline = time.monotonic() + USER_EXIT_TIMEOUT
    while processes_of(uids) and time.monotonic() < deadline:
        time.sleep(0.5)
    kill_by_pid([child for child in children if runs_as_root(child)])


def runs_as_root(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.uids().real == 0
    except psutil.Error:
        return False


@contextlib.contextmanager
def jupyterhub(users: dict[str, UnixUser], work: Path) -> Iterator[Hub]:
    """The hub, as root, for ``users``; ``work`` gets its log. Stopped (servers cleaned up) afterwards."""
    pam_ok, why = pam_works(next(iter(users.values())))
    shared_password = secrets.token_urlsafe(12)
    if not pam_ok:
        for user in users.values():
            user.password = shared_password
    state = Path(tempfile.mkdtemp(prefix="nbworkers-hub-"))  # 0700, root's: database, cookie secret, config
    ports = {"public": free_port(), "hub": free_port(), "proxy_api": free_port()}
    config = state / "jupyterhub_config.py"
    config.write_text(hub_config(state, ports, users, "pam" if pam_ok else "dummy", shared_password))
    log_path = work / "jupyterhub.log"
    log = open(log_path, "wb")
    env = {"PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/root",
           "CONFIGPROXY_AUTH_TOKEN": secrets.token_hex(32)}  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=state, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    hub = Hub(f"http://127.0.0.1:{ports['public']}", proc, log_path, "pam" if pam_ok else "dummy", why, users)
    try:
        wait_healthy(hub.url, proc, log_path, HUB_START_TIMEOUT)
        yield hub
    finally:
        stop_hub(proc, {u.uid for u in users.values()})
        log.close()
        subprocess.run(["rm", "-rf", str(state)], check=False)
