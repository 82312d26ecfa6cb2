"""The CNTK runner's steps: training (with epochs and evaluations) and inference.

Valid Python 3.6; imported by cntk_runner.py after CNTK is importable. Steps,
warm-up, evaluation points and ``train_s`` follow convergence.py; measure.run
times them, as every framework's.
"""

import cntk as C
import cntk_profile
import convergence
import dltop_protocol as proto
import measure
import numpy as np


def _evaluator(model, loss, x, y, feed, batch):
    """A function returning ``(mean test loss, accuracy or None, samples)``.

    Forward only (``Function.eval``: BatchNormalization uses its running
    statistics); the loss is the per-sample (per-token for the LSTM) cross
    entropy, averaged over the whole test set.
    """
    outputs = [loss] if feed.language_model else [loss, C.classification_error(model, y)]
    both = C.combine(outputs)

    def evaluate():
        totals = convergence.EvalTotals()
        for xb, yb, n in feed.test_batches(batch):
            out = both.eval({x: xb, y: yb})
            if feed.language_model:
                tokens = np.concatenate([np.ravel(s) for s in out]) if isinstance(out, list) \
                    else np.ravel(out)
                totals.add(float(np.mean(tokens)), None, n)
            else:
                errors = float(np.sum(out[both.outputs[1]]))
                totals.add(float(np.mean(out[both.outputs[0]])), n - int(round(errors)), n)
        return totals.result(feed.language_model)

    return evaluate


def train(spec, reporter, trainer, model, loss, x, y, feed, world, device):
    """Train for the plan's steps, reporting each and evaluating where it says.

    Returns the measured (non-warm-up) step count.
    """
    inject = (spec.get("options") or {}).get("inject")
    per_device = int(spec["per_device_batch"])
    plan = convergence.Plan(feed.n_train, per_device * world, spec.get("epochs"),
                            int(spec["iterations"]), int(spec["warmup"]),
                            spec.get("eval_every"))
    feed.global_batch, feed.steps_per_epoch = per_device * world, plan.steps_per_epoch
    if plan.eval_every is not None and feed.n_test is None:
        raise proto.Unsupported("eval_every needs real data with its test files")
    # Several MPI ranks have no way here to agree on a time-decided stop: the profile
    # loader refuses a time window for them (dltop.profiles.window).
    plan.timed(spec, reporter=reporter)
    plan.report(reporter, feed.n_test)
    evaluate = None
    if plan.eval_every is not None and proto.rank() == 0:
        evaluate = _evaluator(model, loss, x, y, feed, per_device)

    def step(i):
        xb, yb = feed.train_batch(i)
        return trainer.train_minibatch({x: xb, y: yb})

    # Reading the loss back to the host synchronises the step.
    measure.run(step, plan, reporter, int(spec["samples_per_iter"]), evaluate, inject,
                measure.loss_average(trainer))
    if spec.get("op_profile"):
        extra = {"step": plan.total_steps}

        def profiled_step():
            xb, yb = feed.train_batch(extra["step"])
            trainer.train_minibatch({x: xb, y: yb})
            float(trainer.previous_minibatch_loss_average)
            extra["step"] += 1

        cntk_profile.profile(reporter, device, trainer, profiled_step)
    return plan.measured_steps


def infer(spec, reporter, model, x, feed, device):
    """Forward passes only (``Function.eval``, no learner): one timed batch per iteration.

    ``iter.loss`` is null; ``samples`` the batch. Returns the measured count.
    """
    per_device = int(spec["per_device_batch"])
    plan = convergence.Plan(feed.n_train, per_device, None, int(spec["iterations"]),
                            int(spec["warmup"]))
    feed.global_batch, feed.steps_per_epoch = per_device, plan.steps_per_epoch
    plan.timed(spec, reporter=reporter)  # each rank's own forward passes: no collective
    plan.report(reporter, None)

    def step(i):
        # eval returns numpy arrays on the host: the forward pass has finished.
        model.eval({x: feed.train_batch(i)[0]})

    measure.run(step, plan, reporter, int(spec["samples_per_iter"]),
                inject=(spec.get("options") or {}).get("inject"))
    if spec.get("op_profile"):
        extra = {"step": plan.total_steps}

        def profiled_step():
            model.eval({x: feed.train_batch(extra["step"])[0]})
            extra["step"] += 1

        cntk_profile.profile(reporter, device, model, profiled_step)
    return plan.measured_steps
