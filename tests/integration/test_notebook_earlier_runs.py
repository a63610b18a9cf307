"""`%workers` in a kernel that restarted names this notebook's earlier runs (magics/notebook/earlier_runs.py): two real
kernels one after the other, given the same notebook path (JPY_SESSION_NAME, as Jupyter's server gives it)."""

from __future__ import annotations

from conftest import processes_of_run_root, start_kernel, wait_until


def test_a_restarted_kernel_lists_this_notebooks_earlier_run_instead_of_no_clusters_yet(tmp_path, run_root, kernel_env):
    notebook_dir = tmp_path / "notebook"
    notebook_dir.mkdir()
    env = {**kernel_env, "JPY_SESSION_NAME": str(notebook_dir / "train.ipynb")}
    first = start_kernel(notebook_dir, env)
    try:
        ran = first.run("%%worker -n 1 --block --name plain\nprint('plain ran', flush=True)")
        assert not ran.error, ran.error
    finally:
        first.shutdown()
    assert wait_until(lambda: not processes_of_run_root(run_root, zygotes=True), 30)
    second = start_kernel(notebook_dir, env)  # the notebook's kernel after Restart Kernel
    try:
        listing = second.run("%workers").displays[-1]["text/plain"]
        assert "earlier in this notebook: plain (finished) — `%workers attach plain`" in listing, listing
        assert "no clusters yet" not in listing, listing
        attached = second.run("%workers attach plain")
        assert not attached.error, attached.error
        listing = second.run("%workers").displays[-1]["text/plain"]  # now this kernel's: in the table, not "earlier"
        assert "earlier in this notebook" not in listing and listing.splitlines()[1].startswith("plain"), listing
    finally:
        second.shutdown()
    other = start_kernel(notebook_dir, {**kernel_env, "JPY_SESSION_NAME": str(notebook_dir / "other.ipynb")})
    try:  # another notebook's kernel: not its run
        assert "no clusters yet" in other.run("%workers").displays[-1]["text/plain"]
    finally:
        other.shutdown()
