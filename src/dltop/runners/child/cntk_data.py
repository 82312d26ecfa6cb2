"""What the CNTK runner feeds each step: synthetic or real batches, host or device.

Valid Python 3.6; imported by cntk_runner.py after CNTK is importable.

CNTK copies every numpy array it is fed from the host. ``data_loader``:

- ``device`` (default), synthetic data: the batch is made once into a CNTK
  ``Value`` on the run's device and that same Value is fed every step, so no
  copy is timed (the LSTM's sparse one-hot batch always was such a Value).
- ``host``, synthetic data: the batch stays a numpy array (the LSTM's: token
  ids) and is converted and copied inside every timed step.
- real data, either mode: the step gathers its samples from the host-resident
  training set (numpy), converts them (float pixels, one-hot labels, sparse
  token sequences) and CNTK copies them in, all inside the timed step; CNTK 2.7
  has no way to index a device-resident data set from Python. With
  ``loader_workers = N`` (N > 0) a pool of N threads gathers and converts the
  next batches ahead of the step (numpy releases the GIL while copying); only
  the hand-over into CNTK stays in the step.
"""

import collections
import concurrent.futures

import cntk as C
import cntk_models
import convergence
import numpy as np


class Synthetic(object):
    """The same random batch every step (the seed differs per rank)."""

    n_train = None
    n_test = None

    def __init__(self, name, batch, seed, host, input_size=None):
        x, y = cntk_models.synthetic_batch(name, batch, seed, input_size=input_size)
        self._name = name
        if name == "lstm":
            rng = np.random.RandomState(seed)
            self._ids = (rng.randint(0, cntk_models.VOCAB, (batch, cntk_models.SEQ_LEN)),
                         rng.randint(0, cntk_models.VOCAB, (batch, cntk_models.SEQ_LEN)))
        elif not host:
            device = C.device.use_default_device()
            x, y = C.Value(batch=x, device=device), C.Value(batch=y, device=device)
        self._host = host
        self._fixed = (x, y)

    def train_batch(self, step):
        if self._host and self._name == "lstm":
            return cntk_models.sequences(self._ids[0]), cntk_models.sequences(self._ids[1])
        return self._fixed

    def close(self):
        pass


class Real(object):
    """Batches of a real data set, by :class:`convergence.EpochOrder`, this rank's share.

    Args:
        name: the model.
        split: ``datasets.real_split``'s ``(kind, shape, train, test)``.
        spec: the job spec (seed, shuffle, loader_workers, data_loader).
        per_device: samples per rank and step.
        rank: this rank; its share of the global batch is the ``rank``-th slice.
    """

    def __init__(self, name, split, spec, per_device, rank=0):
        kind, shape, train, test = split
        self.language_model = kind == "ptb"
        self._classes = None if self.language_model else cntk_models.NUM_CLASSES[name]
        self._train = self._arrays(shape, train)
        self._test = None if test is None else self._arrays(shape, test)
        self.n_train = train[2]
        self.n_test = None if test is None else test[2]
        self._per_device = per_device
        self._rank = rank
        self._order = convergence.EpochOrder(self.n_train, spec.get("shuffle") is not False,
                                             int(spec["seed"]))
        workers = int(spec.get("loader_workers") or 0)
        self._prefetch = None
        self.global_batch = None  # set by the runner before the first step
        self.steps_per_epoch = None
        if workers > 0:
            self._prefetch = _Prefetch(self._host_batch, workers)

    def _arrays(self, shape, part):
        inputs, labels, n = part
        if self.language_model:
            return (np.asarray(inputs, dtype=np.int64).reshape((n,) + tuple(shape)),
                    np.asarray(labels, dtype=np.int64).reshape((n,) + tuple(shape)))
        x = np.frombuffer(inputs, dtype=np.uint8).reshape((n,) + tuple(shape))
        return x.astype(np.float32) / 255.0, np.frombuffer(labels, dtype=np.uint8)

    def _convert(self, xb, yb):
        if self.language_model:
            return xb, yb
        return xb, cntk_models.labels_one_hot(yb, self._classes)

    def _host_batch(self, step):
        idx = self._order.batch(step, self.global_batch, self.steps_per_epoch)
        mine = idx[self._rank * self._per_device:(self._rank + 1) * self._per_device]
        # Unshuffled batches are runs of samples: a slice, a view as before issue 17.
        mine = slice(mine[0], mine[0] + len(mine)) if self._order.is_contiguous() \
            else np.asarray(mine)
        x, y = self._train
        return self._convert(x[mine], y[mine])

    def _to_cntk(self, xb, yb):
        if self.language_model:
            return cntk_models.sequences(xb), cntk_models.sequences(yb)
        return xb, yb

    def train_batch(self, step):
        """Step ``step``'s batch, ready to feed (gathered now, or by the pool ahead)."""
        if self._prefetch is not None:
            return self._to_cntk(*self._prefetch.get(step))
        return self._to_cntk(*self._host_batch(step))

    def test_batches(self, batch):
        """``(x, y, n)`` over the whole test set, ``batch`` samples at a time."""
        x, y = self._test
        for start, end in convergence.eval_slices(self.n_test, batch):
            yield self._to_cntk(*self._convert(x[start:end], y[start:end])) + (end - start,)

    def close(self):
        if self._prefetch is not None:
            self._prefetch.close()


class _Prefetch(object):
    """Prepares the batches of the next steps in a thread pool, in step order."""

    def __init__(self, make, workers):
        self._make = make
        self._ahead = 2 * workers
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers)
        self._futures = collections.OrderedDict()

    def get(self, step):
        for s in range(step, step + self._ahead):
            if s not in self._futures:
                self._futures[s] = self._pool.submit(self._make, s)
        return self._futures.pop(step).result()

    def close(self):
        for future in self._futures.values():
            future.cancel()
        self._pool.shutdown(wait=True)
