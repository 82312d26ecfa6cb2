"""Convergence runs, child side: the step plan, the epoch order, the training clock, evals.

Standard library only, valid Python 3.6 (it runs in every framework's interpreter).
The framework runners share these so that epochs, evaluation points, shuffling and
the ``train_s`` of an ``eval`` event mean the same in PyTorch, TensorFlow and CNTK.

Steps are numbered from 0, as the ``iter`` events' ``index``. A run of ``epochs``
takes ``epochs * steps_per_epoch`` steps (``steps_per_epoch = n_train // batch``,
the last partial batch dropped); its first ``warmup`` steps are flagged warm-up but
still train. Without ``epochs`` a run takes ``warmup + iterations`` steps, as before,
or more under a time window (:meth:`Plan.timed`): warm-up goes on past ``warmup``
steps until ``warmup_s`` have passed since the first step began, and measuring goes
on past ``iterations`` until ``min_time_s`` have passed since the first measured
step began. The decision to take one more step is made once, between steps, and
the loop asks for it through :meth:`Plan.steps`; ``total_steps``, ``warmup`` and
``measured_steps`` then hold what the run really did.

Typical use in a runner::

    plan = Plan(n_train, batch, spec["epochs"], spec["iterations"], spec["warmup"],
                spec["eval_every"])
    plan.report(reporter, n_test)
    order = EpochOrder(n_train, spec["shuffle"], spec["seed"])
    clock = TrainClock()
    for step in plan.steps():
        clock.start()
        idx = order.batch(step, batch, plan.steps_per_epoch)
        ...  # timed training step on the samples ``idx``, iter event
        if plan.eval_after(step):
            send_eval(reporter, plan, step, clock, evaluate)
"""

import math
import random
import time

EPOCH = "epoch"
"""``eval_every`` value: evaluate after each epoch."""

STOP, MEASURE, WARM = 0, 1, 2
"""What the next step is (a time window's decision, the value ranks agree on)."""


class Plan(object):
    """Which steps a run takes, which are warm-up, and after which it evaluates.

    Args:
        n_train: training samples (None for synthetic data: no epochs).
        global_batch: samples per step over all ranks.
        epochs: epochs to train (None: ``warmup + iterations`` steps).
        iterations: measured steps when ``epochs`` is None (ignored otherwise).
        warmup: leading steps flagged warm-up.
        eval_every: None (no evaluation), ``"epoch"``, or an int N (after every N
            steps, counted from the first, and once after the last step).

    Raises:
        ValueError: the data set holds fewer samples than one batch, ``epochs``
            without ``n_train``, ``"epoch"`` evaluation without ``n_train``, or
            an ``eval_every`` that is neither.
    """

    def __init__(self, n_train, global_batch, epochs, iterations, warmup, eval_every=None):
        self.n_train = None if n_train is None else int(n_train)
        self.global_batch = int(global_batch)
        self.epochs = None if epochs is None else int(epochs)
        self.warmup = int(warmup)
        self.eval_every = eval_every
        if self.n_train is None:
            self.steps_per_epoch = None
        else:
            self.steps_per_epoch = self.n_train // self.global_batch
            if self.steps_per_epoch < 1:
                raise ValueError("the training set has %d samples, fewer than the batch %d"
                                 % (self.n_train, self.global_batch))
        if self.epochs is not None:
            if self.steps_per_epoch is None:
                raise ValueError("epochs needs a training set (real data)")
            self.total_steps = self.epochs * self.steps_per_epoch
        else:
            self.total_steps = self.warmup + int(iterations)
        if eval_every == EPOCH and self.steps_per_epoch is None:
            raise ValueError('eval_every = "epoch" needs a training set (real data)')
        if not (eval_every is None or eval_every == EPOCH
                or (isinstance(eval_every, int) and not isinstance(eval_every, bool)
                    and eval_every > 0)):
            raise ValueError('eval_every must be null, "epoch" or a positive int, not %r'
                             % (eval_every,))
        self.iterations = self.total_steps - self.warmup
        self.min_time_s = 0.0
        self.warmup_s = 0.0
        self._agree = None
        self._clock = time.perf_counter
        self._decided = (-1, MEASURE)
        self._t_first = None
        self._t_window = None
        self._warming = True

    def timed(self, spec, agree=None, clock=None, reporter=None):
        """Take the spec's ``min_time_s`` and ``warmup_s`` (absent or 0: counts only).

        The windows are timed as the parent times the measured window: from the
        ``t_mono_ns`` of the last warm-up ``iter`` to that of the last measured one,
        read off ``reporter`` (``clock``, seconds, replaces it in tests), so a run
        stopped by ``min_time_s`` has a stored window at least that long.

        An ``epochs`` run ignores them: its length is its epochs (the profile loader
        refuses both there). ``agree(code)`` makes data-parallel ranks take the same
        decision: it must return rank 0's ``code`` (:data:`STOP`, :data:`MEASURE` or
        :data:`WARM`) on every rank. It is called on every rank at the same steps: each
        step past ``warmup`` while ``warmup_s`` may extend the warm-up, and each step
        past ``iterations`` while ``min_time_s`` may extend the window, whatever this
        rank's own clock says (a rank that skipped the call would leave the others
        waiting in it). Returns the plan.
        """
        if self.epochs is None:
            self.min_time_s = float(spec.get("min_time_s") or 0.0)
            self.warmup_s = float(spec.get("warmup_s") or 0.0)
        self._agree = agree
        if clock is not None:
            self._clock = clock
        elif reporter is not None:
            self._clock = _iter_ends(reporter)
        return self

    @property
    def is_timed(self):
        """Whether the step count depends on the time (a window in seconds is set)."""
        return bool(self.min_time_s or self.warmup_s)

    def steps(self):
        """The step indices to run, 0, 1, ...: ``range(total_steps)`` without a time
        window; with one, each further step is decided when the previous one ended."""
        step = 0
        while self._next(step) != STOP:
            yield step
            step += 1

    def _next(self, step):
        """What step ``step`` is: :data:`STOP`, :data:`MEASURE` or :data:`WARM`, decided
        once (when first asked, right after step ``step - 1`` ended)."""
        if self._decided[0] == step:
            return self._decided[1]
        if not self.is_timed:
            code = STOP if step >= self.total_steps else (
                WARM if step < self.warmup else MEASURE)
        else:
            code = self._by_time(step)
        self._decided = (step, code)
        return code

    def _by_time(self, step):
        now = self._clock()
        if self._t_first is None:
            self._t_first = now
        if self._warming:
            if step < self.warmup:
                return WARM
            code = MEASURE
            if self.warmup_s:  # every rank asks, whatever its own clock says
                code = self._agreed(WARM if now - self._t_first < self.warmup_s else MEASURE)
            if code == WARM:
                self.warmup = step + 1
                self.total_steps = max(self.total_steps, self.warmup + self.iterations)
                return WARM
            self._warming = False
            self.warmup = step
            self._t_window = now
        measured = step - self.warmup
        if measured < self.iterations:
            code = MEASURE
        elif self.min_time_s:
            code = self._agreed(MEASURE if now - self._t_window < self.min_time_s else STOP)
        else:
            code = STOP
        if code == STOP:
            self.total_steps = step
        else:
            self.total_steps = max(self.total_steps, step + 1)
        return code

    def _agreed(self, code):
        """This rank's time-dependent ``code``, or rank 0's where ranks must agree."""
        if self._agree is None:
            return code
        return int(self._agree(code))

    @property
    def measured_steps(self):
        """Steps not flagged warm-up (the ``done`` event's ``iterations``)."""
        return max(0, self.total_steps - self.warmup)

    def is_warmup(self, step):
        """Whether step ``step`` (from 0) is flagged warm-up (ask after :meth:`steps`
        gave it: a time window decides warm-up step by step)."""
        return step < self.warmup

    def eval_after(self, step):
        """Whether to evaluate after step ``step`` (from 0).

        ``"epoch"``: after the step that ends an epoch (and after the last step
        when a run by ``iterations`` ends mid-epoch); int N: after steps N, 2N, ...
        (counted from 1) and after the last step.
        """
        if self.eval_every is None or step < 0:
            return False
        if self.is_timed:
            # The last step is known once the next is decided: decide it now.
            if self._next(step + 1) == STOP:
                return True
        elif step >= self.total_steps:
            return False
        elif step == self.total_steps - 1:
            return True
        every = self.steps_per_epoch if self.eval_every == EPOCH else self.eval_every
        return (step + 1) % every == 0

    def epoch_of(self, step):
        """Epochs completed after step ``step``: 1.0 after the first epoch, 0.5 mid-way.

        None without a training set.
        """
        if self.steps_per_epoch is None:
            return None
        return (step + 1) / float(self.steps_per_epoch)

    def report(self, reporter, n_test=None):
        """Send the ``plan`` event (once, after ``model``, before the first ``iter``)."""
        reporter.plan(iterations=self.total_steps,
                      steps_per_epoch=self.steps_per_epoch if self.epochs is not None else None,
                      epochs=self.epochs, n_train=self.n_train, n_test=n_test)


def _iter_ends(reporter):
    """Seconds of the last ``iter`` event's end (``time.monotonic`` before the first)."""
    def clock():
        ns = getattr(reporter, "last_iter_mono_ns", None)
        return time.monotonic() if ns is None else ns / 1e9
    return clock


class EpochOrder(object):
    """The order of the training samples in each epoch.

    Without shuffling every epoch visits ``0 .. n-1`` in order; with it, epoch
    ``e`` (from 0) is a permutation drawn with ``random.Random(seed + e)``, so
    every framework sees the same order for the same seed.
    """

    def __init__(self, n, shuffle, seed=0):
        self.n = int(n)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self._epoch = None
        self._order = None

    def order(self, epoch):
        """Sample indices of epoch ``epoch`` (from 0), a list of ``n`` ints."""
        if epoch != self._epoch:
            order = list(range(self.n))
            if self.shuffle:
                random.Random(self.seed + epoch).shuffle(order)
            self._epoch, self._order = epoch, order
        return self._order

    def batch(self, step, batch, steps_per_epoch=None):
        """Sample indices of step ``step``'s batch (an epoch's last partial batch is dropped)."""
        per_epoch = steps_per_epoch or self.n // batch
        if per_epoch < 1:
            raise ValueError("%d samples, fewer than the batch %d" % (self.n, batch))
        epoch, pos = divmod(step, per_epoch)
        return self.order(epoch)[pos * batch:(pos + 1) * batch]

    def is_contiguous(self):
        """True when batches are plain slices (no shuffling): a runner may slice instead."""
        return not self.shuffle


class TrainClock(object):
    """Wall seconds of training so far, evaluations excluded (an ``eval`` event's ``train_s``).

    Starts at the first :meth:`start` (the first step's start, before its data
    is loaded); the time inside :meth:`pause_for_eval` blocks is excluded.
    """

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._t0 = None
        self._excluded = 0.0

    def start(self):
        """Mark the start of a step; only the first call counts."""
        if self._t0 is None:
            self._t0 = self._clock()

    @property
    def train_s(self):
        """Seconds since the first step's start, minus the time spent evaluating."""
        if self._t0 is None:
            return 0.0
        return self._clock() - self._t0 - self._excluded

    def timed_eval(self, evaluate):
        """Call ``evaluate()`` outside the training time: ``(its result, seconds it took)``."""
        t0 = self._clock()
        try:
            result = evaluate()
        finally:
            dt = self._clock() - t0
            if self._t0 is not None:
                self._excluded += dt
        return result, dt


class EvalTotals(object):
    """Accumulates test batches into a mean loss, an accuracy and a sample count."""

    def __init__(self):
        self.loss_sum = 0.0
        self.correct = 0
        self.samples = 0

    def add(self, mean_loss, correct, samples):
        """One test batch: its mean loss, correct predictions (None for a language model), size."""
        self.loss_sum += float(mean_loss) * samples
        if correct is not None:
            self.correct += int(correct)
        self.samples += int(samples)

    def result(self, language_model=False):
        """``(mean loss, accuracy or None, samples)`` as ``send_eval``'s ``evaluate`` returns."""
        if not self.samples:
            return float("nan"), None, 0
        loss = self.loss_sum / self.samples
        return loss, None if language_model else self.correct / float(self.samples), self.samples


def eval_slices(n_test, batch):
    """``(start, end)`` slices covering all ``n_test`` test samples (the last one may be short)."""
    return [(i, min(i + batch, n_test)) for i in range(0, n_test, batch)]


def perplexity(loss):
    """``exp(loss)``; inf when it overflows or the loss is not finite."""
    try:
        return math.exp(loss) if math.isfinite(loss) else float("inf")
    except OverflowError:
        return float("inf")


def send_eval(reporter, plan, step, clock, evaluate):
    """Evaluate after step ``step`` outside the training clock and send the ``eval`` event.

    ``evaluate()`` returns ``(mean test loss, accuracy or None, test samples)``;
    accuracy None marks a language model, whose perplexity ``exp(loss)`` is sent
    instead. Returns the event's fields as a dict.
    """
    (loss, accuracy, samples), eval_s = clock.timed_eval(evaluate)
    fields = {"index": step, "epoch": plan.epoch_of(step), "accuracy": accuracy,
              "perplexity": perplexity(loss) if accuracy is None else None,
              "loss": loss, "eval_s": eval_s, "train_s": clock.train_s, "samples": samples}
    reporter.eval(**fields)
    return fields
