"""A worker launched by a real kernel gets the kernel's one scan of the cell (protocol/cell_scan.py) and reads
nothing again."""

from __future__ import annotations

from nbworkers.protocol import cell_scan, wire


def test_a_launched_worker_gets_the_kernels_scan(kernel, run_root):
    (kernel.notebook_dir / "helpers.py").write_text("# uses MultiWorkerMirroredStrategy\n")
    ran = kernel.run("%%worker -n 1 --block --name scanned\nimport os\nprint('SCAN', os.environ['NBWORKERS_CELL_SCAN'])")
    assert ran.status == "ok", ran.failure
    log = (run_root / "scanned" / "worker-0.log").read_text()
    shown = cell_scan.from_env({wire.ENV_CELL_SCAN: log.split("SCAN ", 1)[1].splitlines()[0]})
    assert shown == cell_scan.CellScan(uses_tensorflow=False, changes_environment=False, multi_worker=True)
