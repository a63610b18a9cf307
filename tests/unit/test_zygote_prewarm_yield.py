"""A first cell whose workers run on other machines (``--backend ray``) stops the kernel's zygote that the prewarm
started and that is still importing (magics/backends/zygotes.py ``yield_prewarm``, called by ``build_spec`` before
the backend's checks import Ray): its import would only take this machine's CPU from that run's start. A zygote
done importing, or one a launch used, is kept; a local run asks for nothing."""

from __future__ import annotations

import dataclasses
from argparse import Namespace

import pytest
from fake_backend import FAKE

from nbworkers.host.command import ZYGOTE_READY
from nbworkers.magics.backends import registry, zygotes
from nbworkers.magics.notebook import parse


class FakeProc:
    def __init__(self, pid: int):
        self.pid, self.waited = pid, False

    def poll(self):
        return None

    def wait(self, timeout=None):
        self.waited = True
        return -9


def _zygote(tmp_path, key: str, pid: int, log: str, forks: int = 0) -> zygotes.Zygote:
    path = tmp_path / f"{key}.log"
    path.write_text(log)
    return zygotes.Zygote(key, "python", FakeProc(pid), f"/sock/{key}", str(path), "", forks=forks)  # type: ignore[arg-type]


def test_only_the_zygotes_still_importing_that_no_launch_used_are_stopped(tmp_path, monkeypatch):
    killed: list[int] = []
    monkeypatch.setattr(zygotes, "kill_group", killed.append)
    pool = zygotes.ZygotePool()
    importing = _zygote(tmp_path, "importing", 101, "nbworkers zygote 101: listening\n")
    ready = _zygote(tmp_path, "ready", 102, f"nbworkers zygote 102{ZYGOTE_READY}3 OS threads)\n")
    used = _zygote(tmp_path, "used", 103, "", forks=2)  # importing, but a launch waits on it
    pool._zygotes = {z.key: z for z in (importing, ready, used)}
    assert pool.yield_prewarm() == 1
    assert killed == [101] and importing.proc.waited  # reaped: its pid cannot be reused before
    assert set(pool._zygotes) == {"ready", "used"}
    assert pool.yield_prewarm() == 0


@pytest.mark.parametrize("runs_here", [False, True])
def test_build_spec_yields_the_prewarm_for_a_backend_that_runs_elsewhere_only(tmp_path, monkeypatch, runs_here):
    asked: list[bool] = []
    monkeypatch.setattr(zygotes.ZygotePool, "yield_prewarm", lambda self: asked.append(True) or 0)
    monkeypatch.setattr(registry, "_kinds", dict(registry.kinds()))
    registry.register(dataclasses.replace(FAKE, name="elsewhere", runs_here=runs_here))
    args = Namespace(workers=2, name="yield", python="", env=[], cwd=str(tmp_path), gpus_per_worker=None,
                     block=False, timeout=None, push=[], max_restarts=None, stall_timeout=None, chief=False,
                     evaluator=0, ps=None, backend="elsewhere")
    parse.build_spec(args, "print(1)\n", {}, set(), set())
    assert asked == ([] if runs_here else [True])
