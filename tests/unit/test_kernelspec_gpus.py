"""The GPU environment the nbworkers kernelspec gives the kernel (it sees no GPU) and hands to its workers."""

from __future__ import annotations

from nbworkers.kernelspec.launch import ALL_GPUS, MACHINE_GPUS_ENV, kernel_gpu_environ, worker_gpu_pool


def test_gpu_environment_of_the_kernel():
    """The kernel hides every GPU from itself and keeps the machine's list for the workers."""
    assert kernel_gpu_environ({"CUDA_VISIBLE_DEVICES": "0,1"}) == {
        "CUDA_VISIBLE_DEVICES": "-1", MACHINE_GPUS_ENV: "0,1"}
    assert kernel_gpu_environ({}) == {"CUDA_VISIBLE_DEVICES": "-1", MACHINE_GPUS_ENV: ALL_GPUS}
    # a kernel started from an nbworkers kernel keeps the original list
    assert kernel_gpu_environ({"CUDA_VISIBLE_DEVICES": "-1", MACHINE_GPUS_ENV: "2,3"}) == {"CUDA_VISIBLE_DEVICES": "-1"}

    assert worker_gpu_pool({MACHINE_GPUS_ENV: "0,1", "CUDA_VISIBLE_DEVICES": "-1"}) == ["0", "1"]
    assert worker_gpu_pool({MACHINE_GPUS_ENV: "", "CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert worker_gpu_pool({"CUDA_VISIBLE_DEVICES": "3"}) == ["3"]  # a plain kernel, not ours
