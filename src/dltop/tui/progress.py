"""Headless progress for ``dltop run``: Rich progress bars on a terminal, lines otherwise.

Lives beside the TUI because it is presentation (Rich); the engine only emits
:mod:`dltop.jobs.events`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import statistics
import sys
from collections import deque
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from dltop.catalog import RESULT_STATUSES, RunStatus
from dltop.jobs.events import (
    CampaignFinished,
    CampaignStarted,
    DevicesBusy,
    EngineEvent,
    NoDeviceLease,
    RunFinished,
    RunProgress,
    RunStarted,
)
from dltop.results.queries import message_cause
from dltop.results.tokens import is_lm
from dltop.textsafe import counted, one_line
from dltop.tui.format import STATUS_STYLE


class _Console(Console):
    """A console whose reader leaving (``dltop run | head``) ends only the output.

    Rich's default raises ``SystemExit(1)``, which ended the engine mid-campaign and
    left the campaign ``running``; here it goes quiet and raises BrokenPipeError,
    which :class:`HeadlessProgress` reports once.
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        stdout_gone()
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


class HeadlessProgress:
    """Callable event sink; use as a context manager around the engine run.

    Names, labels and messages come from profiles and programs: they are printed as
    :class:`~rich.text.Text` after :func:`~dltop.textsafe.one_line`, never as markup
    (a gloo error holds ``[/__w/...]``) and never with their control characters.
    """

    def __init__(self, interactive: bool, console: Console | None = None) -> None:
        self.console = console or _Console(stderr=False, highlight=False)
        self.interactive = interactive
        self._progress: Progress | None = None
        # Keyed by run id: a packed campaign has several runs going at once.
        self._tasks: dict[int, TaskID] = {}
        self._recent: dict[int, deque[float]] = {}
        self._labels: dict[int, str] = {}
        # job id -> (its "[k/n]", runs started): a retry keeps its job's place
        self._places: dict[int, tuple[str, int]] = {}
        self._closed = False  # stdout's reader left: nothing more is printed
        self._failed = False  # a display error was reported (once)

    def __enter__(self) -> HeadlessProgress:
        if self.interactive:
            self._progress = Progress(
                TextColumn("{task.description}", markup=False), BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[s_iter]}"), TimeRemainingColumn(),
                console=self.console, transient=True,
            )
            self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None and not self._closed:
            self._progress.stop()

    def __call__(self, event: EngineEvent) -> None:
        """Show one engine event. Never raises: the display must not end a campaign."""
        if self._closed:
            return
        try:
            self._show(event)
        except OSError as exc:  # `dltop run | head`: the reader left; the runs go on
            self._closed = True
            stdout_gone()
            warn(f"the progress output failed ({exc.strerror or exc}); the campaign goes "
                 "on: 'dltop status' and 'dltop runs' follow it")
        except Exception as exc:  # a display bug: say so once, keep the engine going
            if not self._failed:
                self._failed = True
                warn(f"the progress display failed ({type(exc).__name__}: {exc}); the "
                     "campaign goes on")

    def _show(self, event: EngineEvent) -> None:
        if isinstance(event, CampaignStarted):
            self.console.print(Text.assemble(
                f"campaign {event.campaign_id} ", (one_line(event.name), "bold"),
                f": {counted(event.n_jobs, 'run')} → {one_line(event.db_path)}"))
        elif isinstance(event, RunStarted):
            rid = event.run_id
            self._recent[rid] = deque(maxlen=10)
            label = self._labels[rid] = self._label(event)
            if self._progress is not None:
                self._tasks[rid] = self._progress.add_task(
                    label + " (warm-up)",
                    total=event.job.warmup + event.job.iterations, s_iter="")
            else:
                self.console.print(Text(f"{label} …"))
        elif isinstance(event, RunProgress):
            recent = self._recent.setdefault(event.run_id, deque(maxlen=10))
            recent.append(event.seconds)
            task = self._tasks.get(event.run_id)
            if self._progress is not None and task is not None:
                phase = " (warm-up)" if event.warmup else ""
                self._progress.update(
                    task, completed=event.index + 1, total=event.total,
                    description=self._labels.get(event.run_id, "") + phase,
                    s_iter=f"{statistics.median(recent):.4f} s/iter")
        elif isinstance(event, RunFinished):
            task = self._tasks.pop(event.run_id, None)
            if self._progress is not None and task is not None:
                self._progress.remove_task(task)
            self._recent.pop(event.run_id, None)
            self.console.print(self._finished_line(event), soft_wrap=True)
            self._labels.pop(event.run_id, None)
        elif isinstance(event, DevicesBusy):
            self.console.print(Text(f"campaign {event.campaign_id} waiting for devices: "
                                    f"{one_line(event.waiting_for)}"))
        elif isinstance(event, NoDeviceLease):
            self.console.print(Text(f"warning: no device lease ({one_line(event.reason)}): "
                                    "another engine may run on the same devices"))
        elif isinstance(event, CampaignFinished):
            counts = ", ".join(f"{v} {k}" for k, v in sorted(event.counts.items()))
            ran = ", ".join(f"{v} {k}" for k, v in sorted(event.ran.items()))
            here = "" if ran == counts else f" (this engine: {ran or 'nothing'})"
            self.console.print(Text(f"campaign {event.campaign_id} {event.status}: "
                                    f"{counts or 'no jobs'}{here}"))

    def _label(self, event: RunStarted) -> str:
        """``[k/n] job``: k counts jobs, so a retry shows its job's k and its attempt."""
        describe = one_line(event.job.describe())
        place, started = self._places.get(event.job_id, ("", 0))
        if not place:
            place = f"[{min(event.position + 1, event.n_jobs)}/{event.n_jobs}]"
        self._places[event.job_id] = (place, started + 1)
        return f"{place} {describe}" + (f" (attempt {started + 1})" if started else "")

    def _finished_line(self, e: RunFinished) -> Text:
        line = Text(self._labels.get(e.run_id) or one_line(e.job.describe()))
        line.append("  ")
        line.append(e.status, STATUS_STYLE.get(e.status, "white"))
        serve = e.job.mode == "serve"  # a request's e2e seconds, its output tokens
        if e.median_s is not None and e.status not in RESULT_STATUSES:
            # a stopped run's median covers only what it measured before: no result
            line.append(f"  partial median {e.median_s:.4f} s/{'request' if serve else 'iter'}")
            return self._cause(line, e)
        if e.median_s is not None:
            line.append(f"  {e.median_s:.4f} s/{'request' if serve else 'iter'}")
        if e.samples_per_s is not None:
            unit = ("tokens/s per request" if serve else
                    "tokens/s" if is_lm(e.job.model) else "samples/s")
            line.append(f"  {e.samples_per_s:.1f} {unit}")
        if e.cv is not None:
            line.append(f"  cv {e.cv:.3f}")
            if e.noisy:
                line.append(" noisy", "yellow")
        return self._cause(line, e)

    @staticmethod
    def _cause(line: Text, e: RunFinished) -> Text:
        cause = message_cause(e.message)
        if cause and e.status != RunStatus.OK:
            line.append(f"  — {one_line(cause)[:160]}")
        return line


def warn(text: str) -> None:
    """One line on stderr (it may be gone too: then nothing)."""
    with contextlib.suppress(OSError):
        print(f"dltop: warning: {one_line(text)}", file=sys.stderr, flush=True)


def stdout_gone() -> None:
    """Point stdout at /dev/null: later prints and the interpreter's last flush succeed."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
