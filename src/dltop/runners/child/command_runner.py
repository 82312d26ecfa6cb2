"""Bring-your-own command: time any program's iterations (protocol v1 wrapper).

Standard library only, Python 3.6. The engine resolves the program before the
run (``spec["command_launch"]``: the filled-in argv, the executable found, the
working directory, the environment to add; see ``dltop.runners.command``). The
program runs in its own process group in this runner's session, with
``dltop_report`` alone appended to its ``PYTHONPATH``, ``$DLTOP_EVENT_FD``
set to a pipe of its own and ``$DLTOP_REPORT_FIFO`` to a FIFO for the processes
that did not inherit the pipe (a launcher's workers). Iterations come from its output lines matching
``iteration_regex`` (``timing = "regex"`` or ``"line-gap"``) or from its
``dltop_report`` events (``timing = "helper"``), never both; see
``command_timing``. Once warm-up + iterations are in, the program's group is
stopped (TERM, then KILL) and the run ends well. A program that exits by itself
is read only briefly after its exit: a grandchild that keeps the output pipe
open cannot hold the run.
"""

import json
import os
import select
import signal
import subprocess
import sys
import time

import dltop_protocol as proto
from command_timing import LOG_HEAD_BYTES, CappedLog, Lines, Steps

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT_DIR = os.path.join(HERE, "report")
"""Holds dltop_report.py alone: the only directory of dltop's on the program's path."""
TERM_GRACE_S = 3.0
"""Shorter than the supervisor's grace, so a stopped runner still reports."""
DRAIN_S = 1.0
"""How long output is still read after the program exited."""


def _program_env(launch, event_fd, fifo):
    env = dict(os.environ)
    env.update(launch.get("env") or {})
    env["DLTOP_EVENT_FD"] = str(event_fd)
    # The pipe's identity: a process that did not inherit it (a launcher's worker) may
    # hold another file under that number, which dltop_report must not write into.
    st = os.fstat(event_fd)
    env["DLTOP_EVENT_FD_ID"] = "%d:%d" % (st.st_dev, st.st_ino)
    if fifo is not None:
        env["DLTOP_REPORT_FIFO"] = fifo
    # Appended: the user's own modules win over anything of the same name.
    env["PYTHONPATH"] = (env["PYTHONPATH"] + os.pathsep if env.get("PYTHONPATH")
                         else "") + REPORT_DIR
    return env


def _stop_group(proc):
    """TERM the program's group, KILL it after a grace period; True if it had to be."""
    for sig, wait_s in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass
        deadline = time.monotonic() + wait_s
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if proc.poll() is not None:
            break
    try:  # what the program left in its group
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


class _Events(object):
    """The reader of one event source (the pipe, or the FIFO): its own line buffer."""

    def __init__(self, run, fd):
        self.run, self.fd, self.lines = run, fd, Lines()

    def __call__(self, data):
        self.run.events(self.lines, data)


class _Run(object):
    """One program run: its pipes, the read loop, the ending."""

    def __init__(self, spec, reporter, launch):
        self.steps = Steps(spec, reporter)
        self.lines = Lines()
        self.log = CappedLog(sys.stdout.fileno())
        self.launch = launch
        self.terminated = False
        self.fifo = None
        self._fifo_hold = None

    def _make_fifo(self, run_dir):
        """A FIFO in the run's folder for the events of processes without the pipe:
        torchrun (and accelerate launch) start their workers with inherited descriptors
        closed. Its read end, or None where no FIFO can be made."""
        path = os.path.join(run_dir, "report.fifo")
        try:
            os.mkfifo(path, 0o600)
        except OSError:
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            os.unlink(path)
            return None
        # held open by this runner until the program exits: no EOF while no process
        # of the program has opened it yet
        self._fifo_hold = os.open(path, os.O_WRONLY)
        self.fifo = path
        return fd

    def release_fifo(self):
        """Lets the FIFO reach its end once the program's processes closed it."""
        if self._fifo_hold is not None:
            os.close(self._fifo_hold)
            self._fifo_hold = None

    def close(self):
        self.release_fifo()
        for fd in list(self.fds):
            if fd != self.proc.stdout.fileno():
                os.close(self.fds.pop(fd).fd)
        if self.fifo is not None:
            try:
                os.unlink(self.fifo)
            except OSError:
                pass

    def start(self, run_dir):
        r, w = os.pipe()
        fifo_r = self._make_fifo(run_dir)
        try:
            self.proc = subprocess.Popen(
                self.launch["argv"], executable=self.launch["executable"],
                cwd=self.launch["cwd"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, env=_program_env(self.launch, w, self.fifo),
                pass_fds=(w,), preexec_fn=os.setpgrp)
        except OSError as exc:
            os.close(r)
            if fifo_r is not None:
                os.close(fifo_r)
            raise proto.Failed("cannot start command %r: %s" % (self.launch["argv"][0], exc)
                               ) from None
        finally:
            os.close(w)
        self.t0 = time.monotonic()
        self.fds = {self.proc.stdout.fileno(): self._output, r: _Events(self, r)}
        if fifo_r is not None:
            self.fds[fifo_r] = _Events(self, fifo_r)

    def loop(self):
        """Read until enough iterations, or the program exited (and a short drain)."""
        exited_at = None
        while not self.steps.full and not self.terminated:
            if exited_at is None and self.proc.poll() is not None:
                exited_at = time.monotonic()
                self.release_fifo()
            if exited_at is not None and (not self.fds
                                          or time.monotonic() - exited_at > DRAIN_S):
                break
            ready = select.select(list(self.fds), [], [], 0.1)[0]
            for fd in ready:
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.fds.pop(fd)(None)
                    if fd != self.proc.stdout.fileno():
                        os.close(fd)
                    continue
                self.fds[fd](data)
                if self.steps.full:
                    break

    def _output(self, data):
        now = time.monotonic_ns() if hasattr(time, "monotonic_ns") else int(
            time.monotonic() * 1e9)
        if data is None:
            texts = self.lines.end()
        else:
            self.log.write(data)
            texts = self.lines.feed(data)
        for text in texts:
            self.steps.line(text, now)
        self.steps.read_done()

    def events(self, lines, data):
        for text in (lines.end() if data is None else lines.feed(data)):
            if proto.too_deep(text):
                self._refuse("nested deeper than %d levels" % proto.MAX_EVENT_DEPTH)
                continue
            try:
                event = json.loads(text)
            except ValueError:
                self._refuse("not JSON: %r" % text[:60])
                continue
            if isinstance(event, dict):
                self.steps.event(event)

    def _refuse(self, why):
        # The parent counts it as a protocol error and names the first in the run's note.
        self.steps.reporter.emit("refused", why="the program's event line is " + why)

    def note(self, spec_path):
        """The program's last lines and where its whole output is, for a crash message."""
        tail = "\n".join("  " + line[:160] for line in self.lines.last_lines())
        log = os.path.join(os.path.dirname(os.path.abspath(spec_path)), "runner.log")
        if tail:
            text = "; last output lines:\n%s\nlog: %s" % (tail, log)
        elif self.log.head_left == LOG_HEAD_BYTES:  # not one byte came
            text = ("; the program printed nothing (a program that is not Python may "
                    "buffer its output into the pipe: flush each line, or stdbuf -oL); "
                    "log: %s" % log)
        else:
            text = "; log: %s" % log
        if self.log.failed is not None:
            text += " (incomplete: %s)" % self.log.failed
        return text


def run(spec, reporter):
    launch = spec.get("command_launch")
    if not launch:
        raise proto.Unsupported("no resolved command in the job spec (an engine older than "
                                "this runner?)")
    opts = spec.get("options") or {}
    pinned = proto.pin(spec, per_rank=False)  # the program starts its own workers
    reporter.hello("command", os.path.basename(launch["executable"]), "%s:%s" % (
        spec["device"]["kind"], spec["device"]["count"]), spec["device"]["count"],
        command=launch["argv"], program=launch["executable"], cwd=launch["cwd"],
        timing=opts.get("timing"), iteration_regex=opts.get("iteration_regex"),
        notes=launch.get("notes") or [], cpu_affinity=pinned)
    job = _Run(spec, reporter, launch)

    def on_term(signum, frame):
        job.terminated = True  # the loop ends; the group is stopped below

    signal.signal(signal.SIGTERM, on_term)
    job.start(os.path.dirname(os.path.abspath(sys.argv[-1])))
    stopped = None
    try:
        job.loop()
    except (proto.Diverged, proto.Failed) as exc:
        stopped = exc
    running = job.proc.poll() is None
    _stop_group(job.proc)
    job.close()
    wall_s = time.monotonic() - job.t0
    code = job.proc.returncode
    steps = job.steps
    where = job.note(sys.argv[-1])
    if steps.repeats:
        sys.stdout.write("\n[dltop] %d matched lines repeated the previous match's step number "
                         "and were not counted (does every rank print?)\n" % steps.repeats)
    sys.stdout.flush()
    if isinstance(stopped, proto.Failed):
        raise proto.Failed(str(stopped) + where)
    if stopped is not None:
        raise stopped
    if job.terminated:
        raise proto.Failed("stopped by dltop (timeout or cancel) after %d iterations%s"
                           % (steps.n, where))
    problem = steps.unit_error(wall_s)
    if problem is not None:
        raise proto.Failed(problem)
    if running:
        sys.stdout.write("\n[dltop] stopped the program after %d iterations (warm-up %d)\n"
                         % (steps.n, steps.warmup))
    elif code != 0 and not steps.full:
        if code < 0:
            try:
                how = "was killed by signal %s" % signal.Signals(-code).name
            except ValueError:
                how = "was killed by signal %d" % -code
        else:
            how = "exited with status %d" % code
        raise proto.Failed("command %r %s after %d iterations%s" % (
            launch["argv"][0], how, steps.n, where))
    if steps.n == 0:
        # a wrapper that starts the training in the background and returns ends here too
        where = "; it exited with status 0 after %.1f s%s" % (wall_s, where)
        if steps.untimed:
            raise proto.Failed(
                'timing = "line-gap" saw %d matching lines, but all came at once: the '
                "program's output is buffered (flush each line: print(..., flush=True), "
                "python -u, stdbuf -oL) or printed at the end; use a printed time or "
                "dltop_report instead%s" % (steps.untimed + 1, where))
        if steps.timing != "helper":
            hint = ""
            if steps.ignored_events:
                hint = ("; the program sent %d dltop_report events, which count only "
                        'with timing = "helper"' % steps.ignored_events)
            raise proto.Failed("iteration_regex %r never matched any output line of the "
                               "command%s%s" % (steps.regex.pattern, hint, where))
        raise proto.Failed("the command reported no iteration (use dltop_report.step, or "
                           "set iteration_regex)%s" % where)
    return max(0, steps.n - steps.warmup)


if __name__ == "__main__":
    proto.main(run)
