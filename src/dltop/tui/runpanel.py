"""The current run: iteration i/n with warm-up marked, s/it sparkline, ETA, log tail."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import ProgressBar, Static

from dltop.live.campaign import RunView
from dltop.textsafe import multiline, one_line
from dltop.tui.format import duration, num, per_iteration, sparkline


class RunHeadline(Static):
    """Label, iteration count and warm-up marker of the current run."""

    run: reactive[RunView | None] = reactive(None)
    others: reactive[int] = reactive(0)
    """Other runs in progress beside this one (a packed campaign)."""

    def render(self) -> Text:
        r = self.run
        if r is None:
            return Text("no run in progress", "dim")
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"run {r.run_id}: ", "bold")
        t.append(one_line(r.label))
        t.append(f"  iteration {r.done}/{r.total}")
        if r.in_warmup:
            t.append("  WARM-UP", "bold yellow")
        if self.others:
            t.append(f"  +{self.others} more running (packed)", "cyan")
        return t


class RunRate(Static):
    """Seconds per iteration (sparkline and median), samples/s and ETA."""

    run: reactive[RunView | None] = reactive(None)

    def render(self) -> Text:
        r = self.run
        if r is None:
            return Text("")
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(sparkline(r.recent_s, 24, None, None), "cyan")
        t.append(f"  {per_iteration(r.median_s)}  ")
        t.append(f"{num(r.samples_per_s, ',.0f', ' samples/s')}  ")
        t.append(f"ETA {duration(r.eta_s)}")
        return t


class LogTail(Static):
    """The last lines of the runner's log (read from its end, whatever it writes).

    A program's output may hold escape sequences (colours, a screen clear, a pane
    title, OSC 52 clipboard writes): they are shown escaped, never sent.
    """

    lines: reactive[tuple[str, ...]] = reactive(())

    def render(self) -> Text:
        shown = multiline("\n".join(self.lines)).split("\n")
        shown = shown[-max(1, self.size.height):]  # the newest lines that fit
        return Text("\n".join(shown), "dim", no_wrap=True, overflow="ellipsis")


class RunPanel(Vertical):
    """The run in progress, fed a :class:`RunView` (or None)."""

    def compose(self) -> ComposeResult:
        yield RunHeadline()
        yield ProgressBar(show_eta=False, id="run-progress")
        yield RunRate()
        yield LogTail()

    def show(self, run: RunView | None, others: int = 0) -> None:
        """Display ``run`` (None: nothing is running) and how many others run beside it."""
        self.query_one(RunHeadline).run = run
        self.query_one(RunHeadline).others = others
        self.query_one(RunRate).run = run
        self.query_one(LogTail).lines = run.log_tail if run else ()
        bar = self.query_one(ProgressBar)
        bar.display = run is not None
        if run is not None:
            bar.update(total=max(run.total, 1), progress=run.done)
