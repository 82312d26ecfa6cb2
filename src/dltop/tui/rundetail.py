"""The run detail screen: one job's run over time, its figures, environment and log.

Enter on a job of the main screen's queue opens it on the job's latest run; ``[``
and ``]`` step through the job's other attempts, ``l`` pages the whole runner.log
(:mod:`dltop.tui.logview`), escape returns. Everything is read in a worker thread on
the screen's own read-only connection (:mod:`dltop.live.rundetail`,
:mod:`dltop.results.runtrace`); a running run (or a job that has not started yet)
is read again at the viewer's database rate, its trace extended by the rows stored
since rather than read again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.events import Resize
from textual.screen import Screen
from textual.widgets import Static

from dltop.live.rundetail import (
    RunDetail,
    extend_trace,
    log_tail,
    read_run_detail,
    stats_so_far,
)
from dltop.results.labels import run_settings
from dltop.results.runtrace import RunTrace
from dltop.store.read.rundetail import job_attempts, job_status
from dltop.textsafe import multiline, one_line
from dltop.tui.charts import ChartsScroll, RunCharts
from dltop.tui.format import NA, STATUS_STYLE, duration, serves
from dltop.tui.keybar import KeyBar
from dltop.tui.logview import LogViewer
from dltop.tui.rundetail_rows import Row, stats_rows, telemetry_rows
from dltop.tui.rundetail_sections import convergence_text, generation_text, profile_text
from dltop.tui.servecharts import serve_charts

if TYPE_CHECKING:
    from dltop.store.reader import ReadDb

TOO_SMALL = "Terminal too small: dltop needs at least 80x24 (now {w}x{h})."
KEY_W = 13
REASON_LINES = 6
CHART_S = 2.0
"""Shortest time between two chart redraws of a running run."""
ENV_LABELS = {"cpu_model": "cpu", "physical_cores": "cores", "logical_cores": "logical cpus",
              "python_version": "python", "python_executable": "interpreter",
              "framework_version": "version", "threads": "threads", "thread_env": "thread env",
              "cuda_version": "cuda", "cudnn_version": "cudnn", "device_name": "device",
              "driver_version": "driver"}


def section(title: str, rows: Iterable[Row], detail: RunDetail) -> Text:
    """A titled block of ``key value`` lines; missing values show N/A, and why, each
    reason once, comes right under the title (``Telemetry`` then ``N/A: window 0.031 s,
    ...``), where it is seen before the rows that show N/A."""
    rows = list(rows)
    t = Text(no_wrap=False, overflow="fold")
    t.append(title + "\n", "bold underline")
    # each reason once: the GPU and host figures of a short window share theirs
    missing = dict.fromkeys(group for _, value, group in rows if value is None)
    for why in dict.fromkeys(detail.why_missing(group) for group in missing):
        t.append(f"N/A: {why}\n", "dim yellow")
    for key, value, _ in rows:
        t.append(f"{key:<{KEY_W - 1}} ", "dim")  # a longer key still has its space
        if value is None:
            t.append(NA, "yellow")
        else:
            t.append(one_line(value))
        t.append("\n")
    return t


def _shown_path(path: str) -> str:
    """A stored (absolute) path as the user would type it here: relative to the
    working directory when below it, else whole."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def status_text(d: RunDetail, from_file: bool) -> Text:
    """Status, reason and where the log is."""
    t = Text(no_wrap=False, overflow="fold")
    t.append("Status\n", "bold underline")
    t.append(f"{'status':<{KEY_W}}", "dim")
    t.append(d.status, STATUS_STYLE.get(d.status, "bold"))
    if d.error_kind:
        t.append(f" ({one_line(d.error_kind)})")
    t.append("\n")
    if d.error_message:
        t.append(f"{'reason':<{KEY_W}}", "dim")
        lines = multiline(d.error_message).split("\n")
        if len(lines) > REASON_LINES:  # a crash quotes the log's end: the tail shows it
            lines = [*lines[:REASON_LINES], f"… ({len(lines) - REASON_LINES} more lines)"]
        t.append("\n".join(lines) + "\n", "red" if d.status != "ok" else "")
    if d.note:
        t.append(f"{'note':<{KEY_W}}", "dim")
        t.append(multiline(d.note) + "\n")
    if d.protocol_errors:
        t.append(f"{'protocol err':<{KEY_W}}", "dim")
        t.append(f"{d.protocol_errors}\n")
    for key, value in (("started", d.started_at), ("finished", d.finished_at)):
        t.append(f"{key:<{KEY_W}}", "dim")
        t.append(one_line(value or "-") + "\n")
    t.append(f"{'wall':<{KEY_W}}", "dim")
    t.append(f"{duration(d.wall_s) if d.wall_s is not None else '-'}\n")
    if d.queue_s is not None:  # a Slurm job's wait, apart from its run time
        t.append(f"{'queued':<{KEY_W}}", "dim")
        t.append(f"{duration(d.queue_s)} in Slurm's queue\n")
    if d.slurm_acct:
        t.append(f"{'accounting':<{KEY_W}}", "dim")
        t.append(one_line(d.slurm_acct) + "\n")
    t.append(f"{'log':<{KEY_W}}", "dim")
    t.append(one_line(_shown_path(d.log_path) if d.log_path else "-"))
    if not from_file:
        t.append(f"  (N/A: {d.why_missing('log')})", "yellow")
    t.append("\n")
    return t


def _trace_key(trace: RunTrace | None) -> object:
    """What the charts depend on: the trace's length and last points."""
    if trace is None:
        return None
    return (trace.run_id, trace.n_iterations, trace.iterations[-1:], trace.warmup_end_s,
            tuple((s.gpu_index, len(s.points), s.points[-1:]) for s in trace.gpus),
            len(trace.host), trace.host[-1:])


class RunDetailScreen(Screen[None]):
    """One run of a job: charts on the left, figures on the right, the log tail below."""

    DEFAULT_CSS = """
    RunDetailScreen { layout: vertical; }
    RunDetailScreen #rd-head { height: 1; background: $panel; }
    RunDetailScreen #rd-main { height: 1fr; }
    RunDetailScreen #rd-main.-hidden { display: none; }
    RunDetailScreen #rd-charts { width: 1fr; }
    RunDetailScreen #rd-info { width: 42; padding: 0 1; border-left: solid $primary-darken-2; }
    RunDetailScreen.-wide #rd-info { width: 64; }
    RunDetailScreen #rd-info Static { margin-bottom: 1; }
    RunDetailScreen #rd-log { height: 7; border-top: solid $primary-darken-2; }
    RunDetailScreen.-tall #rd-log { height: 12; }
    RunDetailScreen #rd-keys { height: 1; dock: bottom; background: $panel; }
    """
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (140, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (45, "-tall")]
    BINDINGS = [Binding("escape", "close", "Back"),
                Binding("l", "open_log", "Log"),
                Binding("left_square_bracket", "attempt(-1)", "Prev attempt", key_display="["),
                Binding("right_square_bracket", "attempt(1)", "Next attempt", key_display="]")]

    def __init__(self, db_path: Path, job_id: int, *, run_id: int | None = None,
                 poll_s: float = 0.5) -> None:
        super().__init__()
        self.db_path, self.job_id, self.run_id = db_path, job_id, run_id
        self.poll_s = poll_s
        self.detail: RunDetail | None = None
        self.trace: RunTrace | None = None
        self.tail: tuple[str, ...] = ()
        self.loads = 0
        """Reads shown so far (tests wait on it)."""
        self._gen = 0
        self._lock = threading.Lock()
        self._db: ReadDb | None = None
        self._drawn: object = None
        self._drawn_at = 0.0
        self._texts: dict[str, Text] = {}
        self._error: str | None = None
        self._inflight = 0
        self._labels: dict[int, str] = {}

    def compose(self) -> ComposeResult:
        yield Static("", id="rd-head")
        yield Static(id="too-small")
        with Vertical(id="body"):
            with Horizontal(id="rd-main", classes="-hidden"):
                with ChartsScroll(id="rd-charts"):
                    yield RunCharts()
                with VerticalScroll(id="rd-info"):
                    for part in ("status", "stats", "generation", "convergence", "profile",
                                 "telemetry", "env"):
                        yield Static("", id=f"rd-{part}")
            yield Static("", id="rd-log")
        yield KeyBar([*((b, False) for b in self.BINDINGS),
                      *((b, True) for b in self.app.BINDINGS)], id="rd-keys")

    def on_mount(self) -> None:
        self.query_one("#rd-head", Static).update(f" job {self.job_id}: reading…")
        self.reload()
        self.set_interval(self.poll_s, self._tick)

    def on_resize(self, event: Resize) -> None:
        self.query_one("#too-small", Static).update(
            TOO_SMALL.format(w=event.size.width, h=event.size.height))

    def on_unmount(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # reading ---------------------------------------------------------------------
    def _tick(self) -> None:
        d = self.detail
        # A finished run does not change; a read still going is not asked again (a slow
        # read superseded at every tick would never be shown).
        if (d is None or d.running or self._error) and not self._inflight:
            self.reload(extend=True)

    def reload(self, extend: bool = False) -> None:
        """Read the run again (``extend``: its trace only from where it ends); a read
        still going is superseded (its result dropped)."""
        self._gen += 1
        self._inflight += 1
        self._read(self._gen, self.run_id, self.trace if extend else None)

    # description: by default Textual repr()s the arguments on the loop (a whole trace)
    @work(thread=True, group="run-detail", exit_on_error=False, description="run detail read")
    def _read(self, gen: int, run_id: int | None, trace: RunTrace | None) -> None:
        try:
            detail, trace, job = self._read_run(run_id, trace)
            tail, from_file = log_tail(detail) if detail else ((), True)
        except Exception as exc:  # a database gone or locked: said once, read again later
            self.app.call_from_thread(self._failed, gen, f"{type(exc).__name__}: {exc}")
            return
        self.app.call_from_thread(self._show, gen, detail, trace, tail, from_file, job)

    def _read_run(self, run_id: int | None, trace: RunTrace | None
                  ) -> tuple[RunDetail | None, RunTrace | None, str | None]:
        """The run (the job's latest when ``run_id`` is None), its trace, and the job's
        status when it has no run."""
        from dltop.store.reader import open_reader

        with self._lock:
            if self._db is None:
                self._db = open_reader(self.db_path)
            db = self._db
            if run_id is None:
                attempts = job_attempts(db, self.job_id)
                run_id = attempts[-1] if attempts else None
            detail = None if run_id is None else read_run_detail(db, run_id)
            if detail is not None:
                if detail.run_id not in self._labels:  # read once: it needs every job
                    self._labels[detail.run_id] = run_settings(db, [detail.run_id]).get(
                        detail.run_id, "")
                detail = replace(detail, settings=self._labels[detail.run_id])
                return detail, extend_trace(db, trace, detail.run_id), None
            return None, None, job_status(db, self.job_id)

    def _failed(self, gen: int, error: str) -> None:
        self._inflight -= 1
        if gen != self._gen or not self.is_attached:
            return
        if self._error is None:  # once per streak of failures
            self.notify(multiline(f"reading run of job {self.job_id} failed: {error}"),
                        severity="error", timeout=10, markup=False)
        self._error = error
        self.query_one("#rd-head", Static).update(
            Text(f" job {self.job_id}: reading failed: {one_line(error)}", style="bold red",
                 no_wrap=True, overflow="ellipsis"))

    # showing ---------------------------------------------------------------------
    def _show(self, gen: int, detail: RunDetail | None, trace: RunTrace | None,
              tail: tuple[str, ...], from_file: bool, job: str | None = None) -> None:
        self._inflight -= 1
        if gen != self._gen or not self.is_attached:
            return  # a newer read was asked for (another attempt, say)
        self.loads += 1
        self._error = None
        head = self.query_one("#rd-head", Static)
        if detail is None:
            head.update(Text(f" job {self.job_id}: no run yet ({job or 'not found'}); this "
                             "screen shows it when it starts", no_wrap=True,
                             overflow="ellipsis"))
            return
        self.detail, self.trace, self.tail = detail, trace, tail
        self.query_one("#rd-main").remove_class("-hidden")
        self.run_id = detail.run_id
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" run detail ", "bold reverse")
        # the status before the label: a long label is cut at 80 columns, not the status
        t.append(f"  run {detail.run_id}  ")
        t.append(detail.status, STATUS_STYLE.get(detail.status, "bold"))
        t.append(f"  {one_line(detail.label)}")
        n = len(detail.attempts)
        t.append(f"  attempt {detail.attempt_index + 1}/{n}" + ("  ([ ] switch)" if n > 1 else ""))
        t.append(f"  campaign {detail.campaign_id}")
        head.update(t)
        key, now = _trace_key(trace), time.monotonic()
        # Charts cost CPU (built in workers): only when the data moved, and for a
        # running run at most every CHART_S (the figures still follow every read).
        if key != self._drawn and (not detail.running or now - self._drawn_at >= CHART_S
                                   or self._drawn is None):
            self._drawn, self._drawn_at = key, now
            self.query_one(RunCharts).show(
                trace, detail.why_missing("samples"), detail.running,
                serve_charts(detail.serving) if detail.serving else None)
        self._set("#rd-status", status_text(detail, from_file))
        live = stats_so_far(detail, trace) if detail.running else None
        self._set("#rd-stats", section("Statistics" + (" so far" if live else ""),
                                       stats_rows(live or detail.stats, detail.model,
                                                  serves(detail.framework)), detail))
        for part, text in (("generation", generation_text(detail)),
                           ("convergence", convergence_text(trace)),
                           ("profile", profile_text(detail))):
            self._set(f"#rd-{part}", text)
            self.query_one(f"#rd-{part}").display = bool(text.plain)  # most runs have none
        self._set("#rd-telemetry", section("Telemetry", telemetry_rows(detail), detail))
        env = detail.environment or (("environment", None),)
        self._set("#rd-env", section(
            "Environment", [(ENV_LABELS.get(k, k), v, "environment") for k, v in env], detail))
        log = Text(no_wrap=True, overflow="ellipsis")
        log.append("log tail" + ("" if from_file else " (stored when the run ended)"), "bold")
        log.append("  l: whole log\n" if from_file else "\n", "dim")
        log.append(multiline("\n".join(tail)) if tail else "(empty)")
        self._set("#rd-log", log)

    def _set(self, selector: str, text: Text) -> None:
        """Update a panel only when its text changed (an update re-lays out the screen)."""
        if self._texts.get(selector) != text:
            self._texts[selector] = text
            self.query_one(selector, Static).update(text)

    # keys --------------------------------------------------------------------------
    def action_close(self) -> None:
        self.dismiss(None)

    def action_attempt(self, step: int) -> None:
        d = self.detail
        if d is None:
            return
        i = d.attempt_index + step
        if not 0 <= i < len(d.attempts):
            self.notify("no other attempt" if len(d.attempts) == 1 else
                        "no earlier attempt" if step < 0 else "no later attempt", timeout=2)
            return
        self.run_id, self.trace = d.attempts[i], None
        self.reload()

    def action_open_log(self) -> None:
        d = self.detail
        if d is None or not d.log_path:
            self.notify("this run has no log", severity="warning", timeout=3)
            return
        if not Path(d.log_path).is_file():
            self.notify(f"log N/A: {one_line(d.why_missing('log'))}", severity="warning",
                        timeout=4,
                        markup=False)
            return
        self.app.push_screen(LogViewer(d.log_path, f"run {d.run_id} log", follow=d.running))
