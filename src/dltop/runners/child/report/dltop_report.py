"""Report training iterations to dltop from your own script (any Python >= 3.6).

    from dltop_report import step

    for batch in loader:
        with step(samples=len(batch)) as s:
            loss = train_step(batch)
            s.loss = float(loss)   # optional

Run by dltop (``framework = "command"``), each ``step`` sends one iteration
event; run by hand (no ``$DLTOP_EVENT_FD``) it does nothing. Time what you
want measured inside the block, synchronised with your device.

A Hugging Face ``Trainer`` reports each optimizer step with
``Trainer(..., callbacks=[HFCallback()])`` (docs/own-programs.md).
"""

import json
import os
import sys
import time

_FD = os.environ.get("DLTOP_EVENT_FD")
_state = {"index": 0}
_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
"""Where torchrun (and accelerate launch), Open MPI and MPICH/Intel MPI put a process's
global rank: only rank 0 reports, so every rank's loop counts its step once."""


def _other_rank():
    for name in _RANK_VARS:
        value = os.environ.get(name)
        if value is not None:
            return value.strip() != "0"
    return False


def _target():
    """The descriptor events go to: the inherited pipe, or in a process that has not
    got it (torchrun's workers: their launcher closes inherited descriptors) the
    run's FIFO, opened once. The pipe is checked by its identity: a process without
    it may hold another file under that number, which must not be written into."""
    fd = _state.get("fd")
    if fd is not None:
        return fd
    try:
        fd = int(_FD)
        st = os.fstat(fd)
        want = os.environ.get("DLTOP_EVENT_FD_ID")
        if want and want != "%d:%d" % (st.st_dev, st.st_ino):
            raise OSError("descriptor %d is another file in this process" % fd)
    except (OSError, ValueError) as exc:
        fifo = os.environ.get("DLTOP_REPORT_FIFO")
        if not fifo:
            raise exc
        # O_NONBLOCK: fails at once, never waits, should the runner be gone
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.set_blocking(fd, True)
    _state["fd"] = fd
    return fd


def report(seconds, samples=None, loss=None):
    """Report one iteration that took ``seconds`` and ended now."""
    _send(seconds, samples, loss, _now_ns())


def _now_ns():
    return int(time.monotonic() * 1e9)


def _send(seconds, samples, loss, t_mono_ns):
    if not _FD or _state.get("off") or _other_rank():
        return
    event = {"v": 1, "event": "iter", "index": _state["index"], "seconds": float(seconds),
             "samples": samples, "loss": None if loss is None else float(loss),
             "t_mono_ns": t_mono_ns}
    _state["index"] += 1
    try:
        # one write of a line under PIPE_BUF: ranks writing into the FIFO never mix lines
        os.write(_target(), (json.dumps(event) + "\n").encode("utf-8"))
    except (OSError, ValueError) as exc:
        # Reporting must never stop the user's training: a process that can reach
        # neither the pipe nor the FIFO goes on unreported, and says so once.
        _state["off"] = True
        sys.stderr.write("dltop_report: reporting off in pid %d (DLTOP_EVENT_FD=%s: %s)\n"
                         % (os.getpid(), _FD, exc))


class step(object):  # noqa: N801 - reads as a verb at the call site
    """Context manager timing one iteration; set ``.loss`` inside to report it."""

    def __init__(self, samples=None):
        self.samples = samples
        self.loss = None
        self._t0 = None

    def __enter__(self):
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            report(time.perf_counter() - self._t0, self.samples, self.loss)
        return False


def _ignore(*args, **kwargs):
    return None


class HFCallback(object):
    """A Hugging Face ``transformers`` Trainer callback: one iteration per optimizer step.

        from dltop_report import HFCallback
        trainer = Trainer(model=..., args=..., callbacks=[HFCallback()])

    A step is timed from ``on_step_begin`` to ``on_step_end``: every micro-batch of
    gradient accumulation, backward and optimizer step; not the loading of the
    first batch, nor logging, evaluation or checkpoints, which the Trainer does
    after ``on_step_end``. With ``sync`` (default) and a CUDA device already in use,
    both ends wait for the device (``torch.cuda.synchronize``), else a step would
    be only its kernel launches. Samples per step: the Trainer's batch (per device,
    times DataParallel GPUs) x gradient_accumulation_steps x world_size, when
    ``args`` has them. A step's loss is the Trainer's logged ``loss`` (its mean
    since the last log, every ``logging_steps``), given to the step it was logged
    after. Only the main process (``state.is_world_process_zero``) reports.

    This module never imports ``transformers``. When the program has imported it,
    ``HFCallback()`` is also a ``transformers.TrainerCallback`` (a subclass made
    then), for code that checks; without it, the object still works: the
    Trainer's CallbackHandler takes any object and calls ``getattr(callback,
    event)(args, state, control, **kwargs)`` for each event, and events this class
    does not handle (those of later versions too) are no-ops.
    """

    def __new__(cls, *args, **kwargs):
        if cls is HFCallback:
            cls = _with_trainer_callback() or cls
        return object.__new__(cls)

    def __init__(self, sync=True):
        self.sync = sync
        self._t0 = None
        self._pending = None  # the last step (seconds, samples, end), until its loss is logged

    def __getattr__(self, name):
        # Only for names not found on the class: every other Trainer event.
        if name.startswith("on_"):
            return _ignore
        raise AttributeError(name)

    def on_step_begin(self, args, state, control, **kwargs):
        self._flush()
        if not getattr(state, "is_world_process_zero", True):
            return None
        self._sync()
        self._t0 = time.perf_counter()
        return None

    def on_step_end(self, args, state, control, **kwargs):
        if self._t0 is None:
            return None
        self._sync()
        seconds = time.perf_counter() - self._t0
        self._t0 = None
        self._pending = (seconds, _hf_samples(args), _now_ns())
        return None

    def on_log(self, args, state, control, logs=None, **kwargs):
        loss = (logs or {}).get("loss")
        if self._pending is not None and isinstance(loss, (int, float)):
            self._flush(loss)
        return None

    def on_epoch_end(self, args, state, control, **kwargs):
        self._flush()
        return None

    def on_train_end(self, args, state, control, **kwargs):
        self._flush()
        return None

    def _flush(self, loss=None):
        if self._pending is not None:
            seconds, samples, t_ns = self._pending
            self._pending = None
            _send(seconds, samples, loss, t_ns)

    def _sync(self):
        torch = sys.modules.get("torch")  # only if the program imported it: no import here
        cuda = getattr(torch, "cuda", None)
        if not self.sync or cuda is None:
            return
        try:
            if cuda.is_available() and cuda.is_initialized():
                cuda.synchronize()
        except Exception:  # noqa: BLE001 - a failed wait must not stop the training
            self.sync = False


def _with_trainer_callback():
    """HFCallback as a subclass of the program's ``transformers.TrainerCallback``, or None."""
    base = getattr(sys.modules.get("transformers"), "TrainerCallback", None)
    if not isinstance(base, type):
        return None
    made = _state.get("hf_class")
    if made is None or made.__bases__[1] is not base:
        # A module-level name of its own, so an instance still pickles.
        made = type("_HFTrainerCallback", (HFCallback, base), {"__module__": __name__})
        globals()["_HFTrainerCallback"] = made
        _state["hf_class"] = made
    return made


def _hf_samples(args):
    """Samples per optimizer step from the Trainer's ``TrainingArguments``, or None."""
    try:
        per_device = getattr(args, "train_batch_size", None) or getattr(
            args, "per_device_train_batch_size", None)
        accumulation = getattr(args, "gradient_accumulation_steps", 1) or 1
        world = getattr(args, "world_size", 1) or 1
        if per_device is None:
            return None
        return int(per_device) * int(accumulation) * int(world)
    except Exception:  # noqa: BLE001 - a property of another version that fails: unknown
        return None
