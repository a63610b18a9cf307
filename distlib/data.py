"""Input data across workers: sharding helpers and the tutorials' MNIST.

Two ways to give each worker a distinct part of the data, as in the tutorials:
- auto-shard: batch with the GLOBAL batch size and hand the dataset to
  ``strategy.experimental_distribute_dataset`` (or ``distlib.fit``); ``auto_shard(ds, "data")`` picks the
  policy (``data`` works for any dataset, ``file`` needs a dataset read from several files);
- manual: ``shard_for_worker(ds)`` keeps this worker's 1/N of the examples (by position) and turns
  auto-sharding off so the strategy does not shard again.

``mnist()`` uses the real ``tfds.load("mnist")``. With ``NBWORKERS_MOCK_DATA=1`` (tests, offline machines)
it uses ``tfds.testing.mock_data`` instead: random images of the same shapes and types, no download.
"""

from __future__ import annotations

from nbworkers.distlib.cluster import TaskInfo, task
from nbworkers.protocol import env_settings

ENV_MOCK_DATA = env_settings.MOCK_DATA.name  # "1": mnist() returns tfds mock data (no download)
ENV_MOCK_EXAMPLES = env_settings.MOCK_EXAMPLES.name  # examples per split of the mock data (default 512)
DEFAULT_MOCK_EXAMPLES = env_settings.MOCK_EXAMPLES.default
SHARD_POLICIES = ("auto", "file", "data", "off")


def mock_data_requested(environ: dict[str, str] | None = None) -> bool:
    return env_settings.MOCK_DATA.get(environ)


def _shard_policy(name: str):
    import tensorflow as tf

    if name not in SHARD_POLICIES:
        raise ValueError(f"shard policy {name!r} is not one of {', '.join(SHARD_POLICIES)}.")
    return getattr(tf.data.experimental.AutoShardPolicy, name.upper())


def auto_shard(dataset, policy: str = "data"):
    """``dataset`` with the auto-shard policy the strategy applies when it distributes it."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = _shard_policy(policy)
    return dataset.with_options(options)


def shard_for_worker(dataset, info: TaskInfo | None = None):
    """This worker's part of ``dataset`` (every num_workers-th example from its id), auto-shard off.

    Shard before shuffling and batching: a shuffled dataset sharded afterwards overlaps across workers
    unless every worker uses the same shuffle seed.
    """
    info = info or task()
    if info.num_workers > 1 and info.type in ("chief", "worker"):  # the evaluator reads everything
        dataset = dataset.shard(info.num_workers, info.worker_id)
    return auto_shard(dataset, "off")


def mnist(split: str = "train", *, mock: bool | None = None, mock_examples: int | None = None):
    """MNIST ``(image, label)`` pairs: float32 images in [0, 1] of shape (28, 28, 1), int64 labels. Unbatched.

    ``mock`` None follows ``NBWORKERS_MOCK_DATA``; True gives ``tfds.testing.mock_data`` examples.
    """
    import tensorflow as tf
    import tensorflow_datasets as tfds

    use_mock = mock_data_requested() if mock is None else mock
    if use_mock:
        count = mock_examples or env_settings.MOCK_EXAMPLES.get()
        with tfds.testing.mock_data(num_examples=count):
            dataset = tfds.load("mnist", split=split, as_supervised=True)
    else:
        try:
            dataset = tfds.load("mnist", split=split, as_supervised=True)
        except Exception as error:
            if env_settings.NETNS.is_set():  # the run's private network namespace: no network to download from
                raise RuntimeError(
                    "tfds.load('mnist') failed in an isolated run, whose workers have no network (README: Security "
                    "model). Download MNIST once outside the run (`python -c \"import tensorflow_datasets as tfds; "
                    "tfds.load('mnist')\"`), or run the cell with `%%worker --isolation off`.") from error
            raise

    def normalize(image, label):
        return tf.cast(image, tf.float32) / 255.0, label

    return dataset.map(normalize, num_parallel_calls=tf.data.AUTOTUNE)
