"""``%%worker --framework torch``: PyTorch's DistributedDataParallel on gloo across two real worker processes, the cell
joining its group with ``torch.distributed.init_process_group("gloo")`` as under ``torchrun``.

The module's tests share one kernel and its PyTorch zygote (tests/shared_kernel.py): a kernel start and a zygote that
imports PyTorch cost seconds of CPU each time, and `make test` is CPU-bound.

1. A DDP model whose workers start from different weights (their own seeds) and train on their own halves of the data
   ends with the same weights on both, its loss going down; each worker has torchrun's variables (RANK, WORLD_SIZE,
   LOCAL_RANK, LOCAL_WORLD_SIZE, worker 0's MASTER_ADDR and MASTER_PORT), one OpenMP thread, and forked from a zygote
   that imported PyTorch; the kernel never imported PyTorch.
2. A Stop of a long DDP run: each worker runs its ``finally:``, the run reads stopped, and no process is left.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import processes_of_run_root, wait_until

pytestmark = pytest.mark.share_kernel

FIT_CELL = """%%worker -n 2 --framework torch --name torchfit --block
import json, os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)  # each worker's own initial weights: DDP starts every worker from rank 0's
data = torch.Generator().manual_seed(0)
features = torch.rand(512, 8, generator=data)
labels = (features.sum(dim=1) > 4).long()
features, labels = features[rank::world], labels[rank::world]  # each worker its own half
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
losses = []
for epoch in range(4):
    total = 0.0
    for start in range(0, len(features), 32):
        loss = torch.nn.functional.cross_entropy(model(features[start:start + 32]), labels[start:start + 32])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    losses.append(total)
print("RESULT", json.dumps({
    "rank": rank, "world": world, "loss": losses, "threads": torch.get_num_threads(),
    "weights": [p.detach().double().ravel().tolist() for p in model.parameters()],
    "env": {name: os.environ[name] for name in
            ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")},
    "forked": os.environ.get("NBWORKERS_FORKED", ""),
}))
"""

STOP_CELL = """%%worker -n 2 --framework torch --name torchstop
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
model = DistributedDataParallel(torch.nn.Linear(64, 64))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
batch = torch.randn(32, 64)
try:
    for step in range(10**9):
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 3:
            print("TRAINING", flush=True)
finally:
    print("FINALLY", dist.get_rank(), flush=True)
"""


def logs_of(kernel, name: str) -> list[str]:
    return kernel.value(f"[__import__('nbworkers').get_cluster({name!r}).logs(i) for i in range(2)]")


def test_ddp_on_gloo_trains_two_workers_to_the_same_weights_with_torchruns_variables(kernel):
    started = time.monotonic()
    result = kernel.run(FIT_CELL, timeout=240)
    assert not result.error and result.status == "ok", result.text
    logs = logs_of(kernel, "torchfit")
    found = [[json.loads(line.split("RESULT ", 1)[1]) for line in log.splitlines() if line.startswith("RESULT ")]
             for log in logs]
    assert all(len(f) == 1 for f in found), logs
    first, second = found[0][0], found[1][0]
    for index, run in enumerate((first, second)):
        assert (run["rank"], run["world"], run["threads"]) == (index, 2, 1), run
        assert run["env"] == {"RANK": str(index), "WORLD_SIZE": "2", "LOCAL_RANK": str(index), "LOCAL_WORLD_SIZE": "2",
                              "MASTER_ADDR": first["env"]["MASTER_ADDR"], "MASTER_PORT": first["env"]["MASTER_PORT"]}
        assert run["loss"][-1] < run["loss"][0], run["loss"]
        assert run["forked"], "the workers were spawned, not forked from a PyTorch zygote"
    assert first["weights"] == second["weights"]  # one model: the same weights to the last bit
    assert first["loss"] != second["loss"]  # (each trained on its own half)
    zygotes = kernel.value(
        "[z['pid'] for z in __import__('nbworkers.magics.backends.zygotes', fromlist=['z']).zygotes().describe() "
        "if z['alive']]")
    for pid in {int(run["forked"]) for run in (first, second)}:
        assert pid in zygotes, (pid, zygotes)
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"NBWORKERS_FRAMEWORK=torch" in environ and b"OMP_NUM_THREADS=1" in environ
        assert "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    assert kernel.value("'torch' in __import__('sys').modules") is False  # the kernel never imports PyTorch
    print(f"DDP run: {time.monotonic() - started:.1f} s")


def test_a_stopped_ddp_run_runs_finally_on_every_worker_and_leaves_no_process(kernel, run_root: Path):
    assert not kernel.run(STOP_CELL).error
    try:
        assert wait_until(lambda: all("TRAINING" in log for log in logs_of(kernel, "torchstop")), 120), \
            logs_of(kernel, "torchstop")
        asked = time.monotonic()
        kernel.run("%workers stop torchstop")
        stop_took = time.monotonic() - asked
        status = kernel.value("__import__('nbworkers').get_cluster('torchstop').status")
        logs = logs_of(kernel, "torchstop")
    finally:
        kernel.run("%workers stop --all")
    assert status == "stopped", (status, logs)
    assert stop_took < 1.0 + 2.0, stop_took  # under a second on a quiet machine; load adds the rest
    shown = f"stop took {stop_took:.1f} s\n" + "\n=====\n".join(logs)
    assert all(f"FINALLY {index}" in log for index, log in enumerate(logs)), shown
    # (a worker whose peer left first may read gloo's "Connection closed by peer" before its own SIGINT arrives)
    assert any("--- nbworkers: stopped" in log for log in logs), shown
    assert wait_until(lambda: not processes_of_run_root(run_root), 15)
    print(f"%workers stop took {stop_took:.2f} s")
