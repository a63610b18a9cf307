"""The GPUs a launch sees: CUDA_VISIBLE_DEVICES, else what a stand-in nvidia-smi (a real executable) lists."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nbworkers.magics.launch.gpus import visible_gpus


def test_visible_gpus_from_env_and_a_stand_in_nvidia_smi(tmp_path: Path):
    """No GPU here: a fake nvidia-smi stands in for the real one."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Fake A100 (UUID: x)'\necho 'GPU 1: Fake A100 (UUID: y)'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    path = {"PATH": f"{tmp_path}:{os.environ['PATH']}"}
    assert visible_gpus(path) == ["0", "1"]
    assert visible_gpus({**path, "CUDA_VISIBLE_DEVICES": "3,5"}) == ["3", "5"]
    assert visible_gpus({**path, "CUDA_VISIBLE_DEVICES": "-1"}) == []
    # the nbworkers kernel hides GPUs from itself but records the machine's list for its workers
    assert visible_gpus({**path, "CUDA_VISIBLE_DEVICES": "-1", "NBWORKERS_VISIBLE_GPUS": "all"}) == ["0", "1"]
    assert visible_gpus({**path, "CUDA_VISIBLE_DEVICES": "-1", "NBWORKERS_VISIBLE_GPUS": "1"}) == ["1"]
