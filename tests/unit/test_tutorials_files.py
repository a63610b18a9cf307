"""The tutorial notebooks as files: they exist, are stripped of outputs, and the demo runs the quickstart's
training cell verbatim."""

from __future__ import annotations

from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[2]
TUTORIALS = REPO / "tutorials"
NOTEBOOKS = sorted(p.name for p in TUTORIALS.glob("*.ipynb"))


def worker_cells(notebook) -> list:
    return [c for c in notebook.cells if c.cell_type == "code" and c.source.lstrip().startswith("%%worker")]


def test_tutorials_exist_and_are_stripped():
    assert len(NOTEBOOKS) >= 6, NOTEBOOKS
    for name in NOTEBOOKS:
        notebook = nbformat.read(TUTORIALS / name, as_version=4)
        nbformat.validate(notebook)
        assert notebook.nbformat == 4
        assert notebook.metadata["kernelspec"]["name"] == "python3", name
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{name}: outputs are not stripped"


def test_demo_runs_the_quickstart_cell_verbatim():
    from nbworkers.demo import QUICKSTART_CELL

    notebook = nbformat.read(TUTORIALS / "01_quickstart.ipynb", as_version=4)
    assert [c.source for c in worker_cells(notebook)] == [QUICKSTART_CELL]
