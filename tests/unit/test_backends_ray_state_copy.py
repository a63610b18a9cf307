"""A session's save across Ray nodes that do not share the kernel's files (magics/backends/ray/nodes/state_copy.py): what a
node sends back, what the kernel keeps, what it sends to a new worker, the cap and the paths it refuses; the node's
actor, the kernel's worker handle and the backend's launch around it, with a fake actor and fake Ray calls (no Ray,
no process). With real nodes: tests/integration/ray/test_ray_sessions.py (no shared directory)."""

from __future__ import annotations

import json
import os
import stat
import types
from pathlib import Path

import pytest

from nbworkers.magics.backends.ray.backend import RayBackend
from nbworkers.magics.backends.ray.nodes import state_copy
from nbworkers.magics.backends.ray.nodes.host_actor import NbworkersWorkerHost
from nbworkers.magics.backends.ray.worker import RayWorkerProcess
from nbworkers.protocol import env_settings


def make_save(run_dir: Path, gen: int, worker: int, holder: int = 0, files: dict[str, bytes] | None = None,
              finished: bool = True) -> Path:
    """A worker's save as distlib/saved_state writes it (opaque bytes here; the manifest last)."""
    folder = run_dir
    for name in ("session-state", f"gen-{gen}", f"worker-{worker}"):  # private, as the worker makes them
        folder = folder / name
        folder.mkdir(mode=0o700, exist_ok=True)
    for name, data in (files or {}).items():
        (folder / name).write_bytes(data)
    if finished:
        (folder / "manifest.json").write_text(json.dumps({"worker": worker, "holder": holder, "saved": []}))
    return folder


def dirs(tmp_path: Path, *names: str) -> list[Path]:
    made = []
    for name in names:
        (tmp_path / name).mkdir(mode=0o700)
        made.append(tmp_path / name)
    return made


CHECKPOINT = {"model.index": b"\x00index", "model.data-00000-of-00001": bytes(range(256)) * 40,
              "opt.index": b"i", "opt.data-00000-of-00001": b"\x01" * 999}


def test_a_save_goes_from_its_node_to_the_kernel_and_on_to_a_new_worker_on_another_node(tmp_path):
    node_a, node_b, kernel, node_c = dirs(tmp_path, "node-a", "node-b", "kernel", "node-c")
    make_save(node_a, 3, 0, files=CHECKPOINT)  # the holder: models and optimizers
    make_save(node_b, 3, 1, files={"values.npz": b"PK\x03\x04 arrays"})
    for node, worker in ((node_a, 0), (node_b, 1)):  # the kernel takes each worker's back at its group's end
        files, why = state_copy.read_worker_save(node, 3, worker, 10**6)
        assert why == "" and files
        assert state_copy.write_tree(kernel, files, replace=(3, worker)) == [f"gen-3/worker-{worker}"]
    files, why = state_copy.files_for(kernel, 4, 1, 10**6)  # new worker 1 (generation 4) on node C
    assert why == ""
    assert sorted(files) == sorted([f"gen-3/worker-0/{n}" for n in [*CHECKPOINT, "manifest.json"]]
                                   + ["gen-3/worker-1/values.npz", "gen-3/worker-1/manifest.json"])
    state_copy.write_tree(node_c, files)
    for name, data in CHECKPOINT.items():
        copied = node_c / "session-state" / "gen-3" / "worker-0" / name
        assert copied.read_bytes() == data
        assert stat.S_IMODE(copied.stat().st_mode) == 0o600
    for folder in (node_c / "session-state", node_c / "session-state" / "gen-3", copied.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert not [p for p in copied.parent.iterdir() if p.name.startswith(".")]  # no temporary file left
    files0, _ = state_copy.files_for(kernel, 4, 0, 10**6)  # worker 0 needs only the holder's folder
    assert {p.split("/")[1] for p in files0} == {"worker-0"}


def test_the_holder_is_who_the_manifests_name_and_only_the_newest_earlier_finished_save_counts(tmp_path):
    kernel, = dirs(tmp_path, "kernel")
    make_save(kernel, 1, 0, files={"old.index": b"old"})
    make_save(kernel, 2, 1, holder=1, files={"model.index": b"new"})  # worker 0 was gone: worker 1 held
    make_save(kernel, 2, 0, holder=1, finished=False)  # begun, never finished
    make_save(kernel, 5, 0, files={"later.index": b"x"})  # not before the generation asked for
    assert state_copy.latest_saved(kernel, 3) == 2 and state_copy.holder(kernel, 2) == 1
    files, why = state_copy.files_for(kernel, 3, 0, 10**6)
    assert why == "" and sorted(files) == ["gen-2/worker-1/manifest.json", "gen-2/worker-1/model.index"]
    assert state_copy.files_for(kernel, 1, 0, 10**6) == ({}, "")  # no save before generation 1


def test_a_save_over_the_cap_is_not_sent_and_the_message_names_the_setting(tmp_path):
    node, kernel = dirs(tmp_path, "node", "kernel")
    make_save(node, 0, 0, files={"model.data-00000-of-00001": b"\x00" * 3 * 2**20})
    files, why = state_copy.read_worker_save(node, 0, 0, 2**20)
    assert files == {}
    assert "3.0 MiB, more than the 1.0 MiB" in why and "RaySettings.saved_state_max_bytes" in why
    make_save(kernel, 0, 0, files={"model.data-00000-of-00001": b"\x00" * 3 * 2**20})
    files, why = state_copy.files_for(kernel, 1, 0, 2**20)
    assert files == {} and "worker 0's save is 3.0 MiB" in why


def test_only_a_finished_save_and_its_own_regular_files_travel(tmp_path):
    node, = dirs(tmp_path, "node")
    assert state_copy.read_worker_save(node, 0, 0, 10**6) == ({}, "")  # nothing saved
    make_save(node, 0, 0, files={"a.index": b"a"}, finished=False)
    assert state_copy.read_worker_save(node, 0, 0, 10**6) == ({}, "")  # not finished
    folder = make_save(node, 0, 0, files={"a.index": b"a"})
    secret = tmp_path / "secret"
    secret.write_bytes(b"not the save's")
    (folder / "b.index").symlink_to(secret)
    (folder / "sub").mkdir()
    files, _ = state_copy.read_worker_save(node, 0, 0, 10**6)
    assert sorted(files) == ["gen-0/worker-0/a.index", "gen-0/worker-0/manifest.json"]


@pytest.mark.parametrize("path", ["../x", "gen-1/worker-0/../../x", "gen-1/other/x", "gen-1/worker-0/.hidden",
                                  "gen-1/worker-0", "/abs/worker-0/x", "gen-x/worker-0/a", "gen-1/worker-0/a/b"])
def test_a_path_outside_the_saves_layout_is_refused_and_nothing_is_written(tmp_path, path):
    node, = dirs(tmp_path, "node")
    with pytest.raises(state_copy.StateCopyError, match="is not gen-N/worker-M/FILE"):
        state_copy.write_tree(node, {"gen-1/worker-0/fine.index": b"ok", path: b"evil"})
    assert not (node / "session-state").exists()
    with pytest.raises(state_copy.StateCopyError, match="not bytes"):
        state_copy.write_tree(node, {"gen-1/worker-0/fine.index": "text"})  # type: ignore[dict-item]


def test_the_kernel_copy_replaces_a_stale_folder_and_drops_older_generations(tmp_path):
    node, kernel = dirs(tmp_path, "node", "kernel")
    make_save(kernel, 2, 0, files={"stale.index": b"s"})
    make_save(kernel, 1, 0)
    make_save(node, 2, 0, files={"model.index": b"m"})
    state_copy.write_tree(kernel, state_copy.read_worker_save(node, 2, 0, 100)[0], replace=(2, 0))
    state_copy.drop_older(kernel, 2)
    assert sorted(p.name for p in (kernel / "session-state" / "gen-2" / "worker-0").iterdir()) == [
        "manifest.json", "model.index"]
    assert sorted(p.name for p in (kernel / "session-state").iterdir()) == ["gen-2"]


# ------------------------------------------------------------------------------------------- the actor, the kernel
class FakeRay:
    """``ray.get`` of a fake actor's already computed answer (or its error)."""

    def get(self, ref, timeout=None):
        if isinstance(ref, Exception):
            raise ref
        return ref


class FakeActor:
    """A Ray actor handle whose ``method.remote(...)`` calls the real actor object at once."""

    def __init__(self, host: NbworkersWorkerHost | None):
        self.host = host

    def __getattr__(self, name):
        def remote(*args):
            if self.host is None:
                return RuntimeError("The actor died unexpectedly before finishing this task.")
            return getattr(self.host, name)(*args)

        return types.SimpleNamespace(remote=remote)


def kernel_worker(kernel: Path, host: NbworkersWorkerHost | None, shared: bool, max_bytes: int = 10**6):
    """The kernel's handle of worker 1 of generation 3 (its parts that copy the save back)."""
    proc = RayWorkerProcess.__new__(RayWorkerProcess)
    proc._ray, proc.actor, proc.index, proc.generation = FakeRay(), FakeActor(host), 1, 3
    proc.log_path, proc.node_label = kernel / "worker-1.log", "127.0.0.3 node abcdef12"
    proc._own_files = not shared
    proc._settings = types.SimpleNamespace(saved_state_max_bytes=max_bytes, saved_state_copy_timeout=5.0)
    return proc


def test_the_kernel_keeps_the_save_of_a_worker_whose_node_does_not_share_its_files(tmp_path):
    node, kernel = dirs(tmp_path, "node", "kernel")
    make_save(node, 3, 1, files={"values.npz": b"arrays"})
    host = NbworkersWorkerHost()
    host._own_run_dir = node
    kernel_worker(kernel, host, shared=False)._copy_state_back()
    assert (kernel / "session-state" / "gen-3" / "worker-1" / "values.npz").read_bytes() == b"arrays"
    assert not (kernel / "worker-1.log").exists()  # nothing to say


def test_a_shared_node_or_a_save_too_large_or_a_dead_actor_copies_nothing_and_the_log_says_why(tmp_path):
    node, kernel = dirs(tmp_path, "node", "kernel")
    make_save(node, 3, 1, files={"values.npz": b"\x00" * 2**20})
    host = NbworkersWorkerHost()
    host._own_run_dir = node
    kernel_worker(kernel, host, shared=True)._copy_state_back()  # the node wrote the kernel's files itself
    assert not (kernel / "session-state").exists() and not (kernel / "worker-1.log").exists()
    host_shared = NbworkersWorkerHost()  # its own run dir is None: it shares the kernel's
    assert host_shared.read_state(3, 1, 10**9) == ({}, "")
    kernel_worker(kernel, host, shared=False, max_bytes=1000)._copy_state_back()
    log = (kernel / "worker-1.log").read_text()
    assert "worker 1's session save was not copied from 127.0.0.3 node abcdef12: 1.0 MiB, more than" in log
    assert "RaySettings.saved_state_max_bytes" in log and not (kernel / "session-state").exists()
    kernel_worker(kernel, None, shared=False)._copy_state_back()
    assert "RuntimeError: The actor died unexpectedly" in (kernel / "worker-1.log").read_text()


class LyingNode:
    """A node's actor that answers ``read_state`` with whatever it likes (another user's, or a broken, node)."""

    def __init__(self, answer):
        self.answer = answer

    def read_state(self, generation, worker, max_bytes):
        return self.answer


def saved_names(kernel: Path) -> dict[str, list[str]]:
    root = kernel / "session-state"
    return {str(f.relative_to(root)): sorted(p.name for p in f.iterdir()) for f in sorted(root.glob("gen-*/worker-*"))}


@pytest.mark.parametrize("answer, why", [
    ({"gen-3/worker-0/model.index": b"forged", "gen-3/worker-0/manifest.json": b"{}"}, "is not in gen-3/worker-1"),
    ({"gen-3/worker-1/a.npz": b"a", "gen-2/worker-1/manifest.json": b"{}"}, "is not in gen-3/worker-1"),
    ({"gen-4/worker-1/manifest.json": b"{}"}, "is not in gen-3/worker-1"),  # a later generation's
    ({"gen-3/worker-1/../../x": b"x"}, "is not gen-N/worker-M/FILE"),
    ({"gen-3/worker-1/big.npz": b"\x00" * 2000, "gen-3/worker-1/manifest.json": b"{}"}, "more than the 0.0 MiB"),
    ({"gen-3/worker-1/a.npz": "not bytes"}, "as str, not bytes"),
    ({f"gen-3/worker-1/f{i}": b"" for i in range(state_copy.MAX_FILES + 1)}, "more than 10000"),
])
def test_the_kernel_keeps_nothing_a_node_sends_outside_that_workers_save_or_over_the_cap(tmp_path, answer, why):
    """Worker 1 of generation 3: only gen-3/worker-1/FILE, within saved_state_max_bytes (1000 here), is kept; the
    other workers' folders are left as they were; the worker's log says what was refused."""
    kernel, = dirs(tmp_path, "kernel")
    make_save(kernel, 3, 0, files={"model.index": b"worker 0's"})
    make_save(kernel, 3, 2, files={"values.npz": b"worker 2's"})
    before = saved_names(kernel)
    kernel_worker(kernel, LyingNode((answer, "")), shared=False, max_bytes=1000)._copy_state_back()
    assert saved_names(kernel) == before
    assert (kernel / "session-state" / "gen-3" / "worker-0" / "model.index").read_bytes() == b"worker 0's"
    log = (kernel / "worker-1.log").read_text()
    assert "worker 1's session save was not copied from 127.0.0.3 node abcdef12" in log and why in log, log


@pytest.mark.parametrize("answer", [None, "files", ({"gen-3/worker-1/a": b"a"},), ({}, 3), ([], "")])
def test_an_answer_not_shaped_as_files_and_why_is_ignored_and_said(tmp_path, answer):
    kernel, = dirs(tmp_path, "kernel")
    kernel_worker(kernel, LyingNode(answer), shared=False)._copy_state_back()
    assert not (kernel / "session-state").exists()
    assert "the node's answer is not (files, why)" in (kernel / "worker-1.log").read_text()


def test_replacing_a_workers_folder_leaves_every_other_workers_folder_alone(tmp_path):
    kernel, = dirs(tmp_path, "kernel")
    for worker in (0, 1, 2):
        make_save(kernel, 3, worker, files={"old.npz": b"old"})
    sent = {"gen-3/worker-1/new.npz": b"new", "gen-3/worker-1/manifest.json": b"{}"}
    kernel_worker(kernel, LyingNode((sent, "")), shared=False)._copy_state_back()
    assert saved_names(kernel) == {"gen-3/worker-0": ["manifest.json", "old.npz"],
                                   "gen-3/worker-1": ["manifest.json", "new.npz"],
                                   "gen-3/worker-2": ["manifest.json", "old.npz"]}
    with pytest.raises(state_copy.StateCopyError, match="not in gen-3/worker-1, the one folder being replaced"):
        state_copy.write_tree(kernel, {**sent, "gen-3/worker-2/manifest.json": b"{}"}, replace=(3, 1))
    assert saved_names(kernel)["gen-3/worker-2"] == ["manifest.json", "old.npz"]


def test_a_nodes_own_reason_reaches_the_log_on_one_line(tmp_path):
    kernel, = dirs(tmp_path, "kernel")
    kernel_worker(kernel, LyingNode(({}, "too big\n--- forged line")), shared=False)._copy_state_back()
    assert "abcdef12: too big --- forged line\n" in (kernel / "worker-1.log").read_text()


def test_the_node_writes_the_save_it_was_sent_and_says_so_in_the_log_note(tmp_path):
    node, = dirs(tmp_path, "node")
    note = NbworkersWorkerHost._write_state(node, {"gen-2/worker-0/model.index": b"m",
                                                   "gen-2/worker-0/manifest.json": b"{}"})
    assert note == "--- nbworkers: the session's saved state (gen-2/worker-0) copied to this node\n"
    assert (node / "session-state" / "gen-2" / "worker-0" / "model.index").read_bytes() == b"m"
    bad = NbworkersWorkerHost._write_state(node, {"gen-2/../../etc/x": b"m"})
    assert "could not be written on this node" in bad and "is not gen-N/worker-M/FILE" in bad


def test_the_launch_sends_the_save_only_to_nodes_not_known_to_share_the_kernels_files(tmp_path):
    kernel, = dirs(tmp_path, "kernel")
    make_save(kernel, 0, 0, files={"model.index": b"m"})
    backend = RayBackend(address="127.0.0.1:1")
    assert backend._state_for(kernel, 0, 0, "node-a") == ({}, "")  # the first launch: nothing saved before
    files, note = backend._state_for(kernel, 1, 0, "node-a")
    assert note == "" and "gen-0/worker-0/model.index" in files
    backend._shared_nodes.add("node-a")
    assert backend._state_for(kernel, 1, 0, "node-a") == ({}, "")
    backend.settings.saved_state_max_bytes = 10
    files, note = backend._state_for(kernel, 1, 0, "node-b")
    assert files == {} and note.startswith("the session's saved state was not sent to this node: worker 0's save")
    assert "RaySettings.saved_state_max_bytes" in note and "worker 0 restores nothing there" in note


def test_a_worker_says_when_its_save_is_too_large_to_leave_its_node(tmp_path, monkeypatch):
    from nbworkers.distlib.saved_state.files import stays_on_node as _stays_on_node

    folder = make_save(tmp_path, 0, 0, files={"model.data-00000-of-00001": b"\x00" * 2 * 2**20})
    monkeypatch.delenv(env_settings.SAVE_COPY_MAX_BYTES.name, raising=False)
    assert _stays_on_node(str(folder)) == ""  # the node shares the kernel's files
    monkeypatch.setenv(env_settings.SAVE_COPY_MAX_BYTES.name, str(2**30))
    assert _stays_on_node(str(folder)) == ""
    monkeypatch.setenv(env_settings.SAVE_COPY_MAX_BYTES.name, str(2**20))
    why = _stays_on_node(str(folder))
    assert why.startswith("its save (2.0 MiB) stays on its Ray node") and "1.0 MiB" in why
    assert "RaySettings.saved_state_max_bytes" in why
    assert os.path.isdir(folder)
