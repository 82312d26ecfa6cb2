"""The results screen: the campaign's pivot as a sortable table, one metric at a time.

The table is a ``DataTable`` fed by the headless pivot
(:func:`dltop.results.export.build_table`, as ``dltop export`` prints it):
``m`` cycles the metric, ``M`` picks one from a list (a click on the metric bar
too), ``s`` or a click on a header sorts by that column (again: descending,
a third time: the table's order). Each row's best number is highlighted, every
number carries its runs (``n3``) and, for the median time, their spread; a
cell without a number is coloured by why (OOM, failed, timeout, n/a...) and
the legend line under the table says what each colour shown means. Under it,
the scaling table and its speedup chart, whose labels are never cut. A serve
campaign offers ``slo`` after its metrics: the serving answer in the pivot's place,
in its stated order, or the one line saying why the campaign has none.

Tables are computed in a worker thread (the app's ``results`` group) once per
campaign state and metric; going back to a metric seen, or to the screen, costs
no database read.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Static

from dltop.live.campaign import CampaignView
from dltop.results import identity
from dltop.results.display import Shown, shown
from dltop.results.table import Role, Table
from dltop.textsafe import one_line
from dltop.tui.results_scaling import scaling_text
from dltop.tui.results_view import (
    CHOICES,
    METRIC_NAMES,
    SLO_TABLE,
    TABLES,
    ResultsData,
    best_columns,
    cell_text,
    compute,
    legend,
    notes_text,
    reason_marks,
    slo_legend,
    sort_rows,
)
from dltop.tui.results_widgets import MetricBar, MetricPicker, PivotTable, SpeedupChart
from dltop.tui.screens import DltopScreen


class ResultsScreen(DltopScreen):
    """The campaign's pivot table of one metric, and its scaling table and chart."""

    DEFAULT_CSS = """
    ResultsScreen #metric-bar { height: auto; }
    ResultsScreen #results-title { height: 1; }
    ResultsScreen #results-title { text-style: bold; }
    ResultsScreen #results-table { height: auto; max-height: 70%; min-height: 4; }
    ResultsScreen #results-legend { height: auto; max-height: 3; }
    ResultsScreen #results-more { height: 1fr; border-top: solid $primary-darken-2; }
    ResultsScreen #scaling-table, ResultsScreen #scaling-chart,
    ResultsScreen #results-notes { height: auto; }
    ResultsScreen #scaling-chart, ResultsScreen #results-notes { margin-top: 1; }
    /* a scaling line wider than the screen is cut at its edge, never wrapped under */
    ResultsScreen #scaling-table { text-wrap: nowrap; text-overflow: clip; }
    """
    BINDINGS = [Binding("m", "next_metric", "Metric"),
                Binding("M", "pick_metric", "Pick metric", key_display="M"),
                Binding("s", "sort", "Sort"),
                Binding("e", "app.export", "Export")]

    metric = "time"
    sort_column: int | None = None
    """Column the rows are sorted by; ``None``: the table's own order."""
    descending = False
    data: ResultsData | None = None
    """What the table shows now (``None`` until the first computation is back)."""
    _view: Shown | None = None
    """:attr:`data`'s pivot as the exports' Markdown shows it (:mod:`dltop.results.display`)."""

    def __init__(self) -> None:
        super().__init__()
        self._key: tuple[object, ...] | None = None  # the campaign's state when computed
        self._cache: dict[str, ResultsData] = {}  # by metric, for ``_key``
        self._campaign: int | None = None

    def compose_body(self) -> ComposeResult:
        yield MetricBar(id="metric-bar")
        yield Static("", id="results-title")
        yield PivotTable(id="results-table", cursor_type="cell", zebra_stripes=True)
        yield Static("", id="results-legend")
        with VerticalScroll(id="results-more"):
            yield Static("", id="scaling-table")
            yield SpeedupChart(id="scaling-chart")
            yield Static("", id="results-notes")

    def on_mount(self) -> None:
        self.metric = self.dltop.metric if self.dltop.metric in CHOICES else "time"
        self.query_one(MetricBar).show(self.metric)

    # campaign and metric ---------------------------------------------------------
    def show_campaign(self, view: CampaignView | None) -> None:
        super().show_campaign(view)
        if view is None:
            self._key, self._campaign, self._cache = None, None, {}
            self.query_one("#results-title", Static).update("no campaign yet")
            self.query_one(MetricBar).show(self.metric, ())  # not every metric there is
            return
        key = (view.campaign.id, view.campaign.status, tuple(sorted(view.counts.items())))
        # A run finished: the tables change as the campaign goes. Not computed while the
        # screen is composed unseen at start-up (a 100 000-job campaign takes seconds).
        if key != self._key and self.is_current and not self.dltop.composing_screens:
            self._key, self._campaign, self._cache = key, view.campaign.id, {}
            self._request()

    def set_metric(self, metric: str) -> None:
        """Show ``metric`` (export writes it too); computed unless seen for this state."""
        self.metric = self.dltop.metric = metric
        self.query_one(MetricBar).show(metric)
        self._request()

    @property
    def offered(self) -> tuple[str, ...]:
        """The metrics the switch, the bar and the picker offer: the campaign's
        (:func:`offered_metrics`; all of them until its results are read)."""
        return METRIC_NAMES if self.data is None else self.data.metrics

    def action_next_metric(self) -> None:
        names = self.offered
        # a metric the campaign lacks (the last one picked, for another): on from its place
        after = [n for n in CHOICES[CHOICES.index(self.metric) + 1:] if n in names]
        self.set_metric(after[0] if after else names[0])

    def action_pick_metric(self) -> None:
        def picked(metric: str | None) -> None:
            if metric:
                self.set_metric(metric)

        modes = () if self.data is None else identity.modes(
            r.identity for r in self.data.results)
        self.app.push_screen(MetricPicker(self.metric, self.offered, modes), picked)

    def on_metric_bar_picked(self, msg: MetricBar.Picked) -> None:
        self.set_metric(msg.metric)

    def _request(self) -> None:
        """Show the current metric's tables: from the cache, or computed in a worker."""
        if self._campaign is None:
            return
        if (cached := self._cache.get(self.metric)) is not None:
            self._show(cached)
            return
        # the metric's name, not its title: the title line says the table is there
        self.query_one("#results-title", Static).update(Text(f"computing {self.metric} ...",
                                                             "italic"))
        key, cid, metric = self._key, self._campaign, self.metric
        known = next(iter(self._cache.values()), None)
        scaling: Table | bool | None = known.scaling if known is not None else True
        results = known.results if known is not None else None
        db_path = self.dltop.db_path

        def work() -> None:
            data = compute(db_path, cid, metric, scaling, results)
            self.app.call_from_thread(self._computed, key, data)

        # on the app: its handler reports a failed worker ("computing the results failed")
        self.app.run_worker(work, thread=True, group="results", exit_on_error=False)

    def _computed(self, key: tuple[object, ...] | None, data: ResultsData) -> None:
        if key != self._key:
            return  # the campaign moved on meanwhile: a newer computation follows
        self._cache[data.metric] = data
        if data.metric != self.metric:
            return
        if data.metric not in data.metrics:  # picked for another campaign: the first choice
            self.set_metric("time" if "time" in data.metrics else data.metrics[0])
            return
        self._show(data)

    # drawing -----------------------------------------------------------------------
    def _show(self, data: ResultsData) -> None:
        first = self.data is None or self.data.pivot.columns != data.pivot.columns
        self.data = data
        if first:
            self.sort_column, self.descending = None, False
        # as the exports show it: latencies in ms, 4 significant digits (display.py)
        self._view = shown(data.pivot)
        # a campaign the slo table cannot answer: the CLI's line where the legend goes
        # (it wraps there; the title line would cut what to set off at 80 columns)
        title = Text(f"no serving answer ({data.metric} table)", "bold yellow") \
            if data.refused else \
            Text(one_line(self._view.title), no_wrap=True, overflow="ellipsis")
        self.query_one("#results-title", Static).update(title)
        self._fill_table()
        self.query_one(MetricBar).show(self.metric, data.metrics)
        self.query_one("#results-legend", Static).update(
            Text(data.refused, "yellow") if data.refused else slo_legend(data.pivot)
            if data.metric == SLO_TABLE else legend(data.pivot))
        self._show_scaling(data)
        self.query_one("#results-notes", Static).update(Text("\n".join(notes_text(data)),
                                                             "dim"))

    def _fill_table(self) -> None:
        data = self.data
        if data is None:
            return
        pivot = data.pivot
        table = self.query_one("#results-table", DataTable)
        cursor = table.cursor_coordinate
        table.clear(columns=True)
        view = self._view if self._view is not None else shown(pivot)
        texts = {id(row): [text for text, _ in shown_row]
                 for row, shown_row in zip(pivot.rows, view.rows, strict=True)}
        labels: list[Text] = []
        for i, col in enumerate(pivot.columns):
            label = Text(one_line(view.headers[i]), style="bold",
                         justify="left" if col.role is Role.KEY else "right")
            if i == self.sort_column:
                label.append(" ▼" if self.descending else " ▲")
            labels.append(label)
        rows: list[list[Text]] = []
        marks = reason_marks(pivot)  # each n/a reason once, in the legend
        for row in sort_rows(pivot, self.sort_column, self.descending):
            best = best_columns(row, pivot, data.metric)
            cells = []
            for i, (col, cell) in enumerate(zip(pivot.columns, row.cells, strict=True)):
                text = cell_text(cell, col.role, data.metric, i in best, marks,
                                 texts[id(row)][i])
                if col.role is Role.VALUE:
                    text.justify = "right"
                cells.append(text)
            rows.append(cells)
        # Widths given, not measured by the table: a repaint between adding the rows and
        # the table's own measuring (on idle) kept cells cut to their headers' width.
        for i, label in enumerate(labels):
            width = max([label.cell_len, *(r[i].cell_len for r in rows)])
            table.add_column(label, key=str(i), width=width)
        for n, cells in enumerate(rows):
            table.add_row(*cells, key=str(n))
        if table.row_count:
            table.cursor_coordinate = Coordinate(min(cursor.row, table.row_count - 1),
                                                 min(cursor.column, len(pivot.columns) - 1))

    def _show_scaling(self, data: ResultsData) -> None:
        shown = self.query_one("#scaling-table", Static)
        chart = self.query_one(SpeedupChart)
        # the slo table's notes come first under it (the scaling table is the pivot's)
        shown.display = chart.display = data.scaling is not None and data.metric not in TABLES
        chart.table = data.scaling
        chart.refresh(layout=True)
        if not shown.display or data.scaling is None:
            return
        shown.update(scaling_text(data.scaling))

    # sorting -----------------------------------------------------------------------
    def sort_by(self, column: int) -> None:
        """Sort by ``column``: ascending, then descending, then the table's own order."""
        if column != self.sort_column:
            self.sort_column, self.descending = column, False
        elif not self.descending:
            self.descending = True
        else:
            self.sort_column, self.descending = None, False
        self._fill_table()

    def action_sort(self) -> None:
        if self.data is not None:
            self.sort_by(self.query_one("#results-table", DataTable).cursor_column)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(event.column_index)
