"""Headless progress for ``dltop run``: Rich progress bars on a terminal, lines otherwise.

Lives beside the TUI because it is presentation (Rich); the engine only emits
:mod:`dltop.jobs.events`.
"""

from __future__ import annotations

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

from dltop.jobs.events import (
    CampaignFinished,
    CampaignStarted,
    EngineEvent,
    RunFinished,
    RunProgress,
    RunStarted,
)

_STYLE = {"ok": "green", "oom": "yellow", "unsupported": "yellow", "unsatisfiable": "yellow",
          "timeout": "red", "crashed": "red", "diverged": "red", "cancelled": "magenta"}


class HeadlessProgress:
    """Callable event sink; use as a context manager around the engine run."""

    def __init__(self, interactive: bool, console: Console | None = None) -> None:
        self.console = console or Console(stderr=False, highlight=False)
        self.interactive = interactive
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._recent: deque[float] = deque(maxlen=10)
        self._label = ""

    def __enter__(self) -> HeadlessProgress:
        if self.interactive:
            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[s_iter]}"), TimeRemainingColumn(),
                console=self.console, transient=True,
            )
            self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __call__(self, event: EngineEvent) -> None:
        if isinstance(event, CampaignStarted):
            self.console.print(f"campaign {event.campaign_id} [bold]{event.name}[/]: "
                               f"{event.n_jobs} runs → {event.db_path}")
        elif isinstance(event, RunStarted):
            self._recent.clear()
            self._label = (f"[{event.position + 1}/{event.n_jobs}] "
                           f"{event.job.describe()}")
            if self._progress is not None:
                self._task = self._progress.add_task(
                    self._label + " (warm-up)",
                    total=event.job.warmup + event.job.iterations, s_iter="")
            else:
                self.console.print(f"{self._label} …")
        elif isinstance(event, RunProgress):
            self._recent.append(event.seconds)
            if self._progress is not None and self._task is not None:
                phase = " (warm-up)" if event.warmup else ""
                self._progress.update(
                    self._task, completed=event.index + 1,
                    description=self._label + phase,
                    s_iter=f"{statistics.median(self._recent):.4f} s/iter")
        elif isinstance(event, RunFinished):
            if self._progress is not None and self._task is not None:
                self._progress.remove_task(self._task)
                self._task = None
            self.console.print(self._finished_line(event), soft_wrap=True)
        elif isinstance(event, CampaignFinished):
            counts = ", ".join(f"{v} {k}" for k, v in sorted(event.counts.items()))
            self.console.print(f"campaign {event.campaign_id} {event.status}: {counts}")

    def _finished_line(self, e: RunFinished) -> str:
        style = _STYLE.get(e.status, "white")
        parts = [f"{self._label}", f"[{style}]{e.status}[/]"]
        if e.median_s is not None:
            parts.append(f"{e.median_s:.4f} s/iter")
        if e.samples_per_s is not None:
            parts.append(f"{e.samples_per_s:.1f} samples/s")
        if e.cv is not None:
            parts.append(f"cv {e.cv:.3f}" + (" [yellow]noisy[/]" if e.noisy else ""))
        if e.message and e.status != "ok":
            parts.append(f"— {e.message.strip().splitlines()[-1][:160]}")
        return "  ".join(parts)


def stdout_is_terminal() -> bool:
    """Whether progress bars make sense."""
    return sys.stdout.isatty()
