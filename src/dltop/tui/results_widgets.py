"""The results screen's widgets: the metric bar and picker, the pivot table, the speedup
chart (:mod:`dltop.tui.results_screen` lays them out and fills them).

The bar wraps the campaign's metric names between names and says which was clicked; the
picker lists them with their titles; the table keeps its rendered cells over a screen
switch; the chart lays its bars out for its width.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.events import Click
from textual.message import Message
from textual.widgets import DataTable, Label, OptionList, Static

from dltop.results.metricdefs import METRICS
from dltop.results.table import Table
from dltop.tui.modals import Dialog
from dltop.tui.results_scaling import speedup_chart
from dltop.tui.results_view import METRIC_NAMES, OVERHEAD_TABLE, SLO_TABLE


def bar_layout(names: Sequence[str], current: str, width: int
               ) -> tuple[Text, list[tuple[int, int, int, str]]]:
    """The metric names in lines of at most ``width`` cells, broken between names (the
    bar wraps, never cuts ``ttft`` off), and each name's (line, start, end) for clicks."""
    text = Text(no_wrap=True, overflow="ellipsis")
    spans: list[tuple[int, int, int, str]] = []
    line, x = 0, 0
    for name in names:
        if x and x + 1 + len(name) > width:  # the space before it counts too
            text.append("\n")
            line, x = line + 1, 0
        elif x:
            text.append(" ")
            x += 1
        text.append(name, "bold reverse" if name == current else "")
        spans.append((line, x, x + len(name), name))
        x += len(name)
    return text, spans


class MetricBar(Static):
    """The campaign's metrics by name, the shown one highlighted, on as many lines as the
    width needs; a click picks one."""

    DEFAULT_CSS = "MetricBar { height: auto; }"

    class Picked(Message):
        """A metric was clicked."""

        def __init__(self, metric: str) -> None:
            super().__init__()
            self.metric = metric

    _spans: list[tuple[int, int, int, str]] = []
    _current = "time"
    _names: tuple[str, ...] = METRIC_NAMES

    def show(self, current: str, names: Sequence[str] | None = None) -> None:
        """Highlight ``current`` among ``names`` (None: those shown already)."""
        self._current = current
        if names is not None:
            self._names = tuple(names)
        self._lay_out()

    def _lay_out(self) -> None:
        text, self._spans = bar_layout(self._names, self._current, self.size.width or 10**6)
        self.update(text)

    def on_resize(self) -> None:
        self._lay_out()

    def on_click(self, event: Click) -> None:
        for line, start, end, name in self._spans:
            if line == event.y and start <= event.x < end:
                self.post_message(self.Picked(name))
                return


class MetricPicker(Dialog):
    """Pick the metric from a list (its title says what it measures)."""

    def __init__(self, current: str, names: Sequence[str] = METRIC_NAMES,
                 modes: Collection[str] = ()) -> None:
        super().__init__()
        self.current = current
        self.names = tuple(names)
        """The metrics offered: the campaign's (:func:`offered_metrics`)."""
        self.modes = tuple(modes)
        """The campaign's modes: a serve campaign's time is its requests' latency."""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Show which metric", classes="dialog-title")
            yield OptionList(*(f"{name:<12} {self._title(name)}" for name in self.names),
                             id="metric-list")

    def _title(self, name: str) -> str:
        if name == SLO_TABLE:
            return "serving capacity under the SLOs (export --table slo)"
        if name == OVERHEAD_TABLE:
            return "the server's overhead against generate (export --table overhead)"
        return METRICS[name].of_modes(self.modes).title

    def on_mount(self) -> None:
        if self.current in self.names:
            self.query_one(OptionList).highlighted = self.names.index(self.current)

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.names[event.option_index])


class SpeedupChart(Static):
    """The speedup bars, laid out for the widget's width."""

    table: Table | None = None

    def render(self) -> Text:
        if self.table is None:
            return Text("")
        return speedup_chart(self.table, self.size.width or 80)


class PivotTable(DataTable[Text]):
    """A DataTable that keeps its rendered cells over a screen switch.

    Textual restyles every widget of a screen when it is shown again, and DataTable
    drops all its render caches on any restyle: each visit to the results screen
    re-rendered every visible cell (about 24 ms for the benchmark's table, profiled).
    The caches are dropped only when a style the table draws with really changed. Not
    its size: DataTable's own cache keys carry the width and a count of resizes (the
    size in this key dropped every cache on the visit after the table first grew).
    """

    _style_key: tuple[object, ...] | None = None

    def notify_style_update(self) -> None:
        try:
            key: tuple[object, ...] | None = (
                self.rich_style, self.has_focus,
                *(self.get_component_rich_style(name, partial=True)
                  for name in sorted(self.COMPONENT_CLASSES)))
        except KeyError:  # component styles not applied yet (the first styling)
            key = None
        if key is not None and key == self._style_key:
            super(DataTable, self).notify_style_update()  # the widget's own, caches kept
            return
        self._style_key = key
        super().notify_style_update()
