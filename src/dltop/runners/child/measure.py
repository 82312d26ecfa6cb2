"""The one measured loop of every framework runner's training and inference steps.

Standard library only, valid Python 3.6 (it runs in every framework's interpreter).
The number dltop exists for, the seconds of one step, is taken here and nowhere
else (generation requests have their own loop, lm_loop, which times prefill and
decode separately). A runner hands :func:`run` a ``step(i)`` closure doing the
framework's work for step ``i`` and, where the step leaves the device busy, a
``sync(out)`` adapter that waits for it and reads the loss on the host:

- PyTorch: :func:`item` (``torch.cuda.synchronize`` first on a GPU, then
  ``loss.item()``);
- TensorFlow: :func:`host_read` (``.numpy()`` of the loss, or of one logit);
- JAX: :func:`blocked` (``jax.block_until_ready``, then the loss off the outputs);
- CNTK: :func:`loss_average` (the trainer's ``previous_minibatch_loss_average``).

Both calls are inside the step's timed window, as is the batch the step fetches.

One step, in order: the test hooks' fault point (``hang``, ``crash``,
``crash-rank1``: before step 1 starts, after iteration 0 was reported, outside
every clock), the training clock's start, ``t0``, ``step(i)``, ``sync``, the step's
seconds, the ``nan`` hook (step 2's loss, once its time was taken, becomes NaN: the
timed work is the same as any other step's), the ``iter`` event, the divergence
check, then any evaluation the plan asks for, outside the training clock. See
docs/faults.md, "Test hooks".
"""

import math
import time

try:
    import resource
except ImportError:  # not a Unix: the page-fault count is left out
    resource = None

import convergence
import dltop_protocol as proto

FAULT_STEP = 1
"""Before this step starts, ``hang``/``crash``/``crash-rank1`` fire (proto.fault_hook)."""

NAN_STEP = 2
"""This step's loss is replaced by NaN under ``inject = "nan"`` (training only)."""


def run(step, plan, reporter, samples, evaluate=None, inject=None, sync=None,
        timer=time.perf_counter):
    """Run the plan's steps, timing and reporting each; evaluate where the plan says.

    Args:
        step: ``step(i)`` does step ``i``'s work (its batch included); it returns the
            loss as a float, or what ``sync`` takes, or None (inference).
        plan: a :class:`convergence.Plan` (its ``timed`` window already set).
        reporter: the :class:`dltop_protocol.Reporter`.
        samples: samples per step (the ``iter`` events' ``samples``).
        evaluate: ``evaluate() -> (mean loss, accuracy or None, samples)``, called
            outside the timed steps and the training clock (:func:`convergence.send_eval`).
        inject: the profile's ``inject`` test hook, or None.
        sync: ``sync(out) -> loss or None``, timed with the step; None when ``step``
            returns the host value itself.
        timer: seconds (tests give a fake clock).

    Returns:
        The measured (non-warm-up) step count: the plan's, or more under its time window.

    Raises:
        dltop_protocol.Diverged: a step's loss is not finite.
    """
    clock = convergence.TrainClock(timer)
    # Decided once: the loop itself adds a comparison per step, not a call.
    fault_at = FAULT_STEP if inject else -1
    nan_at = NAN_STEP if inject == "nan" else -1
    faults_at = None
    measuring = False
    for i in plan.steps():
        if i == fault_at:
            proto.fault_hook(inject, i)
        if not measuring and not plan.is_warmup(i):
            measuring = True
            faults_at = page_faults()
        clock.start()
        t0 = timer()
        if sync is None:
            loss = step(i)
        else:
            loss = sync(step(i))
        dt = timer() - t0
        if i == nan_at and loss is not None:
            loss = float("nan")
        reporter.iteration(i, dt, samples, plan.is_warmup(i), loss)
        if loss is not None and not math.isfinite(loss):
            raise proto.Diverged("non-finite loss %r at iteration %d" % (loss, i))
        if evaluate is not None and plan.eval_after(i):
            convergence.send_eval(reporter, plan, i, clock, evaluate)
    if faults_at is not None and plan.measured_steps:
        reporter.page_faults_per_step = (page_faults() - faults_at) / plan.measured_steps
    return plan.measured_steps


def page_faults():
    """This process's page faults so far (minor and major, every thread; None where the
    ``resource`` module is missing). Read once as the measured steps begin and once
    after: with glibc's default malloc, a CPU step that maps its large buffers afresh
    each time pays the kernel's zeroing of every page (measured: 4 096 to 12 256 faults a
    step on alexnet-r, batch 128, ~15 % of the step), and whether it does depends on
    the process's allocation history; the count makes that visible per run."""
    if resource is None:
        return None
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_minflt + use.ru_majflt


def item(synchronize=None):
    """PyTorch's ``sync``: ``synchronize()`` (``torch.cuda.synchronize`` bound to the
    device; None on a CPU), then the loss tensor's ``item()`` (None in inference)."""
    if synchronize is None:
        def sync(loss):
            return None if loss is None else loss.item()
    else:
        def sync(loss):
            synchronize()
            return None if loss is None else loss.item()
    return sync


def host_read(loss=True):
    """TensorFlow's ``sync``: the host reads the step's scalar (``.numpy()``), which
    waits for the device; it is the loss (``loss=True``) or one logit (inference: None)."""
    if loss:
        def sync(out):
            return float(out.numpy())
    else:
        def sync(out):
            out.numpy()
            return None
    return sync


def blocked(block_until_ready, loss_at=None):
    """JAX's ``sync``: ``block_until_ready(out)``, then ``float(out[loss_at])`` (None
    for inference, ``loss_at`` None)."""
    if loss_at is None:
        def sync(out):
            block_until_ready(out)
            return None
    else:
        def sync(out):
            block_until_ready(out)
            return float(out[loss_at])
    return sync


def loss_average(trainer):
    """CNTK's ``sync``: reading the trainer's last minibatch loss back to the host
    waits for the step (``step`` returns anything; the trainer holds the loss)."""
    def sync(_out):
        return float(trainer.previous_minibatch_loss_average)
    return sync
