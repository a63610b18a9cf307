"""A run records the notebook cell that started it (magics/run/group_launch.py): the ``cellId`` JupyterLab and
Notebook 7 send in the execute request's metadata, and the notebook's path the server gave the kernel
(``JPY_SESSION_NAME``). The sidebar runs that cell again after a kernel restart stopped the run."""

from __future__ import annotations

import IPython

from nbworkers.magics.run import group_launch


class FakeShell:
    def __init__(self, parent_header: object):
        self.parent_header = parent_header


def test_the_cell_id_and_the_notebook_come_from_the_execute_request_and_the_kernels_environment(monkeypatch):
    header = {"header": {"msg_type": "execute_request"}, "metadata": {"cellId": "3f2a-cell", "deletedCells": []}}
    monkeypatch.setattr(IPython, "get_ipython", lambda: FakeShell(header))
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/u/work/nb1.ipynb")
    assert group_launch._notebook_cell() == ("3f2a-cell", "/home/u/work/nb1.ipynb")


def test_outside_a_notebook_both_are_empty(monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    for shell in (None, FakeShell({}), FakeShell({"metadata": {"cellId": 7}}), FakeShell(None)):
        monkeypatch.setattr(IPython, "get_ipython", lambda shell=shell: shell)
        assert group_launch._notebook_cell() == ("", "")
