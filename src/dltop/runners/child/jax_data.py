"""The JAX runner's device placement (one device or a data-parallel mesh) and batches.

Valid Python 3.6 (child side). :class:`Placement` puts weights replicated and batches
split over the run's devices: on one device a ``SingleDeviceSharding``; on ``gpu:N`` a
``Mesh`` of the N devices with one axis ``"data"``, batches ``NamedSharding(mesh,
P("data"))`` and weights ``NamedSharding(mesh, P())``. XLA's SPMD partitioner then
makes each device compute its share of the batch and all-reduce the gradients.

Batches follow tf_data: a source's ``batch(step)`` gives the step's global ``(x, y)``
on the devices. ``data_loader = "device"``: the synthetic batch, or the whole real
training set, is put on the devices once; a real batch is a jitted gather there.
``"host"``: the batch is gathered in host memory (numpy) and copied inside the timed
step; ``loader_workers = N`` gathers the next N batches ahead in N threads. Real data
follow ``convergence.EpochOrder``, the same order in every framework for a seed.
"""

import concurrent.futures

import jax
import jax.numpy as jnp
import jax_models
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding
from model_catalog import NUM_CLASSES, VOCAB


class Placement(object):
    """Where weights and batches live, and jit with those shardings."""

    def __init__(self, devices):
        self.devices = list(devices)
        if len(self.devices) == 1:
            self.replicated = self.split = SingleDeviceSharding(self.devices[0])
            self.mesh = None
        else:
            self.mesh = Mesh(np.array(self.devices), ("data",))
            self.replicated = NamedSharding(self.mesh, PartitionSpec())
            self.split = NamedSharding(self.mesh, PartitionSpec("data"))

    def weights(self, tree):
        """``tree`` copied to every device."""
        return jax.device_put(tree, self.replicated)

    def batch(self, tree):
        """``tree`` split along its first axis over the devices."""
        return jax.device_put(tree, self.split)

    def jit(self, fn, weights, batches, outputs, donate=()):
        """``jax.jit(fn)`` whose first ``weights`` arguments are replicated, the next
        ``batches`` split, and ``outputs`` results replicated (a 1 gives a lone result)."""
        ins = (self.replicated,) * weights + (self.split,) * batches
        outs = self.replicated if outputs == 1 else (self.replicated,) * outputs
        return jax.jit(fn, in_shardings=ins, out_shardings=outs, donate_argnums=donate)


def synthetic_batch(name, batch, seed, input_size=None):
    """Random host inputs and labels of the model's shapes (numpy, images NHWC)."""
    rng = np.random.RandomState(seed)
    shape = (batch,) + tuple(jax_models.input_shape(name, input_size))
    if name == "lstm":
        return (rng.randint(0, VOCAB, shape).astype(np.int32),
                rng.randint(0, VOCAB, shape).astype(np.int32))
    return (rng.standard_normal(shape).astype(np.float32),
            rng.randint(0, NUM_CLASSES[name], (batch,)).astype(np.int32))


class Source(object):
    """Batches for steps ``0, 1, ...`` of a run; ``close()`` stops loader threads."""

    def __init__(self, batch_fn, close=None):
        self.batch = batch_fn
        self.close = close or (lambda: None)


def synthetic(spec, placement, host, fixed=None):
    """The model's random batch (``fixed``: this numpy ``(x, y)`` instead): put on the
    devices once, or copied there every step."""
    batch = int(spec["samples_per_iter"])
    if fixed is not None:
        x, y = fixed
    else:
        x, y = synthetic_batch(spec["model"], batch, int(spec["seed"]), spec.get("input_size"))
    if not host:
        fixed = placement.batch((x, y))
        return Source(lambda step: fixed)
    return Source(lambda step: placement.batch((x, y)))


def as_arrays(kind, shape, part):
    """One raw split ``(inputs, labels, n)`` as numpy ``(x, y)``: images NHWC float32 in
    [0, 1], PTB ids int32 (``shape`` is one sample's shape as ``datasets`` stores it)."""
    inputs, labels, n = part
    if kind == "ptb":
        return (np.asarray(inputs, dtype=np.int32).reshape((n,) + tuple(shape)),
                np.asarray(labels, dtype=np.int32).reshape((n,) + tuple(shape)))
    x = np.frombuffer(inputs, dtype=np.uint8).reshape((n,) + tuple(shape))
    if len(shape) == 3:
        x = x.transpose(0, 2, 3, 1)
    x = np.ascontiguousarray(x, dtype=np.float32) / np.float32(255.0)
    return x, np.frombuffer(labels, np.uint8).astype(np.int32)


def real(placement, x, y, order, workers, host):
    """Real training batches in ``order`` (``step -> indices``) from numpy ``x``, ``y``."""
    if not host:
        xs, ys = placement.weights((x, y))
        r, split = placement.replicated, placement.split
        gather = jax.jit(lambda a, b, i: (jnp.take(a, i, axis=0), jnp.take(b, i, axis=0)),
                         in_shardings=(r, r, r), out_shardings=(split, split))
        return Source(lambda step: gather(xs, ys, order(step)))
    if not workers:
        def from_host(step):
            idx = order(step)
            return placement.batch((x[idx], y[idx]))
        return Source(from_host)
    return _prefetching(placement, x, y, order, int(workers))


def _prefetching(placement, x, y, order, workers):
    pool = concurrent.futures.ThreadPoolExecutor(workers)
    ahead = {}

    def gather(step):
        idx = order(step)
        return x[idx], y[idx]

    def from_pool(step):
        for s in range(step, step + workers + 1):
            if s not in ahead:
                ahead[s] = pool.submit(gather, s)
        hx, hy = ahead.pop(step).result()
        return placement.batch((hx, hy))

    def close():
        pool.shutdown(wait=False)
    return Source(from_pool, close)


def test_batches(x, y, batch):
    """The test set as ``(x, y, mask)`` numpy batches of exactly ``batch`` samples: the last
    one padded with the first samples, its padding masked out."""
    n = len(x)
    out = []
    for i in range(0, n, batch):
        j = min(i + batch, n)
        mask = np.zeros((batch,), np.float32)
        mask[:j - i] = 1.0
        idx = np.arange(i, i + batch) % n
        out.append((x[idx], y[idx], mask))
    return out
