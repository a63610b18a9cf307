"""nbworkers on a shared machine behind a real JupyterHub: two real Unix users, each in Debian's chromium.

The hub (from this interpreter's venv, where nbworkers is installed from its wheel) runs as root with its
default LocalProcessSpawner: each user's ``jupyterhub-singleuser`` runs as that user, from the same venv. Each
user logs in (PAM, or the DummyAuthenticator where PAM cannot log a user in: the report says which), opens
JupyterLab, runs ``%load_ext nbworkers`` and a 2-worker run whose workers listen on their ``TF_CONFIG`` port (as
TensorFlow's gRPC server would) and report steps. Then:

- each user's sidebar and REST API (``/user/<name>/nbworkers/api/clusters``, with the user's own hub token) list
  only that user's run; the other user's token is refused by the hub (403) on ``/user/<other>/...``, for reading
  and for stopping (DELETE), and the run goes on;
- as the other user's uid, the run's directory and ``state.json`` cannot be read and its workers not signalled;
- no worker port of one user answers the other user (on every address of the machine), while it answers inside
  the run's own network namespace;
- user A stops the run from the sidebar, user B with ``%workers stop``: nothing of either run is left (no
  process, no namespace holder, nothing in the workers' namespaces).

Users, homes and every process of theirs go afterwards (the hub's ``cleanup_servers``, then by pid).
Needs root, ``setpriv``, ``useradd``, ``make installed-env hub-deps`` (jupyterhub, configurable-http-proxy) and chromium.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys

import psutil
import pytest
from browser_helpers import (
    SIDEBAR,
    cell_executed,
    chromium_page,
    run_cell,
    wait_kernel_idle,
    wait_sidebar_row,
    write_notebook,
)
from browser_helpers import sidebar_row as row
from hub_helpers import PROXY, VENV_BIN, Hub, UnixUser, as_user, jupyterhub, processes_of, unix_users, write_as

pytestmark = [pytest.mark.installed, pytest.mark.browser, pytest.mark.hub,
              pytest.mark.timeout(900)]  # hub, two spawns, two kernels and runs, stops, shutdown: ~2.5 min here

RUN_TIMEOUT_MS = 300_000  # a user's server spawn, kernel start, zygote, two workers up (2 shared cores)
STOP_TIMEOUT_MS = 90_000
NETNS_HOLDER = "protocol/private/netns.py"

# Two workers that listen on their TF_CONFIG port as TensorFlow's gRPC server would (0.0.0.0), and report a step
# every 0.2 s for ten minutes: cheap, no TensorFlow.
RUN_CELL = """%%worker -n 2 --name {name}
import json, os, socket, time
from nbworkers.distlib import report
config = json.loads(os.environ["TF_CONFIG"])
port = int(config["cluster"][config["task"]["type"]][config["task"]["index"]].rsplit(":", 1)[1])
server = socket.create_server(("0.0.0.0", port), backlog=16)
print("listening on", port, flush=True)
for step in range(1, 3001):
    report(epoch=1, epochs_total=1, step=step, steps_total=3000, loss=1.0 / step)
    time.sleep(0.2)
"""

# As some user: try to read a run directory and its state.json, and to signal its workers.
PRY = """
import json, os, sys
run_dir, pids = sys.argv[1], [int(p) for p in sys.argv[2].split(",")]
out = {}
for what, act in (("listdir", lambda: os.listdir(run_dir)), ("state", lambda: open(run_dir + "/state.json").read()),
                  *((f"kill {p}", lambda p=p: os.kill(p, 0)) for p in pids)):
    try:
        act()
        out[what] = "allowed"
    except PermissionError:
        out[what] = "refused"
    except OSError as e:
        out[what] = type(e).__name__
print(json.dumps(out))
"""

# Connect to each (address, port): "open" or why not.
CONNECT = """
import json, socket, sys
out = {}
for host, port in json.loads(sys.argv[1]):
    try:
        socket.create_connection((host, port), timeout=5).close()
        out[f"{host}:{port}"] = "open"
    except OSError as e:
        out[f"{host}:{port}"] = type(e).__name__
print(json.dumps(out))
"""


def required(ok: bool, reason: str) -> None:
    """Skip with ``reason`` outside CI; under CI (CI=true) a missing piece fails the test instead."""
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def check_prerequisites() -> None:
    required(os.geteuid() == 0 and bool(shutil.which("setpriv")) and bool(shutil.which("useradd")),
             "a JupyterHub with real users needs root, setpriv and useradd")
    required(PROXY.exists(), f"{PROXY} missing: run `make hub-deps` (configurable-http-proxy)")
    required((VENV_BIN / "jupyterhub-singleuser").exists(),
             f"jupyterhub is not installed in {VENV_BIN.parent}: run `make installed-env`")
    # the users run this venv's Python: it must work for them as it does for root (a venv made from a Python
    # under /root would run with another standard library, or not at all, as another user)
    probe = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                            str(VENV_BIN / "python"), "-c", "import sys, nbworkers; print(sys.version)"],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    required(probe.returncode == 0 and probe.stdout.strip() == sys.version,
             f"the hub's environment {VENV_BIN.parent} does not run as another user as it does as root "
             f"({probe.stdout.strip() or probe.stderr.strip()[-300:]!r} vs {sys.version!r}): make it from a Python "
             "every user can read (a venv's interpreter under /root is root's only), e.g. `rm -rf .venv-installed && "
             "make installed-env hub-deps INSTALLED_PYTHON=/usr/bin/python3`")


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    check_prerequisites()
    work = tmp_path_factory.mktemp("hub")
    with unix_users(f"nbwh{secrets.token_hex(3)}", ["a", "b"]) as users:
        for user in users.values():
            prepare_home(user)
        with jupyterhub(users, work) as running:
            print(f"\nauthenticator: {running.authenticator} ({running.why}); the hub's log: {running.log_path}")
            yield running


def prepare_home(user: UnixUser) -> None:
    """The notebook in the user's home, and JupyterLab's news and update pop-ups off (files owned by the user)."""
    name = f"run-{user.name[-1]}"
    notebook = user.home / "hub.ipynb"
    write_notebook(notebook, ["%load_ext nbworkers", RUN_CELL.format(name=name), f"%workers stop {name}"])
    os.chown(notebook, user.uid, user.gid)
    settings = user.home / ".jupyter/lab/user-settings/@jupyterlab/apputils-extension/notification.jupyterlab-settings"
    write_as(user, settings, json.dumps({"fetchNews": "false", "checkForUpdates": False}))


def wait_row(page, name: str, condition: str, timeout_ms: int = RUN_TIMEOUT_MS) -> None:
    wait_sidebar_row(page, name, condition, timeout_ms)


def sidebar_names(page) -> list[str]:
    return page.evaluate(f"() => [...document.querySelectorAll('{SIDEBAR} .nbw-sb-row')].map(r => r.dataset.name)")


def log_in_and_start(page, hub: Hub, user: UnixUser) -> None:
    """Log in on the hub's page, wait for JupyterLab, open hub.ipynb, run %load_ext and the %%worker cell, show
    the sidebar and wait for the run's row to be running with steps."""
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user.name)
    page.fill("#password_input", user.password)
    page.click("#login_submit")
    page.wait_for_url(re.compile(rf".*/user/{user.name}/lab.*"), timeout=RUN_TIMEOUT_MS)
    page.goto(f"{hub.url}/user/{user.name}/lab/tree/hub.ipynb")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=RUN_TIMEOUT_MS)
    wait_kernel_idle(page, RUN_TIMEOUT_MS)
    run_cell(page, 0)
    cell_executed(page, 0, RUN_TIMEOUT_MS)
    run_cell(page, 1)
    cell_executed(page, 1, RUN_TIMEOUT_MS)
    page.evaluate("() => window.jupyterapp.commands.execute('nbworkers:open-sidebar')")
    page.wait_for_selector(SIDEBAR, state="visible")
    wait_row(page, f"run-{user.name[-1]}", "r.dataset.status === 'running' && Number(r.dataset.step) > 0")


def hub_token(page, hub: Hub, user: UnixUser) -> str:
    """An API token of the user's, made through the hub's REST API with the user's own logged-in session (in a
    second tab: JupyterLab stays open in the first)."""
    tab = page.context.new_page()
    tab.goto(f"{hub.url}/hub/token")
    tab.close()
    xsrf = next(c["value"] for c in page.context.cookies(f"{hub.url}/hub/") if c["name"] == "_xsrf"
                and c["path"].startswith("/hub"))  # (the user's server sets one for /user/<name>/ too)
    response = page.request.post(f"{hub.url}/hub/api/users/{user.name}/tokens", headers={"X-XSRFToken": xsrf},
                                 data={"note": "nbworkers hub test", "expires_in": 3600})  # fmt: skip
    assert response.status == 201, (response.status, response.text())
    return response.json()["token"]


def api(page, hub: Hub, token: str, method: str, path: str) -> tuple[int, str]:
    response = page.request.fetch(f"{hub.url}{path}", method=method, headers={"Authorization": f"token {token}"},
                                  max_redirects=0)  # fmt: skip
    return response.status, response.text()


def run_facts(user: UnixUser, name: str) -> dict:
    """Read as root from the user's run files: the run dir, its workers' pids, TF_CONFIG ports and namespaces."""
    run_dir = user.home / ".nbworkers" / "runs" / name
    state = json.loads((run_dir / "state.json").read_text())
    pids = [w["pid"] for w in state["workers"]]
    ports = []
    for i in range(len(pids)):
        config = json.loads(re.findall(r"TF_CONFIG=(\{.*\})", (run_dir / f"worker-{i}.log").read_text())[-1])
        ports.append(int(config["cluster"][config["task"]["type"]][config["task"]["index"]].rsplit(":", 1)[1]))
    namespaces = {kind: {os.stat(f"/proc/{pid}/ns/{kind}").st_ino for pid in pids} for kind in ("net", "user")}
    return {"run_dir": run_dir, "state": state, "pids": pids, "ports": ports, "namespaces": namespaces}


def machine_addresses() -> list[str]:
    return sorted({a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs
                   if a.family.name == "AF_INET"} | {"127.0.0.1"})  # fmt: skip


def connect_inside(pid: int, ports: list[int]) -> dict:
    """Connect to ``ports`` on 127.0.0.1 from inside ``pid``'s network namespace (as root, nsenter)."""
    targets = json.dumps([["127.0.0.1", p] for p in ports])
    result = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", str(VENV_BIN / "python"), "-I", "-c", CONNECT,
                             targets], capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return json.loads(result.stdout)


def leftovers(user: UnixUser, facts: dict) -> list[str]:
    """What is left of a stopped run: processes of its run dir or its namespace holder, or in its namespaces."""
    from nbworkers.procs.strays import processes_under

    found = [f"{p.pid} (run dir)" for p in processes_under(facts["run_dir"])]
    for proc in processes_of({user.uid}):
        try:
            if any(NETNS_HOLDER in part for part in proc.cmdline()):
                found.append(f"{proc.pid} (namespace holder)")
            elif os.stat(f"/proc/{proc.pid}/ns/net").st_ino in facts["namespaces"]["net"]:
                found.append(f"{proc.pid} (in the run's network namespace)")
        except (psutil.Error, OSError):
            continue
    return found


def test_two_users_on_one_hub_see_and_reach_only_their_own_runs(hub):
    from nbworkers.kernel_driver import wait_until

    a, b = hub.users["a"], hub.users["b"]
    with chromium_page(viewport=(1400, 900)) as page_a:
        page_b = page_a.context.browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        log_in_and_start(page_a, hub, a)
        log_in_and_start(page_b, hub, b)

        # the sidebar: each user's only lists that user's run (read after a poll that came once both runs were up)
        for page, own in ((page_a, "run-a"), (page_b, "run-b")):
            before = page.get_attribute(row(own), "data-step")
            wait_row(page, own, f"r.dataset.step !== {before!r}", 60_000)
        assert sidebar_names(page_a) == ["run-a"], sidebar_names(page_a)
        assert sidebar_names(page_b) == ["run-b"], sidebar_names(page_b)

        # the REST API through the hub, with each user's own token; the other user's server refuses it (403)
        token_a, token_b = hub_token(page_a, hub, a), hub_token(page_b, hub, b)
        for user, token, own in ((a, token_a, "run-a"), (b, token_b, "run-b")):
            status, body = api(page_a, hub, token, "GET", f"/user/{user.name}/nbworkers/api/clusters")
            assert status == 200, (status, body)
            assert [c["name"] for c in json.loads(body)["clusters"]] == [own], body
        for token, other, theirs in ((token_a, b, "run-b"), (token_b, a, "run-a")):
            for method, path in (("GET", "/nbworkers/api/clusters"), ("GET", f"/nbworkers/api/clusters/{theirs}"),
                                 ("GET", f"/nbworkers/api/clusters/{theirs}/logs/0"),
                                 ("DELETE", f"/nbworkers/api/clusters/{theirs}")):  # fmt: skip
                status, body = api(page_a, hub, token, method, f"/user/{other.name}{path}")
                assert status == 403, (method, path, status, body[:500])
                assert theirs not in body
        # (and A's browser session, sent to B's server, is turned away by the hub's OAuth: A may not use it)
        response = page_a.request.get(f"{hub.url}/user/{b.name}/nbworkers/api/clusters")
        assert response.status == 403 and "run-b" not in response.text(), (response.status, response.url)

        facts = {"a": run_facts(a, "run-a"), "b": run_facts(b, "run-b")}
        for key in ("a", "b"):
            assert facts[key]["state"]["status"] == "running", facts[key]["state"]  # the DELETEs stopped nothing

        # as the other user's uid: the run directory, its state.json and its workers are out of reach
        for user, other in ((a, "b"), (b, "a")):
            run_dir, pids = str(facts[other]["run_dir"]), ",".join(map(str, facts[other]["pids"]))
            pried = as_user(user, PRY, run_dir, pids)
            assert set(pried.values()) == {"refused"}, pried

        # the workers' ports: open inside the run's own namespace, refused to the other user everywhere
        host_net = os.stat("/proc/self/ns/net").st_ino
        for user, other in ((a, "b"), (b, "a")):
            theirs = facts[other]
            assert len(theirs["namespaces"]["net"]) == 1 and host_net not in theirs["namespaces"]["net"], theirs
            inside = connect_inside(theirs["pids"][0], theirs["ports"])
            assert set(inside.values()) == {"open"}, inside
            targets = [[address, port] for address in machine_addresses() for port in theirs["ports"]]
            tried = as_user(user, CONNECT, json.dumps(targets))
            assert "open" not in tried.values(), tried
        user_ns = os.stat("/proc/self/ns/user").st_ino
        print("isolation:", {k: {"own network namespace": True,
                                 "own user namespace": user_ns not in facts[k]["namespaces"]["user"]}
                             for k in facts})  # fmt: skip

        # A stops from the sidebar, B with %workers stop: nothing of either run is left
        page_a.click(f"{row('run-a')} .nbw-sb-stop")
        wait_row(page_a, "run-a", "r.dataset.status === 'stopped'", STOP_TIMEOUT_MS)
        run_cell(page_b, 2)
        cell_executed(page_b, 2, STOP_TIMEOUT_MS)
        wait_row(page_b, "run-b", "r.dataset.status === 'stopped'", STOP_TIMEOUT_MS)
        for key, user in (("a", a), ("b", b)):
            assert wait_until(lambda: not leftovers(user, facts[key]), 60), leftovers(user, facts[key])
            state = json.loads((facts[key]["run_dir"] / "state.json").read_text())
            assert state["status"] == "stopped" and all(w["status"] == "stopped" for w in state["workers"]), state
        assert sidebar_names(page_a) == ["run-a"] and sidebar_names(page_b) == ["run-b"]
        page_b.context.close()
