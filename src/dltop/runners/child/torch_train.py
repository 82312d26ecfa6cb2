"""The PyTorch runner's steps, their synchronisation, and the evaluation.

Child side, valid Python 3.6. A step is one training step (or, in inference mode,
one forward pass) for measure.run: it returns the loss tensor (None in inference)
and leaves the device to :func:`synchronizer`, the loop's ``sync`` adapter, which
waits for it and reads the loss on the host inside the step's timed window.
"""

import math

import measure
import torch
import torch.nn.functional as F


def train_step(model, opt, loss_fn, next_batch, autocast, scaler):
    """One training step ``step(i=None) -> loss tensor``: batch, forward, backward,
    optimizer update (the index is measure.run's; batches come in order)."""

    def step(_i=None):
        x, y = next_batch()
        opt.zero_grad(set_to_none=True)
        if autocast is not None:
            with autocast():
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    return step


def inference_step(model, next_batch, autocast):
    """One forward pass ``step(i=None) -> None`` under ``torch.inference_mode()`` (the
    model is in eval mode: dropout off, batch norm on its running statistics, so
    batch 1 works)."""

    def step(_i=None):
        with torch.inference_mode():
            x, _ = next_batch()
            if autocast is not None:
                with autocast():
                    model(x)
            else:
                model(x)
        return None

    return step


def synchronizer(device):
    """The ``sync`` of measure.run: ``torch.cuda.synchronize`` on a GPU, then ``loss.item()``."""
    if device.type != "cuda":
        return measure.item()
    return measure.item(lambda: torch.cuda.synchronize(device))


def evaluate(model, parts, to_device, autocast, vocab=None, world=1):
    """Mean test loss, accuracy (None for the LSTM), perplexity (LSTM only), samples.

    ``parts`` is this rank's share of the test set; in a data-parallel run the
    sums are all-reduced, so every rank gets the whole test set's figures.
    """
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64)
    correct = torch.zeros((), dtype=torch.float64)
    targets = samples = 0
    try:
        with torch.inference_mode():
            for part in parts:
                x, y = to_device(part)
                if autocast is not None:
                    with autocast():
                        out = model(x)
                else:
                    out = model(x)
                out = out.float()
                if vocab is not None:
                    out, flat = out.reshape(-1, vocab), y.reshape(-1)
                else:
                    flat = y
                loss_sum += F.cross_entropy(out, flat, reduction="sum").double().cpu()
                correct += (out.argmax(-1) == flat).sum().double().cpu()
                targets += flat.numel()
                samples += len(y)
    finally:
        model.train(was_training)
    totals = torch.tensor([float(loss_sum), float(correct), targets, samples],
                          dtype=torch.float64)
    if world > 1:
        import torch.distributed as dist

        dist.all_reduce(totals)
    loss_sum, correct, targets, samples = totals.tolist()
    loss = loss_sum / targets if targets else float("nan")
    if vocab is not None:
        ppl = math.exp(loss) if loss < 700 else float("inf")
        return loss, None, ppl, int(samples)
    return loss, correct / targets if targets else None, None, int(samples)


def rank0_decides(device):
    """``agree(code)`` for :meth:`convergence.Plan.timed` in a data-parallel run: every
    rank gets rank 0's decision (one broadcast, only when a time window decides), so
    no rank takes a step whose collectives the others never join. None for one rank."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    # NCCL broadcasts device tensors only; gloo host tensors.
    buf = torch.zeros(1, dtype=torch.int64,
                      device=device if dist.get_backend() == "nccl" else "cpu")

    def agree(code):
        buf.fill_(int(code))
        dist.broadcast(buf, 0)
        return int(buf.item())

    return agree
