"""Each attack of the hardening review that needs real processes, tried for real (every test fails on the code
before): Python children that never import from their working directory, a relay in a process of its own
flooded with forged and oversized messages, forged state files and pids that never get an unrelated process
killed, a host that dies and takes its worker along, a live run of another kernel left alone, and one real
2-worker run that is private, marked and relayed on loopback. The attacks that need no process are in
tests/unit/test_security.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import zmq

from nbworkers.kernel_driver import wait_until
from nbworkers.procs.ownership import started_since_boot
from nbworkers.protocol import wire
from nbworkers.protocol.private import dirs as private_dirs
from nbworkers.protocol.private.dirs import module_command

HOST_MODULE = "nbworkers.host.worker_host"
MiB = 2**20


def plant_argparse(directory: Path) -> Path:
    """A planted ``argparse.py``: if any nbworkers process imports it, it leaves a marker file behind."""
    marker = directory / "PWNED"
    (directory / "argparse.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\nraise SystemExit(99)\n")
    return marker


def push_socket(address: str) -> tuple[zmq.Context, zmq.Socket]:
    context = zmq.Context()
    socket = context.socket(zmq.PUSH)
    socket.setsockopt(zmq.LINGER, 20000)
    socket.connect(address)
    return context, socket


# ---------------------------------------------------------------------------------------------- 1. private dirs
def test_python_children_never_import_from_their_working_directory(tmp_path):
    """The worker host and the worker start with `-P` (this interpreter) or the `-c` prelude (another one): a
    planted argparse.py in their working directory is not imported. Plain `python -m` would import it."""
    marker = plant_argparse(tmp_path)
    log = tmp_path / "worker.log"
    worker = [sys.executable, "-c", "print('worker ran')"]
    plain = subprocess.run([sys.executable, "-m", HOST_MODULE, "--log", str(log), "--", *worker], cwd=tmp_path,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert marker.exists() and plain.returncode == 99  # the attack works on a plain `python -m`
    marker.unlink()
    for command in (
        module_command(sys.executable, HOST_MODULE, "--log", str(log), "--", *worker),  # -P
        [sys.executable, "-c", private_dirs.SAFE_MODULE_PRELUDE.format(module=HOST_MODULE),  # another interpreter
         "--log", str(log), "--", *worker],
    ):
        host = subprocess.Popen(command, cwd=tmp_path, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        code = host.wait(timeout=60)  # the host's stdin stays open: end of file would stop the worker
        assert code == 0, host.stderr.read().decode()[-2000:]
        host.stdin.close()
        host.stderr.close()
        assert not marker.exists()
    assert log.read_text().count("worker ran") == 2
    assert module_command("/other/python3.9", "m", "a")[1] == "-c"  # no -P for an interpreter we do not know


# ---------------------------------------------------------------------------------------------- 2. relay memory
RECEIVER = textwrap.dedent("""
    import json, resource, sys, time
    from nbworkers.magics.run.relay import RelayReceiver

    relay = RelayReceiver(sys.argv[1])
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(relay.address, flush=True)
    received = 0
    deadline = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < deadline:
        received += len(relay.poll(0.05))
        if relay.drops.total + received >= int(sys.argv[3]):
            break
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    history = len(relay._session.digest_history)
    print(json.dumps({"growth_mib": (peak - base) / 1024, "received": received, "history": history,
                      "drops": {k: getattr(relay.drops, k) for k in ("bad_signature", "malformed", "oversized")}}))
""")


def run_receiver(key: str, expected: int, attack, seconds: float = 60.0) -> dict:
    """Start a relay in a process of its own (the kernel side), let ``attack(address)`` loose, return what it saw."""
    proc = subprocess.Popen([sys.executable, "-c", RECEIVER, key, str(seconds), str(expected)], stdout=subprocess.PIPE,
                            text=True)
    try:
        attack(proc.stdout.readline().strip())
        out, _ = proc.communicate(timeout=seconds + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return json.loads(out.strip().splitlines()[-1])


def test_forged_messages_with_huge_signatures_are_dropped_before_anything_keeps_them():
    key = wire.new_key()
    count = 300
    frames = wire.Signer(key).frames("log", {"worker": 0, "gen": 0, "t": 0.0, "lines": ["x\n"]})

    def attack(address):
        context, socket = push_socket(address)
        for i in range(count):  # 300 MiB of "signatures": the old relay's replay history kept every one
            fake = (b"%08x" % i) * (MiB // 8)
            socket.send_multipart([frames[0], fake, *frames[2:]])
        socket.close()
        context.term()

    seen = run_receiver(key, count, attack)
    print("forged 1 MiB signatures x", count, "->", seen)
    assert seen["drops"]["bad_signature"] == count, seen
    assert seen["history"] == 0, seen
    assert seen["growth_mib"] < 120, seen  # bounded by the receive queue, never by what was sent


def test_an_oversized_message_is_cut_at_the_socket_and_a_big_multipart_one_dropped_and_counted():
    key = wire.new_key()
    signer = wire.Signer(key)
    good = signer.frames("log", {"worker": 0, "gen": 0, "t": 0.0, "lines": ["fine\n"]})

    def attack(address):
        huge = b"x" * (300 * MiB)  # one 300 MiB frame: took the old kernel to 636 MiB
        context, socket = push_socket(address)
        socket.send_multipart([huge], copy=False)
        socket.close()
        context.term()
        del huge
        context, socket = push_socket(address)
        parts = [b"y" * (3 * MiB)] * 4  # every frame under the cap, 12 MiB together
        socket.send_multipart([good[0], good[1], *parts])
        socket.send_multipart(good)  # and the relay still takes real messages
        socket.close()
        context.term()

    seen = run_receiver(key, 2, attack)
    print("300 MiB frame + 12 MiB multipart ->", seen)
    assert seen["drops"]["oversized"] == 1 and seen["received"] == 1, seen
    assert seen["growth_mib"] < 100, seen


# ---------------------------------------------------------------------------------------------- 4. kill only ours
def sleeper(env: dict[str, str] | None = None) -> subprocess.Popen:
    """An unrelated process of this user, in a session (and process group) of its own, once its environment can be
    read: Popen returns when the child's exec closed its close-on-exec pipe, before the kernel has set up the new
    program's environment, and /proc/PID/environ reads empty until then (1 in 15 here under load)."""
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True, env={**os.environ, **(env or {})})

    def readable() -> bool:
        seen = psutil.Process(proc.pid).environ()
        return bool(seen) and all(seen.get(key) == value for key, value in (env or {}).items())

    assert wait_until(readable, 10, interval=0.001)
    return proc


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def forged_run(root: Path, name: str, kernel_pid: int, pids: list[int], started: float, run_id: str = "r1") -> Path:
    """A state file naming ``pids`` with their true create times (anyone can read them in /proc)."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    state = {"name": name, "backend": "local", "status": "running", "error": "", "started": started, "ended": None,
             "kernel_pid": kernel_pid, "run_id": run_id, "host_pids": pids, "worker_pgids": pids,
             "processes": [[pid, started_since_boot(pid)] for pid in pids],
             "workers": [{"index": 0, "status": "running", "pid": pids[0] if pids else None}]}
    (run_dir / "state.json").write_text(json.dumps(state))
    return run_dir


def test_a_forged_state_file_never_gets_an_unrelated_process_killed(tmp_path):
    from nbworkers.magics.rundir import layout as rundir
    from nbworkers.magics.rundir import leftovers, liveness
    from nbworkers.magics.rundir import stop as run_stop

    victims = [sleeper(), sleeper({"NBWORKERS_RUN_ID": "some-other-run"}), sleeper({"NBWORKERS_RUN_ID": "r1"})]
    try:
        before = time.time() + 60  # the run "started" after the last one: a pid reused since is not the run's
        run_dir = forged_run(tmp_path, "forged", dead_pid(), [v.pid for v in victims[:2]], time.time() - 5)
        old_run = forged_run(tmp_path, "oldrun", dead_pid(), [victims[2].pid], before)
        assert liveness.leftover_processes(rundir.read_state(run_dir), run_dir) == []
        assert liveness.leftover_processes(rundir.read_state(old_run), old_run) == []
        assert sorted(leftovers.reap_leftovers(tmp_path, kill_grace=0.5)) == ["forged", "oldrun"]
        assert run_stop.stop_run(run_dir, stop_timeout=1, kill_grace=0.5)["killed"] == 0
        time.sleep(0.3)
        assert all(v.poll() is None for v in victims)
        # the same process, carrying the run's marker and started after it: that one is the run's own
        marked = sleeper({"NBWORKERS_RUN_ID": "r2"})
        victims.append(marked)
        mine = forged_run(tmp_path, "mine", dead_pid(), [marked.pid], time.time() - 5, run_id="r2")
        assert [p.pid for p in liveness.leftover_processes(rundir.read_state(mine), mine)] == [marked.pid]
    finally:
        for victim in victims:
            victim.kill()
            victim.wait()


def test_a_pid_a_worker_reports_is_only_signalled_when_it_is_ours(tmp_path):
    """A compromised worker's hello names another process (or the host's pid is reused): _kill_all spares it."""
    from nbworkers.magics.backends.local import WorkerProcess
    from nbworkers.procs.kill import kill_groups
    from nbworkers.procs.ownership import RunMarker, boot_clock

    victim = sleeper()
    host = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE, start_new_session=True)
    host.wait()
    try:
        # as the kernel makes it (local.py), the wall clock stepped back 100 s since: the boot clock still says ours
        marker = RunMarker("run-x", time.time() + 100, started_boot=boot_clock() - 1)
        proc = WorkerProcess(index=0, host=host, log_path=tmp_path / "log", marker=marker)
        proc.note_worker(victim.pid)  # not the host's child, not a zygote's: named, never recorded
        proc.kill()
        assert kill_groups([0, 1, -1, victim.pid], RunMarker("run-x", None)) == 0
        time.sleep(0.3)
        assert victim.poll() is None
        ours = sleeper({"NBWORKERS_RUN_ID": "run-x"})
        proc.note_worker(ours.pid, zygote_pids=frozenset({os.getpid()}))  # our child: as a zygote's fork is
        proc.kill()
        assert ours.wait(timeout=10) == -signal.SIGKILL
    finally:
        victim.kill()
        victim.wait()
        host.stdin.close()


def test_a_host_that_dies_before_its_workers_hello_takes_the_worker_with_it(tmp_path):
    log = tmp_path / "worker.log"
    worker = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"]
    host = subprocess.Popen(module_command(sys.executable, HOST_MODULE, "--log", str(log), "--", *worker),
                            stdin=subprocess.PIPE, start_new_session=True)  # no relay: no hello ever
    try:
        from conftest import wait_until

        assert wait_until(lambda: psutil.Process(host.pid).children(), 30)
        child = psutil.Process(host.pid).children()[0]
        assert wait_until(lambda: "up" in log.read_text(), 30)
        os.kill(host.pid, signal.SIGKILL)
        host.wait()
        assert wait_until(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, 10)
    finally:
        host.stdin.close()
        try:
            os.killpg(host.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for proc in psutil.process_iter(["pid"]):
            try:
                if proc.cmdline()[-1:] == [worker[-1]]:
                    proc.kill()
            except psutil.Error:
                pass


# ---------------------------------------------------------------------------------------------- 5. run dirs
def test_a_live_run_of_another_kernel_is_never_removed(tmp_path):
    from nbworkers.magics.errors import ClusterNameError
    from nbworkers.magics.rundir.prepare import prepare_run_dir

    other_kernel = sleeper()  # alive, started before its run
    try:
        time.sleep(0.05)
        run_dir = forged_run(tmp_path, "shared-name", other_kernel.pid, [], time.time())
        (run_dir / "cell.py").write_text("their cell")
        with pytest.raises(ClusterNameError, match="running in another kernel"):
            prepare_run_dir(run_dir, "my cell", None, [])
        assert (run_dir / "cell.py").read_text() == "their cell"
    finally:
        other_kernel.kill()
        other_kernel.wait()
    prepare_run_dir(run_dir, "my cell", b"data", [run_dir / "worker-0.log"])  # its kernel is gone: replaced
    assert (run_dir / "cell.py").read_text() == "my cell"
    link = tmp_path / "a-link"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ClusterNameError, match="symlink"):
        prepare_run_dir(link, "x", None, [])


# ---------------------------------------------------------------------------------------------- end to end
E2E_CELL = """%%worker -n 2 --name {name} --block --env NBWORKERS_MOCK_DATA=1
import os, sys, time
import tensorflow as tf
from nbworkers import distlib
strategy = distlib.strategy()
print("RUNID", os.environ["NBWORKERS_RUN_ID"], flush=True)
time.sleep({sleep})
"""


def test_a_real_run_is_private_marked_and_its_relay_local(kernel, run_root):
    """One real 2-worker TensorFlow run: every file of its run directory is 0600 (the directory 0700), every host
    and worker carries the run's NBWORKERS_RUN_ID (recorded in state.json), the kernel's relay is a Unix socket
    (no TCP port), and the workers' TensorFlow gRPC servers' addresses are printed (they bind all interfaces, inside
    the run's private network namespace: tests/integration/test_isolation.py)."""
    name = "private-run"
    launched = kernel.run(E2E_CELL.format(name=name, sleep=6).replace("--block ", ""))
    assert not launched.error, launched.error
    from conftest import wait_until

    run_dir = run_root / name
    assert wait_until(lambda: (run_dir / "worker-1.log").exists() and "RUNID" in (run_dir / "worker-1.log").read_text()
                      and "RUNID" in (run_dir / "worker-0.log").read_text(), 150)
    state = json.loads((run_dir / "state.json").read_text())
    hosts = [p for p in psutil.process_iter(["pid"]) if _env(p).get("NBWORKERS_RUN_DIR") == str(run_dir)]
    assert {_env(p).get("NBWORKERS_RUN_ID") for p in hosts} == {state["run_id"]}
    # a worker forked from the kernel's zygote wrote its run's id over the zygote's placeholder in /proc
    workers = [psutil.Process(w["pid"]) for w in kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()")["workers"]]
    for worker in workers:
        assert _env(worker).get("NBWORKERS_RUN_ID") == state["run_id"], _env(worker)
    procs = list({p.pid: p for p in hosts + workers}.values())
    assert len(procs) >= 4, procs  # 2 hosts + 2 workers
    listening = sorted({(c.laddr.ip, p.pid) for p in procs for c in _connections(p) if c.status == "LISTEN"})
    print("TensorFlow gRPC servers listen on:", listening)
    assert state_relay_address(procs).startswith("ipc://")
    waited = kernel.run(f"%workers wait {name}")
    assert nbworkers_finished(kernel, name), waited.text
    for i in (0, 1):
        log = (run_dir / f"worker-{i}.log").read_text()
        assert f"RUNID {state['run_id']}" in log
    assert os.stat(run_dir).st_mode & 0o777 == 0o700
    modes = {p.name: p.stat().st_mode & 0o777 for p in run_dir.iterdir()}
    assert set(modes.values()) == {0o600}, modes


def _env(proc: psutil.Process) -> dict:
    try:
        return proc.environ()
    except psutil.Error:
        return {}


def _connections(proc: psutil.Process) -> list:
    try:
        return proc.net_connections("tcp")
    except psutil.Error:
        return []


def state_relay_address(procs: list[psutil.Process]) -> str:
    return next(_env(p)["NBWORKERS_RELAY"] for p in procs if _env(p).get("NBWORKERS_RELAY"))


def nbworkers_finished(kernel, name: str) -> bool:
    return kernel.value(f"nbworkers.get_cluster({name!r}).status") == "finished"
