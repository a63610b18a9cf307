"""Stand-ins for Keras models, optimizers, metrics and TensorFlow variables, TensorFlow's checkpoint write and read
on them, and a trained namespace of them: the saved-state unit tests (test_session_state*.py) run with no TensorFlow."""

from __future__ import annotations

import numpy as np

from nbworkers.distlib.saved_state.namespace import Kinds
from nbworkers.protocol import env_settings


class Variable:
    """A variable: numpy(), assign(), shape (as tf.Variable and keras.Variable)."""

    def __init__(self, value):
        self.value = np.array(value, dtype="float32")

    @property
    def shape(self):
        return self.value.shape

    @property
    def dtype(self):
        return self.value.dtype

    def numpy(self):
        return self.value.copy()

    def assign(self, value):
        assert np.shape(value) == self.value.shape
        self.value = np.array(value, dtype="float32")


class Optimizer:
    """Slots made by build(), as Keras 3 optimizers make them on the first step (``built``, and the variables they
    are for in ``_trainable_variables``, as compat/keras3/optimizer reads them)."""

    def __init__(self):
        self.iterations = Variable(0.0)
        self.slots: list[Variable] = []
        self.built = False
        self._trainable_variables: list[Variable] = []

    @property
    def variables(self):
        return [self.iterations, *self.slots]

    def build(self, variables):
        self.slots = [Variable(np.zeros(v.shape)) for v in variables]
        self.built, self._trainable_variables = True, list(variables)


class Model:
    def __init__(self, units: int = 3, seed: float = 0.0):
        self.weights = [Variable(np.full((2, units), seed)), Variable(np.full((units,), seed))]
        self.trainable_variables = self.weights
        self.optimizer = Optimizer()


class Module:
    """Stands for a tf.Module / tf.train.Checkpoint: its variables."""

    def __init__(self, value: float = 0.0):
        self.variables = [Variable(value)]


class Metric(Module):
    """Stands for a Keras 3 metric: not trackable itself, its variables are checkpointed."""


KINDS = Kinds(models=(Model,), variables=(Variable,), checkpointables=(Module, Optimizer), holders=(Metric,))


def state_of(obj) -> list:
    if isinstance(obj, Variable):
        return [obj]
    if isinstance(obj, Model):
        return obj.weights + obj.optimizer.variables
    return list(obj.variables) if not isinstance(obj, list) else obj


def fake_checkpoints_on(monkeypatch) -> None:
    """TensorFlow's checkpoint write and read, on the stand-ins: one .npz of each object's variables in order."""
    from nbworkers.distlib.saved_state import objects as saved_objects

    def write(objects, prefix):
        arrays = {f"{key}.{i}": v.numpy() for key, obj in objects.items() for i, v in enumerate(state_of(obj))}
        np.savez(prefix + ".data-00000-of-00001.npz", **arrays)
        return len(arrays)

    def read(objects, prefix):
        with np.load(prefix + ".data-00000-of-00001.npz") as saved:
            for key, obj in objects.items():
                values = [saved[f"{key}.{i}"] for i in range(sum(1 for k in saved.files if k.startswith(key + ".")))]
                variables = state_of(obj)
                if [v.shape for v in variables] != [a.shape for a in values]:
                    raise ValueError(f"{key}: not as saved")
                for variable, value in zip(variables, values):
                    variable.assign(value)

    monkeypatch.setattr(saved_objects, "checkpoint_write", write)
    monkeypatch.setattr(saved_objects, "checkpoint_read", read)


def trained_namespace() -> dict:
    model = Model(seed=1.5)
    model.optimizer.build(model.trainable_variables)
    model.optimizer.iterations.assign(42.0)
    for slot in model.optimizer.slots:
        slot.assign(np.full(slot.shape, 0.25))
    net = Model(seed=2.0)
    adam = Optimizer()  # a standalone optimizer, built for net's variables by a custom training step
    adam.build(net.trainable_variables)
    adam.iterations.assign(7.0)
    adam.slots[0].assign(np.full((2, 3), 0.5))
    return {"np": np, "helper": lambda: 1, "Model": Model, "_hidden": 3, "model": model, "scale": Variable(2.0),
            "x": np.arange(6, dtype="float32").reshape(3, 2), "epochs": 7, "config": {"lr": 0.01, "tags": ["a"]},
            "shape": (2, 3), "objects": np.array([object()]), "history": object(), "rate": np.float32(0.5),
            "net": net, "adam": adam, "loss": Metric(0.75), "pair": (net, np.ones(2), "tag"),
            "batches": [np.zeros(2), {"y": np.ones(1)}], "stream": (i for i in range(3)),
            "by_number": {1: np.zeros(1)}}


def private_run_dir(tmp_path, monkeypatch):
    folder = tmp_path / "train"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv(env_settings.RUN_DIR.name, str(folder))
    return folder


def as_worker(monkeypatch, worker: int, generation: int) -> None:
    monkeypatch.setenv(env_settings.WORKER.name, str(worker))
    monkeypatch.setenv(env_settings.GENERATION.name, str(generation))


def rebuilt_namespace() -> dict:
    """What re-running the cells that built them makes: fresh objects, optimizers not built yet."""
    net = Model()
    return {"model": Model(), "scale": Variable(0.0), "x": None, "net": net, "adam": Optimizer(), "loss": Metric(),
            "pair": (net, np.zeros(2), "other")}
