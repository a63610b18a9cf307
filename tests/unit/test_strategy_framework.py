"""distlib.strategy() in a run of another framework (``--framework jax``) says what to do instead, before TensorFlow
is imported; in a TensorFlow run (the default) it goes on to TensorFlow as before."""

from __future__ import annotations

import sys

import pytest

from nbworkers.distlib import strategies


def test_strategy_in_a_jax_run_says_to_fit_without_one(monkeypatch):
    monkeypatch.setenv("NBWORKERS_FRAMEWORK", "jax")
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    with pytest.raises(strategies.NotATensorFlowRun, match=r"--framework jax.*without a strategy scope"):
        strategies.strategy()
    assert "tensorflow" not in sys.modules


def test_a_tensorflow_run_reaches_its_checks(monkeypatch):
    monkeypatch.setenv("NBWORKERS_FRAMEWORK", "tf")
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(Exception, match="TF_CONFIG is not valid JSON"):  # past the framework check, before TensorFlow
        strategies.strategy()
