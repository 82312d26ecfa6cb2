"""The command runner's reading of a program's output: lines, matches, step times.

Standard library only, Python 3.6. :class:`Lines` splits output on ``\\n``
and ``\\r`` (progress bars redraw with ``\\r``) and keeps the last lines as a
terminal would show them; :class:`Steps` turns regex matches, line gaps or
``dltop_report`` events into per-step iterations (docs/profiles.md, "Your own
program"); :class:`CappedLog` relays the output to runner.log with a size cap.
"""

import collections
import math
import os
import re

import dltop_protocol as proto

TIMING_GROUPS = {"seconds": 1.0, "ms": 1e-3, "us": 1e-6, "samples_per_s": None,
                 "it_per_s": None, "total_seconds": 1.0}
"""Named groups that carry a step's time: a duration (its scale to seconds) or a rate,
per step; ``total_seconds`` is the time of all the steps its line covers."""
MAX_LINE_CHARS = 1 << 16
"""A longer run of output without a line break is matched in pieces of this size."""
TAIL_LINES = 20
LOG_HEAD_BYTES = 1 << 20
LOG_TAIL_BYTES = 1 << 20
_ANSI = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|.)")
_BREAKS = re.compile(b"([\r\n])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text):
    """``text`` without terminal escape sequences and control characters."""
    return _CONTROL.sub("?", _ANSI.sub("", text.replace("\t", " ")))


class Lines(object):
    """Splits a byte stream into lines on ``\\n`` and ``\\r``."""

    def __init__(self):
        self._buf = b""
        self._redrawn = ""  # the latest \r-ended piece: what a terminal shows on that line
        self.tail = collections.deque(maxlen=TAIL_LINES)

    def feed(self, data):
        """The complete pieces (lines or redraws) in ``data``, decoded."""
        self._buf += data
        out = []
        for piece, sep in self._split():
            text = piece.decode("utf-8", "replace")
            if sep == b"\r":
                if text:
                    self._redrawn = text
            else:
                shown = text or self._redrawn
                if shown:
                    self.tail.append(shown)
                self._redrawn = ""
            if text:
                out.append(text)
        return out

    def end(self):
        """What is left after the stream ended (a last line without a break)."""
        rest, self._buf = self._buf.decode("utf-8", "replace"), b""
        shown, self._redrawn = rest or self._redrawn, ""
        if shown:
            self.tail.append(shown)
        return [rest] if rest else []

    def last_lines(self):
        """The last lines as a terminal shows them, escapes and control characters removed
        (a progress bar still being redrawn included)."""
        lines = list(self.tail) + ([self._redrawn] if self._redrawn else [])
        return [printable(line) for line in lines[-TAIL_LINES:]]

    def _split(self):
        parts = _BREAKS.split(self._buf)  # one pass: a flood of short lines stays linear
        self._buf = parts.pop()
        for i in range(0, len(parts), 2):
            yield parts[i], parts[i + 1]
        while len(self._buf) > MAX_LINE_CHARS:
            piece, self._buf = self._buf[:MAX_LINE_CHARS], self._buf[MAX_LINE_CHARS:]
            yield piece, b"\r"


def _number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value


class Steps(object):
    """Per-step iterations from matches or helper events, reported as they come.

    Args:
        spec: the job spec (warm-up, iterations, samples per iteration, options).
        reporter: the protocol reporter iterations go to.
    """

    def __init__(self, spec, reporter):
        opts = spec.get("options") or {}
        self.reporter = reporter
        self.warmup = int(spec["warmup"])
        self.total = self.warmup + int(spec["iterations"])
        self.default_samples = int(spec["samples_per_iter"])
        self.timing = opts.get("timing") or ("regex" if opts.get("iteration_regex")
                                             else "helper")
        regex = opts.get("iteration_regex")
        self.regex = re.compile(regex) if regex and self.timing != "helper" else None
        self.unit = None
        if self.regex is not None:
            units = [g for g in TIMING_GROUPS if g in self.regex.groupindex]
            self.unit = units[0] if units else None
        self.cumulative = bool(opts.get("cumulative"))
        self.steps_per_match = int(opts.get("steps_per_match") or 1)
        self.n = 0
        self.sum_s = 0.0
        self.matches = 0
        self.ignored_events = 0
        self.repeats = 0  # matches that repeated the previous match's step number
        self._covered = 0  # cumulative: the steps the last value covered
        self._so_far_s = 0.0  # ... and their total time
        self._last_step = None  # the program's own step counter at the last match
        self._last_line_ns = None  # line-gap: when the last matching line was read
        self._read = []  # line-gap: the matches of the read in progress, timed together
        self._read_ns = None  # ... and when that read came
        self.untimed = 0  # line-gap: lines read together with the one that started the clock

    @property
    def full(self):
        """Warm-up and measured iterations are all in: the program may be stopped."""
        return self.n >= self.total

    def line(self, text, t_ns):
        """Match one output line (several matches per line count in order).

        Raises:
            proto.Diverged: a matched loss is NaN or infinite.
            proto.Failed: a cumulative value that gives a block no time.
        """
        if self.regex is None:
            return
        if "\x1b" in text or "\b" in text:
            # colours (Keras, rich, loguru) and the backspaces a bar redraws with (Keras):
            # a terminal never shows them, and a loss read as \S+ would keep them
            text = _ANSI.sub("", text).replace("\b", "")
        for m in self.regex.finditer(text):
            if self.full:
                return
            self.matches += 1
            self._match(m.groupdict(), t_ns)

    def event(self, event):
        """One ``dltop_report`` event (counted only when ``timing = "helper"``)."""
        if event.get("event") != "iter":
            return
        if self.timing != "helper":
            self.ignored_events += 1
            return
        seconds = _number(event.get("seconds"))
        if self.full:
            return
        if seconds is None or not math.isfinite(seconds) or seconds <= 0:
            # Not counted, never silent: passed on as it came (a string, as JSON has no
            # NaN), dltop refuses it as a protocol error and names it in the run's note.
            self.reporter.emit("iter", index=self.n, seconds=str(event.get("seconds")),
                               samples=None, warmup=self.n < self.warmup, loss=None)
            return
        t_ns = event.get("t_mono_ns")
        self._add(1, seconds, self._samples(event.get("samples")), event.get("loss"),
                  t_ns if isinstance(t_ns, int) else None)

    def _samples(self, value):
        n = _number(value)
        if n is None or not math.isfinite(n) or n < 1 or n != int(n) or n > 1e15:
            return self.default_samples
        return int(n)

    def _steps(self, groups):
        if groups.get("count") is not None:
            n = _number(groups["count"])
            return int(n) if n is not None and math.isfinite(n) and n >= 0 else 0
        if groups.get("step") is not None:
            n = _number(groups["step"])
            if n is None or not math.isfinite(n):
                return 0
            step, last = int(n), self._last_step
            self._last_step = step
            if step == last:  # the same step again: another rank's line, or a second line
                self.repeats += 1  # about it; taken for a restart it stood for `step` steps
                return 0
            if last is None or step < last:  # the first line, or the counter restarted
                self._covered, self._so_far_s = 0, 0.0
                return max(step, 1)
            return step - last
        return self.steps_per_match

    def _match(self, groups, t_ns):
        steps = self._steps(groups)
        samples = self._samples(groups.get("samples"))
        loss = groups.get("loss")
        if steps <= 0:
            return
        if self.timing == "line-gap":
            if self._read and t_ns != self._read_ns:
                self.read_done()
            self._read_ns = t_ns
            self._read.append((steps, samples, loss))
            return
        value = _number(groups.get(self.unit))
        if value is None or not math.isfinite(value) or value < 0:
            return
        scale = TIMING_GROUPS[self.unit]
        total = self.unit == "total_seconds"
        if scale is not None:
            per_step = value * scale
        elif value == 0:
            return
        else:  # a rate: samples per second, or iterations per second
            per_step = samples / value if self.unit == "samples_per_s" else 1.0 / value
        if self.cumulative:  # the value covers every step so far: a running mean or total
            covered = self._covered + steps
            so_far = per_step if total else per_step * covered
            block, self._covered, self._so_far_s = so_far - self._so_far_s, covered, so_far
            if block <= 0:  # a zero step would be refused and lost, silently
                raise proto.Failed(
                    "cumulative = true, but the value matched at step %d leaves %.4g s for "
                    "the %d steps since the previous match: it is no running mean (or "
                    "elapsed time) over every step so far, or too rounded (Keras's "
                    "ms/step leaves step 1 out and is whole ms: time a Keras fit with "
                    "dltop_report, docs/own-programs.md)" % (covered, block, steps))
            per_step = block / steps
        elif total:
            per_step = per_step / steps
        self._add(steps, per_step, samples, loss, t_ns)

    def read_done(self):
        """line-gap: time the matches of the read just matched (call after each read).

        Lines that came in one read showed dltop no gap between them (a program that
        buffers its output, or prints its log at the end): the gap since the previous
        read is shared out among all their steps, so the sum stays right, and those
        that came with the line that started the clock get no time (:attr:`untimed`).
        """
        read, t_ns, self._read = self._read, self._read_ns, []
        if not read:
            return
        last, self._last_line_ns = self._last_line_ns, t_ns
        if last is None:  # the first matching line only starts the clock
            self.untimed += len(read) - 1
            for _, _, loss in read:
                self._check_loss(loss)
            return
        left = sum(steps for steps, _, _ in read)
        per_step = (t_ns - last) / 1e9 / left
        for steps, samples, loss in read:
            left -= steps
            self._add(steps, per_step, samples, loss, int(t_ns - left * per_step * 1e9))

    def _check_loss(self, loss):
        value = None if loss is None else _number(loss)
        if value is not None and not math.isfinite(value):
            raise proto.Diverged("non-finite loss %r at iteration %d" % (loss, max(self.n - 1, 0)))

    def _add(self, steps, per_step_s, samples, loss, t_ns):
        """``steps`` iterations of ``per_step_s`` each, ending at ``t_ns`` (spaced back);
        the step with a non-finite loss is stored, then the run ends ``diverged``."""
        value = None if loss is None else _number(loss)
        for k in range(steps):
            if self.full:
                break
            end = None if t_ns is None else int(t_ns - (steps - 1 - k) * per_step_s * 1e9)
            last = k == steps - 1
            self.reporter.iteration(self.n, per_step_s, samples, self.n < self.warmup,
                                    value if last else None, end)
            self.sum_s += per_step_s
            self.n += 1
        self._check_loss(loss)

    def unit_error(self, wall_s):
        """A message when the step times add up to more than the program ran, else None."""
        if self.sum_s <= 1.5 * wall_s + 1.0:
            return None
        head = ("the reported step times add up to %.4g s, but the program ran %.4g s: "
                % (self.sum_s, wall_s))
        if self.timing == "helper":
            return head + "dltop_report.report() takes seconds (not ms, not a rate)"
        return head + ("the matched (?P<%s>...) values are probably not in that unit; "
                       "use (?P<ms>...) for milliseconds, (?P<us>...) for microseconds, "
                       "(?P<samples_per_s>...) for a rate such as images/sec, "
                       "(?P<it_per_s>...) for it/s, or cumulative = true for a running "
                       "mean" % self.unit)


class CappedLog(object):
    """Relays program output to runner.log (this process's stdout), head and tail kept.

    The first :data:`LOG_HEAD_BYTES` go through as they come; after a marker line
    the file holds at most the last 2 × :data:`LOG_TAIL_BYTES` (rewritten down to
    the last :data:`LOG_TAIL_BYTES` when it grows past that), so a flood cannot
    fill the disk. A failed write (disk full) stops the relay, never the run.
    """

    def __init__(self, fd=1):
        self.fd = fd
        self.head_left = LOG_HEAD_BYTES
        self.tail = bytearray()
        self.tail_start = None
        self.failed = None

    def write(self, data):
        if self.failed is not None:
            return
        try:
            if self.head_left > 0:
                part = data[:self.head_left]
                self._write(part)
                self.head_left -= len(part)
                data = data[len(part):]
                if not data:
                    return
            if self.tail_start is None:
                self._write(b"\n[dltop] runner.log capped: after its first %d bytes only the "
                            b"program's last output is kept\n" % LOG_HEAD_BYTES)
                try:
                    self.tail_start = os.lseek(self.fd, 0, os.SEEK_END)
                except OSError:  # not a file (a run by hand): nothing to rewrite
                    self.tail_start = -1
            self.tail += data
            self._write(data)
            if len(self.tail) > 2 * LOG_TAIL_BYTES:
                del self.tail[:-LOG_TAIL_BYTES]
                if self.tail_start >= 0:
                    os.ftruncate(self.fd, self.tail_start)
                    self._write(bytes(self.tail))
        except OSError as exc:
            self.failed = exc

    def _write(self, data):
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
