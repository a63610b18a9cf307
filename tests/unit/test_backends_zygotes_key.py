"""Which zygote serves a launch (magics/backends/zygotes.py): the key is the import-time environment only, and two
virtual environments of one base Python get two zygotes."""

from __future__ import annotations

import sys

from nbworkers.magics.backends import zygotes


def test_key_is_the_import_time_environment_only(tmp_path):
    base = {"PATH": "/usr/bin", "HOME": "/home/u", "TF_CPP_MIN_LOG_LEVEL": "1"}
    key = zygotes.zygote_key(sys.executable, base)
    # applied in the child: per-run variables, --env values TensorFlow's import does not read, GPUs (read at cuInit)
    for name, value in [("TF_CONFIG", "{}"), ("EPOCHS", "3"), ("CUDA_VISIBLE_DEVICES", "1"), ("NBWORKERS_WORKER", "1")]:
        assert zygotes.zygote_key(sys.executable, {**base, name: value}) == key, name
    # read at import: another zygote
    for name, value in [("TF_USE_LEGACY_KERAS", "1"), ("KERAS_BACKEND", "jax"), ("LD_LIBRARY_PATH", "/x")]:
        assert zygotes.zygote_key(sys.executable, {**base, name: value}) != key, name
    assert zygotes.zygote_key("/other/python", base) != key
    cell = tmp_path / "cell.py"
    cell.write_text("import os\nos.environ['TF_USE_LEGACY_KERAS'] = '1'\nimport tensorflow\n")
    assert "changes its environment" in zygotes.why_not_forked(str(cell), str(tmp_path))
    cell.write_text("import os\nimport tensorflow as tf\nprint(os.environ['X'])\n")
    assert zygotes.why_not_forked(str(cell), str(tmp_path)) is None


def test_two_virtual_environments_of_one_base_python_get_two_zygotes(tmp_path):
    """A venv's bin/python is a symlink to the base interpreter: keyed by its resolved path, a --python of another
    venv (tutorial 04's TensorFlow 2.15) was forked from the kernel's zygote (TensorFlow 2.21)."""
    pythons = []
    for name in ("venv-a", "venv-b"):
        (tmp_path / name / "bin").mkdir(parents=True)
        pythons.append(tmp_path / name / "bin" / "python")
        pythons[-1].symlink_to(sys.executable)
    env = {"PATH": "/usr/bin", "HOME": "/home/u"}
    assert zygotes.zygote_key(str(pythons[0]), env) != zygotes.zygote_key(str(pythons[1]), env)
    assert zygotes.zygote_key(str(pythons[0]), env) != zygotes.zygote_key(sys.executable, env)
