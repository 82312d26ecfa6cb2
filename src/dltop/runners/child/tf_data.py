"""The TensorFlow runner's batches: synthetic or real, kept on the device or fed from the host.

Valid Python 3.6 (child side). A source's ``batch(step)`` returns the step's
global batch ``(x, y)`` ready for the compiled step (split per replica under
a strategy). Real data follows the training order of the convergence plan
(``convergence.EpochOrder``, the same order in every framework for a seed):
step ``s`` is batch ``s % steps_per_epoch`` of epoch ``s // steps_per_epoch``
(drop last), the order reshuffled each epoch when ``shuffle`` is on.

``data_loader = "device"``: the synthetic batch, or the whole real training
set, is put on the device once; a real batch is a ``tf.gather`` there.
``"host"``: the batch is made in host memory (numpy) and copied to the device
inside the step, so the copy is timed. TensorFlow has no pinned numpy arrays;
on CUDA its copy goes through TF's own pinned staging buffer. With
``loader_workers = N`` (real data) a ``tf.data`` pipeline gathers the next
batches on the host with N parallel calls and N batches prefetched.
"""

import itertools

import lm_catalog
import numpy as np
import tensorflow as tf
import tf_lm_steps
import tf_models


def as_arrays(kind, shape, part):
    """One raw split ``(inputs, labels, n)`` as numpy ``(x, y)``: images NHWC float32 in [0, 1].

    ``shape`` is one sample's shape as ``datasets.real_split`` gives it (images
    channels first, as stored).
    """
    inputs, labels, n = part
    if kind == "ptb":
        x = np.asarray(inputs, dtype=np.int32).reshape((n,) + tuple(shape))
        y = np.asarray(labels, dtype=np.int32).reshape((n,) + tuple(shape))
        return x, y
    x = np.frombuffer(inputs, dtype=np.uint8).reshape((n,) + tuple(shape))
    if len(shape) == 3:
        x = x.transpose(0, 2, 3, 1)
    x = np.ascontiguousarray(x, dtype=np.float32) / 255.0
    y = np.frombuffer(labels, np.uint8).astype(np.int32)
    return x, y


class Source(object):
    """Batches for steps ``0, 1, ...`` of a run."""

    def __init__(self, batch_fn, split):
        self._batch = batch_fn
        self._split = split

    def batch(self, step):
        xy = self._batch(step)
        return self._split(xy) if self._split is not None else xy


def _splitter(strategy, per_replica, world):
    if strategy is None:
        return None

    def split(xy):
        def part(ctx):
            # ``world``: this process's replicas. Over nodes the id counts every node's
            # replicas (worker i's are i * world + 0..world-1); the batch is this node's.
            k = ctx.replica_id_in_sync_group % world
            return tuple(t[k * per_replica:(k + 1) * per_replica] for t in xy)
        return strategy.experimental_distribute_values_from_function(part)
    return split


def _to_device(device, x, y):
    # tf.identity under the device scope makes the copy happen here, inside the step.
    with tf.device(device):
        return tf.identity(tf.convert_to_tensor(x)), tf.identity(tf.convert_to_tensor(y))


def _synthetic_batch(spec, batch):
    if lm_catalog.is_transformer(spec["model"]):
        return tf_lm_steps.synthetic_batch(spec, batch)
    return tf_models.synthetic_batch(spec["model"], batch, spec.get("input_size"))


def synthetic(spec, strategy, world, device, host):
    """The model's random batch: made once on the device, or kept on the host and copied."""
    per_replica = int(spec["per_device_batch"])
    batch = per_replica * world
    split = _splitter(strategy, per_replica, world)
    if not host:
        with tf.device(device):
            fixed = _synthetic_batch(spec, batch)
        fixed = split(fixed) if split is not None else fixed
        return Source(lambda step: fixed, None)
    with tf.device("/cpu:0"):
        x, y = _synthetic_batch(spec, batch)
    x, y = x.numpy(), y.numpy()
    return Source(lambda step: _to_device(device, x, y), split)


class Order(object):
    """Which training samples step ``s`` uses: ``convergence.EpochOrder`` as numpy indices.

    ``part = (rank, per_worker)``: only that worker's slice of each global batch
    (a ``cpus:P`` worker; the slices of all ranks make the global batch, as in torch).
    """

    def __init__(self, epoch_order, batch, steps_per_epoch, part=None):
        self._order, self._batch, self._spe = epoch_order, batch, steps_per_epoch
        self._slice = (slice(None) if part is None
                       else slice(part[0] * part[1], (part[0] + 1) * part[1]))

    def indices(self, step):
        return np.asarray(self._order.batch(step, self._batch, self._spe),
                          dtype=np.int64)[self._slice]

    def matrix(self, steps):
        """Every step's indices, ``steps x batch`` (for a tf.data pipeline)."""
        return np.stack([self.indices(s) for s in range(steps)])


def real(spec, strategy, world, device, x, y, order, steps, workers, host):
    """Real training batches in ``order`` from numpy ``x``, ``y`` (the whole training set).

    ``steps``: how many the loader pipeline serves (None: as many as asked, for a
    time window's run).
    """
    per_replica = int(spec["per_device_batch"])
    split = _splitter(strategy, per_replica, world)
    if not host:
        with tf.device(device):
            xs, ys = tf.convert_to_tensor(x), tf.convert_to_tensor(y)

        def on_device(step):
            idx = order.indices(step)
            with tf.device(device):
                return tf.gather(xs, idx), tf.gather(ys, idx)
        return Source(on_device, split)
    if not workers:
        def from_host(step):
            idx = order.indices(step)
            return _to_device(device, x[idx], y[idx])
        return Source(from_host, split)
    return Source(_pipeline(x, y, order, steps, workers, device), split)


def _pipeline(x, y, order, steps, workers, device):
    with tf.device("/cpu:0"):
        xs, ys = tf.constant(x), tf.constant(y)
        if steps is None:  # a time window: as many steps as it takes, indices made lazily
            ds = tf.data.Dataset.from_generator(
                lambda: (order.indices(s) for s in itertools.count()),
                output_signature=tf.TensorSpec([None], tf.int64))
        else:
            ds = tf.data.Dataset.from_tensor_slices(order.matrix(steps))
        ds = ds.map(lambda idx: (tf.gather(xs, idx), tf.gather(ys, idx)),
                    num_parallel_calls=workers, deterministic=True).prefetch(workers)
        opts = tf.data.Options()
        opts.threading.private_threadpool_size = workers
        it = iter(ds.with_options(opts))
    state = {"next": 0}

    def from_pipeline(step):
        if step != state["next"]:
            raise RuntimeError("the loader pipeline serves steps in order (asked %d, at %d)"
                               % (step, state["next"]))
        state["next"] += 1
        hx, hy = next(it)
        with tf.device(device):
            return tf.identity(hx), tf.identity(hy)
    return from_pipeline


