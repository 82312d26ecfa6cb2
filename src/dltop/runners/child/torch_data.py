"""Where the PyTorch runner's batches come from (child side, Python 3.6 valid).

``data_loader = "device"``: the batch (synthetic) or the whole data set (real)
is made on the device once; a step only indexes it. ``"host"``: the data stay
in host memory (pinned on CUDA) and each step gathers, converts and copies its
batch to the device inside the timed step, so the input pipeline is measured.
With ``loader_workers = N`` a ``torch.utils.data.DataLoader`` with N worker
processes prepares the host batches ahead of the step (pinned on CUDA).

Every function returns ``next_batch()``: the next ``(inputs, labels)`` on the device.
"""

import torch
import torch_models

_CPU = torch.device("cpu")


def _pinned(t, device):
    return t.pin_memory() if device.type == "cuda" else t


def synthetic(name, batch, device, host, input_size=None):
    """The model's random batch: made on the device once, or kept on the host and
    copied every step (on a CPU device host and device memory are one: no copy)."""
    if not host:
        fixed = torch_models.synthetic_batch(name, batch, device, input_size=input_size)
        return lambda: fixed
    x, y = torch_models.synthetic_batch(name, batch, _CPU, input_size=input_size)
    x, y = _pinned(x, device), _pinned(y, device)

    def next_batch():
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    return next_batch


def host_tensors(kind, shape, part):
    """``(inputs, labels)`` host tensors of a data-set part ``(inputs, labels, n)``
    whose samples have shape ``shape``.

    Images stay uint8 (``model_input`` converts); PTB ids are int64.
    """
    inputs, labels, n = part
    dims = (n,) + tuple(shape)
    if kind == "ptb":
        return (torch.tensor(inputs, dtype=torch.long).reshape(dims),
                torch.tensor(labels, dtype=torch.long).reshape(dims))
    x = torch.frombuffer(bytearray(inputs), dtype=torch.uint8).reshape(dims)
    y = torch.frombuffer(bytearray(labels), dtype=torch.uint8).long()
    return x, y


def model_input(x):
    """What the model takes: pixels scaled to [0, 1] as float32; ids as they are."""
    if x.dtype == torch.uint8:
        return x.float().div_(255.0)
    return x


class Order(object):
    """This rank's sample indices for each training step, epoch after epoch.

    An epoch is ``n // global_batch`` steps (the last partial batch dropped);
    step ``s`` takes global batch ``s % steps_per_epoch`` of epoch
    ``s // steps_per_epoch`` and this rank its ``per_device`` share of it.
    ``epoch_order(epoch)`` gives the epoch's sample order (a list of indices).
    """

    def __init__(self, n, global_batch, per_device, rank, epoch_order, device=_CPU):
        if n < global_batch:
            raise ValueError("the training set has %d samples, fewer than the batch %d"
                             % (n, global_batch))
        self.steps_per_epoch = n // global_batch
        self._global = global_batch
        self._offset = rank * per_device
        self._per_device = per_device
        self._epoch_order = epoch_order
        self._device = device
        self._cached = (None, None)

    def indices(self, step):
        epoch, pos = divmod(step, self.steps_per_epoch)
        if self._cached[0] != epoch:
            order = torch.tensor(list(self._epoch_order(epoch)), dtype=torch.long)
            self._cached = (epoch, order.to(self._device))
        start = pos * self._global + self._offset
        return self._cached[1][start:start + self._per_device]


class _Rows(torch.utils.data.Dataset):
    """A data set read a whole batch at a time: ``ds[indices]`` is the batch."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, idx):
        return model_input(self.x.index_select(0, idx)), self.y.index_select(0, idx)


class _Steps(object):
    """The sampler: one index tensor per training step, without end."""

    def __init__(self, order):
        self._order = order

    def __iter__(self):
        step = 0
        while True:
            yield self._order.indices(step)
            step += 1


def real(kind, shape, train, device, loader, workers, order_for):
    """``next_batch()`` over the training part, in ``order_for(device)``'s order.

    Returns ``(next_batch, close)``; ``close()`` stops any loader workers.
    """
    x, y = host_tensors(kind, shape, train)
    state = {"step": 0}
    if loader == "device":
        order = order_for(device)
        xd, yd = model_input(x).to(device), y.to(device)

        def next_batch():
            idx = order.indices(state["step"])
            state["step"] += 1
            return xd.index_select(0, idx), yd.index_select(0, idx)

        return next_batch, lambda: None
    order = order_for(_CPU)
    if not workers:
        def next_batch():
            idx = order.indices(state["step"])
            state["step"] += 1
            xb = _pinned(model_input(x.index_select(0, idx)), device)
            yb = _pinned(y.index_select(0, idx), device)
            return xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)

        return next_batch, lambda: None
    # batch_size=None: each sampler item (a step's indices) is one batch, no collation.
    # The sampler never ends, so one iterator serves the whole run.
    dl = torch.utils.data.DataLoader(_Rows(x, y), sampler=_Steps(order), batch_size=None,
                                     num_workers=int(workers),
                                     pin_memory=device.type == "cuda")
    holder = {"it": iter(dl)}

    def next_batch():
        xb, yb = next(holder["it"])
        return xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)

    def close():
        # Dropping the iterator shuts its worker processes down.
        holder.pop("it", None)

    return next_batch, close


def test_batches(kind, shape, test, batch, device, rank=0, world=1):
    """This rank's share of the test part as a list of host batches, and a function
    moving one batch to the device (the evaluation copies inside its own time)."""
    x, y = host_tensors(kind, shape, test)
    n = len(y)
    per_rank = [(i, min(i + batch, n)) for i in range(0, n, batch)][rank::world]
    parts = [(x[i:j], y[i:j]) for i, j in per_rank]

    def to_device(part):
        xb, yb = part
        return model_input(xb).to(device), yb.to(device)

    return parts, to_device
