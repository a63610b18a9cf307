"""``compat/keras3/mwms`` without a cluster: it patches the installed Keras, steps aside on a trainer that no longer has
the upstream bug, and stays off (with one clear warning) when an internal it needs is gone."""

from __future__ import annotations

import importlib.util
import textwrap

import pytest

from nbworkers.distlib.compat.keras3 import mwms as keras3_mwms

FIXED_TRAINER = '''
class TensorFlowTrainer:
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """A Keras that builds from a local batch."""
        return "upstream build"


def reduce_per_replica(values, strategy, reduction):
    return "upstream reduce"


def _collective_all_reduce_multi_worker(strategy):
    return True
'''


@pytest.fixture(scope="module", autouse=True)
def keras_imported():
    """Import Keras 3 (and TensorFlow) before the per-test environment check: importing them sets variables."""
    import keras  # noqa: F401


@pytest.fixture
def fresh_state(monkeypatch):
    monkeypatch.setattr(keras3_mwms, "_state", {"installed": False, "trainer": None, "backup": None})


def fake_trainer(tmp_path, source: str):
    path = tmp_path / "fake_trainer.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location("fake_trainer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_installed_keras_still_has_the_upstream_bug():
    """When this fails, Keras changed its trainer: check keras-team/keras#20585 and the fix's version notes."""
    from keras.src.backend.tensorflow import trainer

    assert keras3_mwms.still_broken(trainer)


def test_steps_aside_on_a_trainer_without_the_bug(tmp_path, fresh_state):
    module = fake_trainer(tmp_path, FIXED_TRAINER)
    original_build, original_reduce = module.TensorFlowTrainer._maybe_symbolic_build, module.reduce_per_replica
    assert not keras3_mwms.still_broken(module)
    assert keras3_mwms.patch_trainer(module) == "not needed" == keras3_mwms.status()
    assert module.TensorFlowTrainer._maybe_symbolic_build is original_build and module.reduce_per_replica is original_reduce


def test_patches_a_trainer_with_the_bug(tmp_path, fresh_state):
    broken = FIXED_TRAINER.replace('return "upstream build"', 'return self.distribute_strategy.reduce("MEAN", 1)')
    module = fake_trainer(tmp_path, broken)
    assert keras3_mwms.still_broken(module)
    assert keras3_mwms.patch_trainer(module) == "patched"
    assert module.reduce_per_replica("values", None, "auto") == "upstream reduce"  # no strategy: upstream's path
    import wrapt

    assert isinstance(module.__dict__["reduce_per_replica"], wrapt.FunctionWrapper)
    build = module.TensorFlowTrainer.__dict__["_maybe_symbolic_build"]
    assert isinstance(build, wrapt.FunctionWrapper)
    assert keras3_mwms.patch_trainer(module) == "patched"  # idempotent: not wrapped twice
    assert module.TensorFlowTrainer.__dict__["_maybe_symbolic_build"] is build


def test_stays_off_with_one_warning_when_an_internal_is_gone(tmp_path, fresh_state, monkeypatch, capsys):
    from nbworkers.distlib.compat import internals

    gone = internals.Internal(keras3_mwms.TRAINER_MODULE, "reduce_per_replica", "keras3/mwms", "test", "keras 3.15.1",
                              internals.TF72388)
    monkeypatch.setattr(internals, "missing", lambda group=None: [(gone, "module has no attribute 'reduce_per_replica'")])
    monkeypatch.setattr(internals, "_warned", set())
    broken = FIXED_TRAINER.replace('return "upstream build"', 'return self.distribute_strategy.reduce("MEAN", 1)')
    module = fake_trainer(tmp_path, broken)
    original = module.reduce_per_replica
    assert keras3_mwms.patch_trainer(module) == "internals missing"
    assert module.reduce_per_replica is original
    err = capsys.readouterr().err
    assert "reduce_per_replica" in err and "tensorflow/tensorflow#72388" in err and "stays unpatched" in err
    assert "distlib.fit(model, dataset" in err and "TF_USE_LEGACY_KERAS=1" in err  # the old advice


def test_off_by_environment(tmp_path, fresh_state, monkeypatch):
    monkeypatch.setenv(keras3_mwms.ENV_FIX, "0")
    module = fake_trainer(tmp_path, FIXED_TRAINER.replace('"upstream build"', 'self.distribute_strategy.reduce(1)'))
    assert keras3_mwms.patch_trainer(module) == "off"
