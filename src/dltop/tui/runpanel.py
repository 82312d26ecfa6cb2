"""The current run: iteration i/n with warm-up marked, s/it sparkline, elapsed and ETA,
stall warning, loss and its trend, the process tree's CPU and memory, the campaign's
ETA, a serve run's requests so far, log tail.

What it says is computed in ``live/`` (:mod:`dltop.live.health`); this only draws it.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.events import Mount
from textual.reactive import reactive
from textual.widgets import ProgressBar, Static

from dltop.live.campaign import RunView
from dltop.live.health import CampaignEta, approx_duration
from dltop.live.serve_live import Quantiles
from dltop.results.tokens import is_lm
from dltop.textsafe import multiline, one_line
from dltop.tui.format import NA, duration, num, per_iteration, size, sparkline

STALL_STYLE = "bold black on yellow"
"""The warning colour of a stalled run."""


class RunHeadline(Static):
    """Label, iteration count and warm-up marker of the current run."""

    run: reactive[RunView | None] = reactive(None)
    others: reactive[int] = reactive(0)
    """Other runs in progress beside this one (a packed campaign)."""

    def render(self) -> Text:
        r = self.run
        if r is None:
            return Text("no run in progress", "dim")
        if r.pending is not None:  # wrapped, not cut: a reason may name many nodes
            t = Text()
            t.append(f"run {r.run_id}: ", "bold")
            t.append(one_line(r.label))
            t.append("  queued in Slurm", "bold yellow")
            t.append(f" ({one_line(r.pending)})")
            return t
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
    """Seconds per iteration (sparkline and median), samples/s (tokens/s for a
    transformer) and ETA."""

    run: reactive[RunView | None] = reactive(None)

    def render(self) -> Text:
        r = self.run
        if r is None:
            return Text("")
        if r.pending is not None:  # no clock: the run has not started
            return Text("not started: the job waits in Slurm's queue", "dim")
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(sparkline(r.recent_s, 24, None, None), "cyan")
        if r.serve is not None:
            # A serve run's iterations are its requests, many in flight at once: their
            # seconds are latencies, and latency over output is no throughput (the
            # request and token rates are on the serve lines).
            t.append(f"  e2e p50 {_latency(r.median_s)}  ")
        else:
            t.append(f"  {per_iteration(r.median_s)}  ")
            unit = " tokens/s" if is_lm(r.model) else " samples/s"
            t.append(f"{num(r.samples_per_s, ',.0f', unit)}  ")
        t.append(f"elapsed {duration(r.elapsed_s)}  ")
        t.append(f"ETA {duration(r.eta_s)}")
        return t


class RunHealth(Static):
    """Stall warning, loss and trend, process tree CPU and RSS, and the campaign ETA."""

    run: reactive[RunView | None] = reactive(None)
    eta: reactive[CampaignEta | None] = reactive(None)
    """Time left for the whole queue (shown with or without a run)."""

    def render(self) -> Text:
        r, eta = self.run, self.eta
        t = Text(no_wrap=True, overflow="ellipsis")
        if r is not None and r.pending is None:
            st = r.stall
            if st is not None and st.stalled:
                what = "no first iteration after" if st.first else "no iteration for"
                t.append(f" stalled: {what} {approx_duration(st.quiet_s)} ", STALL_STYLE)
                t.append("  ")
            elif st is not None and st.first:
                t.append(f"starting ({approx_duration(st.quiet_s)}, no iteration yet)  ",
                         "dim")
            loss = r.loss
            if r.serve is not None:
                pass  # a request has no loss
            elif loss is None:
                t.append("loss N/A  ", "dim")
            else:
                t.append(f"loss {loss.last:.4g} ")
                t.append(loss.arrow, {"falling": "green", "rising": "red"}.get(
                    loss.direction, "dim"))
                t.append("  ")
            # 100 % is one core: the run's processes and all their children together.
            t.append(f"cpu {num(r.tree_cpu_pct, '.0f', '%')} rss {size(r.tree_rss_bytes)}  ")
        if eta is not None:
            t.append("campaign " if r is not None else "campaign: ", "dim")
            t.append(eta.text(), "dim" if eta.seconds is None else "")
        return t


def _latency(s: float | None) -> str:
    if s is None:
        return NA
    return f"{s * 1e3:.3g} ms" if s < 0.9995 else f"{s:.3g} s"  # never 1e+03 ms


def _rate(v: float | None) -> str:
    return num(v, ".3g" if v is not None and v < 99.95 else ",.0f")


def _quantiles(q: Quantiles, name: str) -> str:
    return f"{name} p50 {_latency(q.p50_s)} p99 {_latency(q.p99_s)} n={q.n:,}"


class RunServe(Static):
    """A serve run's requests so far: in flight, ok and failed, the achieved against the
    asked rate, output tokens/s; TTFT and ITL p50/p99 (N/A below the sample rule); the
    newest error. Each line fits 80 columns; hidden for any other run."""

    run: reactive[RunView | None] = reactive(None)

    def render(self) -> Text:
        s = self.run.serve if self.run is not None else None
        if s is None:
            return Text("")
        # 76 columns at most with 256 in flight, 99,999 ok and 1.2 million ITLs
        t = Text(no_wrap=True, overflow="ellipsis")
        flight = NA if s.in_flight is None else str(s.in_flight)
        t.append(f"{flight} in flight  {s.ok:,} ok  ")
        t.append(f"{s.failed:,} failed", "bold red" if s.failed else "")
        asked = "inf" if s.asked_rate_per_s is None else f"{s.asked_rate_per_s:g}"
        t.append(f"  {_rate(s.achieved_rate_per_s)}/{asked} req/s  "
                 f"{num(s.output_tokens_per_s, ',.0f', ' tok/s')}\n")
        t.append(f"{_quantiles(s.ttft, 'TTFT')}  {_quantiles(s.itl, 'ITL')}")
        if s.last_error is not None:
            t.append("\nlast error: ", "bold red")
            t.append(one_line(s.last_error))
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


class RunProgress(ProgressBar):
    """Textual's progress bar without its timers.

    ``ProgressBar`` starts a 1 Hz timer for an ETA this panel does not show, and its bar
    animates at 15 Hz while it has no total; both fired for as long as the viewer ran,
    run or no run, on screen or not (the idle viewer's event loop woke 17 times a second
    for them). This one always has a total, so it never animates, and starts no timer.
    """

    def __init__(self, **kw: object) -> None:
        super().__init__(total=1, show_eta=False, **kw)  # type: ignore[arg-type]

    def _on_mount(self, event: Mount) -> None:
        # Handlers run subclass first: prevent_default skips ProgressBar.on_mount, whose
        # timer only moves the ETA (and Widget._on_mount, which only shows scroll bars).
        event.prevent_default()
        self.update()


class RunPanel(Vertical):
    """The run in progress, fed a :class:`RunView` (or None)."""

    def compose(self) -> ComposeResult:
        yield RunHeadline()
        yield RunProgress(id="run-progress")
        yield RunRate()
        yield RunHealth()
        yield RunServe()
        yield LogTail()

    def show(self, run: RunView | None, others: int = 0,
             eta: CampaignEta | None = None) -> None:
        """Display ``run`` (None: nothing is running), how many others run beside it, and
        the campaign's ETA."""
        self.query_one(RunHeadline).run = run
        self.query_one(RunHeadline).others = others
        self.query_one(RunRate).run = run
        health = self.query_one(RunHealth)
        health.run, health.eta = run, eta
        serve = self.query_one(RunServe)
        serve.run = run
        serve.display = run is not None and run.serve is not None
        self.set_class(serve.display, "-serve")  # its lines come on top of the others'
        self.query_one(LogTail).lines = run.log_tail if run else ()
        bar = self.query_one(RunProgress)
        bar.display = run is not None
        if run is not None:
            bar.update(total=max(run.total, 1), progress=run.done)
