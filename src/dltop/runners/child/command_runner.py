"""Bring-your-own command: time any program's iterations (protocol v1 wrapper).

Standard library only, Python 3.6. The job spec's ``options`` carry
``command`` (an argv list; ``{batch}``, ``{threads}``, ``{device}``,
``{iterations}``, ``{warmup}`` are substituted) and optionally
``iteration_regex`` (a regular expression with a named group ``seconds`` and
optional ``loss`` and ``samples``). Iterations come from the command's output
lines matching the regex, or from ``dltop_report`` calls in the program (put
on its ``PYTHONPATH``). Each iteration's end (``t_mono_ns``) is the one
``dltop_report`` took at the end of the step, or, for a regex match, the time the
line was read. The first ``warmup`` iterations are marked warm-up. A
command that exits non-zero, or reports no iteration (a regex that never
matched), ends the run with an error that says so.
"""

import json
import os
import re
import subprocess
import sys
import threading

import dltop_protocol as proto

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT_DIR = os.path.join(HERE, "report")
"""Holds dltop_report.py alone: the only directory of dltop's on the program's path."""


def _argv(spec):
    opts = spec.get("options") or {}
    command = opts.get("command")
    if not command:
        raise proto.Unsupported("framework 'command' needs a 'command' (argv list)")
    dev = spec["device"]
    values = {"batch": spec["batch_size"], "threads": dev["count"],
              "device": "%s:%s" % (dev["kind"], dev["count"]),
              "iterations": spec["iterations"], "warmup": spec["warmup"]}
    return [str(a).format(**values) for a in command]


class _Counter(object):
    def __init__(self, spec, reporter):
        self.n = 0
        self.warmup = int(spec["warmup"])
        self.default_samples = int(spec["samples_per_iter"])
        self.reporter = reporter
        self.lock = threading.Lock()

    def add(self, seconds, samples=None, loss=None, t_mono_ns=None):
        with self.lock:
            self.reporter.iteration(self.n, float(seconds),
                                    int(samples) if samples else self.default_samples,
                                    self.n < self.warmup,
                                    None if loss is None else float(loss), t_mono_ns)
            self.n += 1


def _read_reports(fd, counter):
    with os.fdopen(fd, "rb") as fh:
        for line in fh:
            try:
                e = json.loads(line.decode("utf-8"))
                if e.get("event") == "iter":
                    counter.add(e["seconds"], e.get("samples"), e.get("loss"),
                                e.get("t_mono_ns"))
            except (ValueError, KeyError, TypeError):
                continue


def run(spec, reporter):
    argv = _argv(spec)
    opts = spec.get("options") or {}
    regex = re.compile(opts["iteration_regex"]) if opts.get("iteration_regex") else None
    pinned = proto.pin(spec, per_rank=False)  # the program starts its own workers
    reporter.hello("command", os.path.basename(argv[0]), "%s:%s" % (
        spec["device"]["kind"], spec["device"]["count"]), spec["device"]["count"],
        command=argv, iteration_regex=opts.get("iteration_regex"), cpu_affinity=pinned)
    counter = _Counter(spec, reporter)
    r, w = os.pipe()
    env = dict(os.environ, DLTOP_EVENT_FD=str(w))
    env["PYTHONPATH"] = (env["PYTHONPATH"] + os.pathsep if env.get("PYTHONPATH")
                         else "") + REPORT_DIR
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env, pass_fds=(w,))
    except OSError as exc:
        raise RuntimeError("cannot start command %r: %s" % (argv[0], exc)) from None
    finally:
        os.close(w)
    reader = threading.Thread(target=_read_reports, args=(r, counter))
    reader.start()
    for raw in proc.stdout:
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()
        if regex is None:
            continue
        m = regex.search(raw.decode("utf-8", "replace"))
        if m:
            groups = m.groupdict()
            counter.add(groups["seconds"], groups.get("samples"), groups.get("loss"))
    code = proc.wait()
    reader.join(timeout=10)
    if code != 0:
        raise RuntimeError("command %r exited with status %d" % (argv[0], code))
    if counter.n == 0:
        if regex is not None:
            raise RuntimeError("iteration_regex %r never matched any output line of the "
                               "command" % regex.pattern)
        raise RuntimeError("the command reported no iteration (use dltop_report.step "
                           "or set iteration_regex)")
    return max(0, counter.n - counter.warmup)


if __name__ == "__main__":
    proto.main(run)
