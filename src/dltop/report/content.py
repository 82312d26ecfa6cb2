"""The report as data: its figures and what the page around them shows.

Frozen and free of any plotting: :mod:`dltop.report.data` and
:mod:`dltop.report.runs` fill them from the results package,
:mod:`dltop.report.specs` draws a :class:`Figure`, :mod:`dltop.report.html`
and :mod:`dltop.report.figures` write them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dltop.results import queries
from dltop.results.table import Table


@dataclass(frozen=True)
class Figure:
    """One figure: its data, title and caption, or why it is omitted."""

    key: str
    """Unique file stem (``time-fcn-r-cpu``)."""
    kind: str
    """``devices``, ``scaling``, ``batch``, ``energy``, ``profile``, ``prompt`` or ``run``:
    which spec draws it."""
    title: str
    caption: str = ""
    """n, spread, flagged runs (and what a panel left out lacks)."""
    rows: tuple[Mapping[str, Any], ...] = ()
    omitted: str = ""
    """Non-empty: the figure is not drawn, and this says why."""
    x_title: str = ""
    panels: tuple[str, ...] = ()
    """The panels drawn, in order (``batch``, ``energy`` and ``run`` figures)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Kind-specific: ``warmup_end_s`` of a run, ``x_field`` of a run by iteration."""


@dataclass(frozen=True)
class Report:
    """Everything the HTML page and the figure files show."""

    title: str
    campaigns: tuple[queries.CampaignRow, ...]
    constants: str
    """The identity settings every configuration shares (``constant: precision fp32...``)."""
    environment: tuple[tuple[str, str], ...]
    """(label, text) per environment field (:mod:`dltop.results.caption`)."""
    summary: Table
    reasons: Mapping[int, str]
    """Summary row index → why that configuration failed (its latest run's message)."""
    figures: tuple[Figure, ...]
    runs: tuple[Figure, ...]
    runs_note: str
    """How many runs have a figure and which were left out."""
    empty: str = ""
    """Non-empty: no finished run to plot, and this says so."""
    left_out: str = ""
    """The configurations no figure draws (no ok run), counted per status in one line
    (``left out of the figures: 3 configurations without an ok run (OOM 1, failed
    2)...``); empty when none."""
    slo: Table | None = None
    """The serving answer (:mod:`dltop.results.slo`) at its default attainment, where the
    campaigns hold a request_rate sweep of serve runs with an SLO."""
    overhead: Table | None = None
    """The server's overhead (:mod:`dltop.results.overhead`), where a serve run with a
    ``shape`` pairs with a generate run of that model."""
