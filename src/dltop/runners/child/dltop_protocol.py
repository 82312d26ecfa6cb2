"""dltop runner protocol v1, child side.

Standard library only, valid Python 3.6: this file runs inside every
framework's own interpreter (CNTK 2.7 exists only for Python <= 3.7).

Invocation: ``<python> <runner script> <spec.json>`` with the event pipe's
write end inherited as file descriptor ``$DLTOP_EVENT_FD``. Events are JSON
objects, one per line, each with ``"v": 1`` and an ``"event"`` name:

- ``hello``: framework, framework_version, python_version, device, threads, pid, extra facts
- ``model``: param_count, flops_per_sample (or null)
- ``iter``: index, seconds, samples, warmup, loss, t_mono_ns (end of step)
- ``plan``: iterations (total steps, warm-up included), steps_per_epoch, epochs, n_train, n_test
- ``eval``: index, epoch, accuracy, perplexity, loss, eval_s, train_s, samples
- ``profile``: steps, step_ms, device, ops (at most 40, by self time)
- ``done``: iterations (measured, warm-up excluded)
- ``error``: kind (oom | unsupported | diverged | crash), message

Without ``$DLTOP_EVENT_FD`` (a run by hand) events go to stderr.
"""

import json
import math
import os
import re
import sys
import time
import traceback

PROTOCOL_VERSION = 1
EXIT_OK = 0
EXIT_ERROR = 3
MAX_EVENT_DEPTH = 32
"""No event nests deeper (``profile``'s ops reach 3): a deeper line is refused unread,
as ``json.loads`` recurses once per level and dies of RecursionError on ``[`` x 100 000."""
# A JSON string (skipped whole, brackets inside it do not count) or one bracket.
_JSON_TOKEN = re.compile(br'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)


def too_deep(line, limit=MAX_EVENT_DEPTH):
    """True when the JSON text ``line`` (bytes or str) nests arrays/objects deeper than
    ``limit``: checked before ``json.loads``, without recursion."""
    if not isinstance(line, bytes):
        line = line.encode("utf-8", "replace")
    if line.count(b"[") + line.count(b"{") <= limit:
        return False  # the common case: too few brackets to be that deep
    depth = 0
    for m in _JSON_TOKEN.finditer(line):
        tok = m.group()
        if tok in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif tok in (b"]", b"}"):
            depth = max(0, depth - 1)
    return False


class Unsupported(Exception):
    """The configuration cannot run here (model, precision or device not supported)."""


class Diverged(Exception):
    """The loss became NaN or infinite."""


class Failed(Exception):
    """A crash the runner explains itself: reported as its message, without a traceback."""


class Reporter(object):
    """Writes protocol events to the event pipe."""

    def __init__(self, fd=None):
        if fd is None:
            env = os.environ.get("DLTOP_EVENT_FD")
            fd = int(env) if env else None
        self._fd = fd
        self.gone = False
        """The engine is gone (its event pipe closed): :meth:`emit` raised SystemExit."""
        # In a data-parallel run only rank 0 reports; the other ranks stay silent.
        self._silent = os.environ.get("DLTOP_RANK", "0") != "0"
        self.gpu_mem_peak_bytes = None
        """The framework's own GPU memory peak (bytes, all the run's GPUs), set by a runner."""
        self.page_faults_per_step = None
        """Page faults per measured step (measure.run sets it; evaluations inside the
        measured window included)."""
        self.last_iter_mono_ns = None
        """The ``t_mono_ns`` of the last ``iter`` (also on a silent rank): the end of
        the measured window as the parent sees it (convergence.Plan's time window)."""

    def emit(self, event, **fields):
        if self._silent:
            return
        fields["v"] = PROTOCOL_VERSION
        fields["event"] = event
        line = (json.dumps(fields, separators=(",", ":"), allow_nan=False, default=str)
                + "\n").encode("utf-8")
        if self._fd is None:
            sys.stderr.write(line.decode("utf-8"))
            sys.stderr.flush()
            return
        view = memoryview(line)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except BrokenPipeError:
            # The engine is gone (killed, or its login session lost): nothing this run
            # measures can be stored, so it stops now, quietly; finally blocks still run (a
            # server the run started is stopped) and later events go to the log.
            self._fd = None
            self.gone = True
            sys.stderr.write("dltop: the engine's event pipe closed (the engine is gone); "
                             "this run stops\n")
            sys.stderr.flush()
            raise SystemExit(EXIT_ERROR) from None

    def hello(self, framework, framework_version, device, threads, **extra):
        self.emit("hello", framework=framework, framework_version=framework_version,
                  python_version=sys.version.split()[0], python_executable=sys.executable,
                  device=device, threads=threads, pid=os.getpid(), **extra)

    def model(self, param_count, flops_per_sample=None):
        self.emit("model", param_count=int(param_count), flops_per_sample=flops_per_sample)

    def iteration(self, index, seconds, samples, warmup, loss, t_mono_ns=None):
        """``t_mono_ns``: the step's end (``time.monotonic``, ns); now when not given."""
        end_ns = int(time.monotonic() * 1e9) if t_mono_ns is None else int(t_mono_ns)
        self.last_iter_mono_ns = end_ns
        self.emit("iter", index=index, seconds=seconds, samples=samples, warmup=bool(warmup),
                  loss=_loss(loss), t_mono_ns=end_ns)

    def plan(self, iterations, steps_per_epoch=None, epochs=None, n_train=None, n_test=None):
        """Sent once after ``model``, before the first ``iter``: the steps the run will take."""
        self.emit("plan", iterations=int(iterations), steps_per_epoch=_opt_int(steps_per_epoch),
                  epochs=_opt_int(epochs), n_train=_opt_int(n_train), n_test=_opt_int(n_test))

    def eval(self, index, epoch, accuracy, perplexity, loss, eval_s, train_s, samples):
        """One evaluation on the test set after training step ``index``.

        ``train_s`` excludes every evaluation; ``loss`` may be non-finite (sent as a string).
        """
        self.emit("eval", index=int(index), epoch=None if epoch is None else float(epoch),
                  accuracy=_opt_float(accuracy), perplexity=_opt_float(perplexity),
                  loss=_loss(loss), eval_s=float(eval_s), train_s=float(train_s),
                  samples=int(samples))

    def profile(self, steps, step_ms, device, ops):
        """The per-operator profile of ``steps`` extra steps; ``ops`` dicts as in the protocol."""
        ops = sorted(ops, key=_op_key(device))[:MAX_PROFILE_OPS]
        self.emit("profile", steps=int(steps), step_ms=float(step_ms), device=device,
                  ops=[{"name": str(op["name"]), "calls": int(op["calls"]),
                        "self_cpu_ms": float(op["self_cpu_ms"]),
                        "self_device_ms": _opt_float(op.get("self_device_ms")),
                        "total_ms": float(op["total_ms"]),
                        "shapes": None if op.get("shapes") is None else str(op["shapes"])}
                       for op in ops])

    def generation(self, index, warmup, ttft_s, itl_s, prompt_tokens, new_tokens, batch,
                   distinct_tokens=None):
        """One generation request (``mode = "generate"``), sent before its ``iter`` event.

        ``ttft_s``: prompt in to first token out (prefill and the first token's
        sampling, device-synchronised); ``itl_s``: the ``new_tokens - 1`` later
        tokens' latencies, each from the previous token's end to this one's.
        ``batch`` sequences decode together, so each latency is the whole batch's.
        ``distinct_tokens``: Σ over the sequences of their distinct generated ids
        (None: not counted).
        """
        more = {} if distinct_tokens is None else {"distinct_tokens": int(distinct_tokens)}
        self.emit("generate", index=int(index), warmup=bool(warmup), ttft_s=float(ttft_s),
                  itl_s=[float(x) for x in itl_s], prompt_tokens=int(prompt_tokens),
                  new_tokens=int(new_tokens), batch=int(batch), **more)

    def done(self, iterations):
        # gpu_mem_peak_bytes: what the framework itself counts as its peak allocation on
        # the run's GPUs (a runner sets it before returning), beside NVML's device view.
        # page_faults_per_step: measure.run's count over the measured steps.
        more = {}
        if self.gpu_mem_peak_bytes is not None:
            more["gpu_mem_peak_bytes"] = int(self.gpu_mem_peak_bytes)
        if self.page_faults_per_step is not None:
            more["page_faults_per_step"] = float(self.page_faults_per_step)
        self.emit("done", iterations=iterations, **more)

    def error(self, kind, message):
        self.emit("error", kind=kind, message=message[-4000:])


MAX_PROFILE_OPS = 40
"""Operators a ``profile`` event carries at most."""


def _opt_int(value):
    return None if value is None else int(value)


def _opt_float(value):
    # JSON has no NaN: a non-finite metric is sent as its string, like iter.loss.
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else str(value)


def _loss(loss):
    # float(): a numpy scalar would otherwise reach json.dumps' default=str as text.
    return None if loss is None else float(loss) if math.isfinite(loss) else str(float(loss))


def _op_key(device):
    def key(op):
        own = op.get("self_device_ms") if device == "cuda" else None
        return -(own if own is not None else op["self_cpu_ms"])
    return key


def cpu_name():
    """The CPU model from /proc/cpuinfo (``cpu`` where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def rank():
    """This process's data-parallel rank (0 when not data-parallel)."""
    return int(os.environ.get("DLTOP_RANK", "0"))


def fault_hook(inject, step):
    """The ``inject`` test hooks, called before each step: at the start of the second
    one (after the first iteration was reported) ``hang`` sleeps forever, ``crash`` exits
    without a report, ``crash-rank1`` does so on rank 1 only."""
    if step != 1 or not inject:
        return
    if inject == "hang":
        while True:
            time.sleep(60)
    if inject == "crash" or (inject == "crash-rank1" and rank() == 1):
        sys.stdout.flush()
        os._exit(1)


def local_rank():
    """This process's rank on its host (torchrun's LOCAL_RANK; else :func:`rank`)."""
    return int(os.environ.get("DLTOP_LOCAL_RANK", rank()))


def pin(spec, per_rank=True):
    """Pin to the CPUs the parent chose (physical cores first); a cpus:P rank gets one.

    ``per_rank=False`` pins to all of them (a program that starts its own
    workers, which inherit the affinity). Returns the CPUs pinned to, or None
    when the parent chose none.
    """
    cpus = spec.get("cpu_affinity")
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return None
    if per_rank and spec["device"]["kind"] == "cpus":
        cpus = [cpus[local_rank() % len(cpus)]]
    os.sched_setaffinity(0, cpus)
    return cpus


def load_spec(argv=None):
    """Read the job spec (protocol v1) from the JSON file named on the command line."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: <runner> SPEC.json\n")
        sys.exit(2)
    with open(argv[0]) as fh:
        spec = json.load(fh)
    if spec.get("v") != PROTOCOL_VERSION:
        sys.stderr.write("unsupported job spec version %r\n" % (spec.get("v"),))
        sys.exit(2)
    return spec


def classify(exc):
    """Map an exception to a protocol error kind."""
    if isinstance(exc, Unsupported):
        return "unsupported"
    if isinstance(exc, Diverged):
        return "diverged"
    if isinstance(exc, MemoryError):
        return "oom"
    text = str(exc).lower()
    name = type(exc).__name__.lower()
    if ("out of memory" in text or "outofmemory" in name or "resource exhausted" in text
            or "resourceexhausted" in name or "can't allocate memory" in text
            or "cannot allocate memory" in text):
        return "oom"
    return "crash"


def main(run, argv=None):
    """Standard runner entry point: load the spec, call ``run(spec, reporter)``, report.

    ``run`` returns the measured iteration count. Any exception is reported as
    an ``error`` event with its kind; the process then exits with status 3.
    """
    spec = load_spec(argv)
    reporter = Reporter()
    # A first log line, so even a silent crash leaves a log that says what ran.
    sys.stdout.write("[dltop] run %s: %s %s batch %s on %s:%s (pid %d, python %s)\n" % (
        spec.get("run_id"), spec.get("framework"), spec.get("model"), spec.get("batch_size"),
        spec["device"]["kind"], spec["device"]["count"], os.getpid(), sys.version.split()[0]))
    sys.stdout.flush()
    try:
        n = run(spec, reporter)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        reporter.error("crash", "interrupted")
        sys.exit(EXIT_ERROR)
    except BaseException as exc:  # noqa: B036 - every failure must reach the parent
        kind = classify(exc)
        if isinstance(exc, Failed):
            message = str(exc)
        elif kind == "crash":
            message = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        else:
            message = "%s: %s" % (type(exc).__name__, exc)
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
        reporter.error(kind, message)
        _exit(EXIT_ERROR)
    reporter.done(n)
    _exit(EXIT_OK)


def _exit(code):
    """Leave without the interpreter's teardown: everything the parent needs was sent.

    Tearing down a process that imported torch or TensorFlow takes 0.6-3 s (module
    destructors, thread pools), all of it after ``done`` and on the run's wall clock;
    events go out unbuffered through ``os.write``, runners finish their own collectives
    (process groups, MPI) before returning, and only the log streams need a flush.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
