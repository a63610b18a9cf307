"""Which run of `make test` a test belongs to (tools/test_suite.sh runs them; README, Development).

`make test` runs the integration tests as a few pytest runs so that tests that mostly wait (a browser, a hub, a
notebook's cells) run beside the ones that keep both cores busy, and nothing runs twice:

- ``ray``: the Ray tests, alone (a loaded machine makes raylets time out at start), first;
- ``main``: the rest on ``.venv`` (the editable checkout), beside
- ``beside``: the browser tests and the tutorial notebooks on ``.venv``, then
- ``installed``: the tests marked ``installed``, on ``.venv-installed`` (the wheel users get, installed
  non-editable), in the same sequence as ``beside``.

``pytest --track NAME`` keeps one run's tests (tests/conftest.py deselects the others; with ``installed`` it also
refuses to run where nbworkers is not the venv's installed package); without it pytest runs every test it
collected, so a developer can run any test, a marked one too, on ``.venv``.
"""

from __future__ import annotations

import pytest

TRACKS = ("ray", "main", "beside", "installed")
TRACK_OPTION = "--track"


def track_of(item: pytest.Item) -> str:
    """The one run a test belongs to: the first rule that matches."""
    marks = {mark.name for mark in item.iter_markers()}
    if "installed" in marks:
        return "installed"
    if "ray" in marks:
        return "ray"
    if "browser" in marks or "slow" in marks:
        return "beside"
    return "main"


def select(items: list[pytest.Item], track: str) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """``(kept, deselected)`` for ``track`` (one of TRACKS: pytest's option refuses any other name)."""
    kept = [item for item in items if track_of(item) == track]
    return kept, [item for item in items if track_of(item) != track]
