"""A real worker process (``nbworkers.distlib.worker.bootstrap``, no relay, no TensorFlow import by the cell)
refuses run files it did not get from its kernel: a push.pkl without the run's signature is never unpickled,
a symlinked cell.py is never read; a signed push arrives."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

from nbworkers.protocol.private.files import sign_push

KEY = "5e" * 32
WORKER_TIMEOUT = 120


class Boom:
    """Unpickling it creates a file: proof that a pickle was loaded."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.mknod, (self.path,))


def run_worker(run_dir: Path, push: bytes | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBWORKERS_")}
    env.pop("TF_CONFIG", None)
    env.update({"NBWORKERS_CODE": str(run_dir / "cell.py"), "NBWORKERS_CWD": str(run_dir),
                "NBWORKERS_KEY": KEY, "NBWORKERS_RUN_DIR": str(run_dir)})
    if push is not None:
        (run_dir / "push.pkl").write_bytes(push)
        env["NBWORKERS_PUSH"] = str(run_dir / "push.pkl")
    return subprocess.run([sys.executable, "-P", "-m", "nbworkers.distlib.worker.bootstrap"], env=env, cwd=run_dir,
                          capture_output=True, text=True, timeout=WORKER_TIMEOUT)


def test_a_signed_push_arrives(tmp_path):
    (tmp_path / "cell.py").write_text("\nprint('x is', x)\n")
    done = run_worker(tmp_path, sign_push(KEY, pickle.dumps({"x": 41})))
    assert done.returncode == 0, done.stderr
    assert "x is 41" in done.stdout


def test_a_tampered_or_unsigned_push_is_refused_and_never_unpickled(tmp_path):
    (tmp_path / "cell.py").write_text("\nprint('the cell ran')\n")
    proof = tmp_path / "unpickled"
    evil = pickle.dumps({"x": Boom(str(proof))})
    signed = sign_push(KEY, pickle.dumps({"x": 1}))
    header_and_mac = signed[:-len(pickle.dumps({"x": 1}))]
    for push in (evil, header_and_mac + evil, sign_push("00" * 32, evil)):
        done = run_worker(tmp_path, push)
        assert done.returncode == 1
        assert "BadPushSignature" in done.stderr and "nothing was unpickled" in done.stderr, done.stderr
        assert "the cell ran" not in done.stdout
        assert not proof.exists()


def test_a_symlinked_cell_is_refused(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("\nprint('planted code ran')\n")
    (tmp_path / "cell.py").symlink_to(planted)
    done = run_worker(tmp_path, None)
    assert done.returncode == 1
    assert "planted code ran" not in done.stdout
    assert "the cell cannot be read" in done.stderr and "symlink" in done.stderr, done.stderr
