"""What a kernel or a detached run's supervisor killed with ``kill -9`` leaves of its channels, removed at the next
load: its Unix socket files (``sockets.sweep_stale``, by the machine and pid in their names) and a detached session's client
file in its run directory (``leftovers.reap``)."""

from __future__ import annotations

import os
import pwd
import re
import socket
from pathlib import Path

import pytest

from nbworkers.magics.run import sockets
from nbworkers.magics.rundir import layout as rundir
from nbworkers.magics.rundir.leftovers import reap
from nbworkers.protocol.private import machine
from nbworkers.protocol.private.machine import key_of, machine_key

DEAD_PID = 2 ** 22 + 7  # above Linux's largest pid_max: no process has it


def bound(path: Path) -> Path:
    """A real socket file at ``path`` (its socket closed, as a killed process leaves it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()
    return path


HERE = machine_key()
OTHER = key_of("another-machine", "6b1c9a0e-0000-4000-8000-000000000000")  # a host sharing the runtime folder


def test_the_sockets_of_dead_binders_go_and_everything_else_stays(tmp_path):
    dead = bound(tmp_path / f"relay-{HERE}-{DEAD_PID}-0123456789ab.sock")
    live = bound(tmp_path / f"session-{HERE}-{os.getpid()}-0123456789ab.sock")
    other_name = bound(tmp_path / f"zygote-{DEAD_PID}.sock")  # not one of ipc_path's names
    older = bound(tmp_path / f"relay-{DEAD_PID}-0123456789ab.sock")  # an older version's: no machine, left alone
    not_a_socket = tmp_path / f"data-{HERE}-{DEAD_PID}-ba9876543210.sock"
    not_a_socket.write_text("a file someone named so")
    link = tmp_path / f"commands-{HERE}-{DEAD_PID}-aaaaaaaaaaaa.sock"
    link.symlink_to(dead)
    assert sockets.sweep_stale(tmp_path) == [dead.name]
    assert not dead.exists() and live.exists() and other_name.exists() and older.exists()
    assert not_a_socket.exists() and link.is_symlink()
    assert sockets.sweep_stale(tmp_path) == []
    assert sockets.sweep_stale(tmp_path / "no-such-dir") == []


def test_on_a_shared_runtime_folder_another_machines_sockets_stay_whatever_their_pids(tmp_path):
    """A runtime folder on a shared home (NBWORKERS_RUNTIME_DIR=~/...): the other machine's kernels' pids mean
    nothing here (dead here, or another process here); only this machine's dead binders' files go."""
    theirs_dead_here = bound(tmp_path / f"relay-{OTHER}-{DEAD_PID}-0123456789ab.sock")
    theirs_alive_here = bound(tmp_path / f"session-{OTHER}-{os.getpid()}-0123456789ab.sock")
    ours_dead = bound(tmp_path / f"commands-{HERE}-{DEAD_PID}-0123456789ab.sock")
    assert sockets.sweep_stale(tmp_path) == [ours_dead.name]
    assert theirs_dead_here.exists() and theirs_alive_here.exists() and not ours_dead.exists()


def test_the_machine_key_is_the_host_name_and_the_boot(tmp_path):
    assert len({key_of("a", "boot-1"), key_of("b", "boot-1"), key_of("a", "boot-2")}) == 3  # containers; machines
    boot = tmp_path / "boot_id"
    boot.write_text("6b1c9a0e-1111-4000-8000-000000000000\n")
    assert machine.boot_id(str(boot)) == "6b1c9a0e-1111-4000-8000-000000000000"
    assert machine.boot_id(str(tmp_path / "none")) == ""
    assert re.fullmatch(machine.KEY_PATTERN, HERE) and HERE == key_of(socket.gethostname(), machine.boot_id())


@pytest.mark.skipif(os.getuid() != 0, reason="a file of another user needs root to make")
def test_another_users_socket_of_this_machine_and_a_dead_pid_stays(tmp_path):
    theirs = bound(tmp_path / f"relay-{HERE}-{DEAD_PID}-0123456789ab.sock")
    os.chown(theirs, pwd.getpwnam("nobody").pw_uid, -1)
    assert sockets.sweep_stale(tmp_path) == [] and theirs.exists()


def test_ipc_paths_carry_this_machine_and_pid_so_a_sweep_keeps_them(tmp_path):
    path = sockets.ipc_path("relay")
    match = sockets.IPC_NAME.search(path.name)
    assert match and int(match["pid"]) == os.getpid() and match["machine"] == HERE and path.name.startswith("relay-")


def test_reaping_a_dead_supervisors_session_removes_its_client_file(tmp_path):
    run_dir = tmp_path / "notes"
    run_dir.mkdir()
    rundir.write_state(run_dir, {"status": "running", "kernel_pid": DEAD_PID, "workers": []})
    (run_dir / rundir.SESSION_CLIENT_FILE).write_text('{"socket": "/gone.sock", "key": "k"}')
    state = reap(run_dir, kill_grace=0.1)
    assert state and state["status"] == "stopped"
    assert not (run_dir / rundir.SESSION_CLIENT_FILE).exists()
    assert reap(run_dir, kill_grace=0.1)["status"] == "stopped"  # again: nothing left to remove, no error
