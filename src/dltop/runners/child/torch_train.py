"""The PyTorch runner's steps, its training loop with evaluations, and the evaluation.

Child side, valid Python 3.6. A step is one complete, device-synchronised
training step (or, in inference mode, one forward pass); it returns the loss
as a float (None in inference mode).
"""

import math
import time

import convergence
import dltop_protocol as proto
import torch
import torch.nn.functional as F


def train_step(model, opt, loss_fn, next_batch, autocast, scaler, device, inject=None):
    """One training step: batch, forward, backward, optimizer update, synchronise."""
    cuda = device.type == "cuda"
    state = {"i": 0}

    def step():
        proto.fault_hook(inject, state["i"])
        x, y = next_batch()
        opt.zero_grad(set_to_none=True)
        if autocast is not None:
            with autocast():
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        if inject == "nan" and state["i"] == 2:
            loss = loss * float("nan")
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        if cuda:
            torch.cuda.synchronize(device)
        value = loss.item()
        state["i"] += 1
        return value

    return step


def inference_step(model, next_batch, autocast, device, inject=None):
    """One forward pass under ``torch.inference_mode()`` (the model is in eval mode:
    dropout off, batch norm on its running statistics, so batch 1 works)."""
    cuda = device.type == "cuda"
    state = {"i": 0}

    def step():
        proto.fault_hook(inject, state["i"])
        with torch.inference_mode():
            x, _ = next_batch()
            if autocast is not None:
                with autocast():
                    model(x)
            else:
                model(x)
        if cuda:
            torch.cuda.synchronize(device)
        state["i"] += 1
        return None

    return step


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


def run_steps(step, plan, reporter, samples, evaluate=None, timer=time.perf_counter):
    """Run the plan's training steps, reporting each; evaluate where the plan says.

    ``evaluate()`` (see :func:`convergence.send_eval`) runs outside the timed
    steps and outside the training clock, so an ``eval`` event's ``train_s``
    counts training only. Raises :class:`dltop_protocol.Diverged` on a
    non-finite loss. Returns the measured (non-warm-up) step count: the plan's, or
    more under its time window (``min_time_s``, ``warmup_s``).
    """
    clock = convergence.TrainClock(timer)
    for i in plan.steps():
        clock.start()
        t0 = timer()
        loss = step()
        dt = timer() - t0
        reporter.iteration(i, dt, samples, plan.is_warmup(i), loss)
        if loss is not None and not math.isfinite(loss):
            raise proto.Diverged("non-finite loss %r at iteration %d" % (loss, i))
        if evaluate is not None and plan.eval_after(i):
            convergence.send_eval(reporter, plan, i, clock, evaluate)
    return plan.measured_steps
