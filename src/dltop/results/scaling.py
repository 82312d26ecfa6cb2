"""Scaling tables (Shi et al. Table 8 shape): time, speedup and efficiency per device count.

Groups are (framework, model, batch, every other varying identity field,
device family; :mod:`dltop.results.identity`); the family is ``cpu``
(threads of one process), ``cpus`` (CPU worker processes) or ``gpu``. Speedup
is throughput against the group's 1-device run (``cpu:1``, ``cpus:1`` or
``gpu:1``), which under strong scaling (global batch fixed) equals the ratio
of seconds per iteration, and under weak scaling counts the extra samples.
Efficiency = speedup / N. Rows appear as runs complete; a group without its
1-device result shows no speedup. The time cells keep the pivot's markers
(``*`` noisy, ``†`` packed or shared, ``§`` contaminated); an efficiency above 100 %
(superlinear: caches, a batch that is not the same work, a noisy baseline)
is marked ``‡`` with a footnote, since it is more often a measurement problem
than a result.

Nodes (issue 15): a configuration's ``nodes`` (hosts of a Slurm job, ``device``
per node) is not part of the group. The speedup stays against the group's
1-device run at 1 node, and the efficiency is per worker: speedup / (N x nodes),
so ``gpu:2`` on 2 nodes and ``gpu:4`` on 1 node are compared alike. When the set
has runs on more than one node, the table gains a ``nodes`` key column and the
speedup and efficiency against the same device at 1 node (``vs 1 node``;
efficiency = that speedup / nodes), which is the question a user adding nodes
asks (does the second host pay?) and which needs no 1-device run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dltop import catalog
from dltop.results import caption, identity, oversub, queries, tokens
from dltop.results.aggregate import ConfigResult, config_results
from dltop.results.metrics import MIXED_MARK, MIXED_NOTE, markers
from dltop.results.places import place_labeller, placed_identities, rank
from dltop.results.table import (
    NOTE_INCOMPLETE,
    Cell,
    Column,
    Role,
    Row,
    Table,
    fmt_seconds,
    key_cell,
    status_label,
)

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils


@dataclass(frozen=True)
class ScalingRow:
    """One device configuration of a scaling group."""

    framework: str
    model: str
    batch_size: int
    device: str
    n_devices: int
    status: str
    seconds_per_iter: float | None
    samples_per_s: float | None
    speedup: float | None
    efficiency: float | None
    marks: str = ""
    """The configuration's markers: ``*`` noisy, ``†`` packed or shared, ``§`` contaminated."""
    identity: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The configuration's flat identity (:mod:`dltop.results.identity`)."""
    place: str = ""
    """The device as the devices column shows it: ``device`` with the host and GPU model
    where the set spans several (``hostB gpu:2 (H100)``)."""
    host: str = ""
    nodes: int = 1
    """Hosts the configuration spans (``device`` is per node)."""
    node_speedup: float | None = None
    """Throughput against the same device at 1 node (None at 1 node, or without it)."""
    node_efficiency: float | None = None
    """``node_speedup`` / nodes."""
    host_cores: int | None = None
    """Its host's logical CPUs (:attr:`ConfigResult.host_cores`)."""
    oversubscribed: bool = False
    """``cpu:N`` on a host of fewer than N logical CPUs (:mod:`dltop.results.oversub`)."""
    incomplete: str = ""
    """``1/2`` where fewer ok runs than the repeats planned stand behind it (the pivot's
    ``(n/m)``), else empty."""

    @property
    def superlinear(self) -> bool:
        """Efficiency above 100 %."""
        return self.efficiency is not None and self.efficiency > 1.0 + 1e-9


def scaling_rows(db: sqlite_utils.Database, campaigns: int | Sequence[int], *,
                 results: Sequence[ConfigResult] | None = None) -> list[ScalingRow]:
    """Every configuration with its speedup and efficiency against one device (on the
    same host and GPU model); ``results``: these campaigns' :func:`config_results`, when
    the caller read them already."""
    if results is None:
        results = config_results(db, campaigns)
    var = identity.variation(placed_identities(results)).without(NODES)
    label = place_labeller(results)
    base: dict[tuple[str, str, int, str, str, tuple[str, str]], float] = {}
    one_node: dict[tuple[str, str, int, str, str, tuple[str, str]], float] = {}
    for r in results:
        family, _, count = r.device.partition(":")
        if _nodes(r.identity) == 1 and r.samples_per_s:
            group = (r.framework, r.model, r.batch_size, var.group(r.identity), family, r.place)
            one_node[(*group[:4], r.device, r.place)] = r.samples_per_s
            if count == "1":
                base[group] = r.samples_per_s
    rows = []
    for r in results:
        family, _, n_text = r.device.partition(":")
        n, nodes = int(n_text), _nodes(r.identity)
        group = (r.framework, r.model, r.batch_size, var.group(r.identity), family, r.place)
        b = base.get(group)
        speedup = r.samples_per_s / b if (b and r.samples_per_s) else None
        b1 = one_node.get((*group[:4], r.device, r.place))
        node_speedup = r.samples_per_s / b1 if (b1 and r.samples_per_s and nodes > 1) else None
        rows.append(ScalingRow(r.framework, r.model, r.batch_size, r.device, n, r.status,
                               r.median_s, r.samples_per_s, speedup,
                               speedup / (n * nodes) if speedup is not None else None,
                               markers(r), r.identity, label(r), r.host, nodes, node_speedup,
                               node_speedup / nodes if node_speedup is not None else None,
                               r.host_cores, r.oversubscribed,
                               f"{r.n_runs}/{r.repeats}" if r.incomplete and r.n_runs else ""))
    rows.sort(key=lambda x: (rank(x.model, catalog.MODELS), x.batch_size,
                             rank(x.framework, catalog.FRAMEWORKS),
                             var.sort_key(x.identity), x.host, x.device.partition(":")[0],
                             x.place.removeprefix(x.host + " ").partition(" ")[2],
                             x.n_devices, x.nodes))
    return rows


NODES = "nodes"


def _nodes(ident: Mapping[str, Any]) -> int:
    """A configuration's node count (1 for a spec stored before nodes existed)."""
    value = ident.get(NODES, 1)
    return value if isinstance(value, int) and value >= 1 else 1


COLUMNS = (
    Column("model", "model", Role.KEY),
    Column("framework", "framework", Role.KEY),
    Column("batch_size", "batch", Role.KEY),
    Column("device", "devices", Role.KEY),
    Column("seconds_per_iter", "s/iter", Role.VALUE, "s"),
    Column("samples_per_s", "samples/s", Role.VALUE, "samples/s"),
    Column("speedup", "speedup", Role.VALUE, "1"),
    Column("efficiency", "efficiency", Role.VALUE, "1"),
)
NODE_COLUMNS = (
    Column("nodes", "nodes", Role.KEY),
    Column("node_speedup", "speedup vs 1 node", Role.VALUE, "1"),
    Column("node_efficiency", "efficiency vs 1 node", Role.VALUE, "1"),
)
NOTE_NODES = ("Nodes: devices are per node; efficiency = speedup / (N x nodes), per worker; "
              "vs 1 node: samples/s against the same devices on 1 node, efficiency = that "
              "speedup / nodes.")
NOTE = ("Speedup: samples/s against the same group's 1-device run "
        "(cpu:1, cpus:1 or gpu:1); efficiency = speedup / N.")
NOTE_MARKS = ("`*` noisy (a run's CV > 0.10); † measured while other runs shared its devices "
              "(packed: --pack; or shared: another engine's runner was seen on them); § a "
              "foreign process used the run's devices; ! oversubscribed: cpu:N "
              "on a host of fewer than N logical CPUs (the caption says which).")
NOTE_SUPERLINEAR = ("‡ efficiency above 100 %: superlinear scaling is more often a "
                    "measurement problem (a noisy or slow 1-device baseline, caches, "
                    "different work per step) than a result; check before citing it.")


def _row(r: ScalingRow, var: identity.Variation, with_nodes: bool,
         per_row: bool = False) -> Row:
    missing = status_label(r.status)

    def num(value: float | None, text: str, absent: str = "") -> Cell:
        return Cell(text if value is not None else absent, value, r.status)

    # the markers, and (n/m) as the pivot says it: a speedup from some repeats only
    marks = r.marks + (f" ({r.incomplete})" if r.incomplete else "")
    cells = (
        key_cell(r.model), key_cell(r.framework), key_cell(r.batch_size),
        *var.cells(r.identity), key_cell(r.place or r.device),
        num(r.seconds_per_iter, fmt_seconds(r.seconds_per_iter or 0.0) + marks, missing),
        # a row without an ok run names its status in both time columns
        num(r.samples_per_s, f"{r.samples_per_s or 0.0:.1f}" + marks,
            missing if r.seconds_per_iter is None else ""),
        num(r.speedup, f"{r.speedup or 0.0:.2f}"),
        num(r.efficiency, f"{r.efficiency or 0.0:.0%}" + ("‡" if r.superlinear else "")),
    )
    extra: dict[str, object] = {"n_devices": r.n_devices, "status": r.status}
    if with_nodes:
        cells = (*cells[:4 + len(var.fields)], key_cell(r.nodes),
                 *cells[4 + len(var.fields):],
                 num(r.node_speedup, f"{r.node_speedup or 0.0:.2f}"),
                 num(r.node_efficiency, f"{r.node_efficiency or 0.0:.0%}"))
    if per_row:  # after the devices (and nodes): the unit of this row's throughput
        at = 4 + len(var.fields) + with_nodes
        cells = (*cells[:at], key_cell(tokens.row_unit("throughput", r.model)), *cells[at:])
    if r.marks:
        extra["markers"] = r.marks
    if r.superlinear:
        extra["superlinear"] = True
    if r.oversubscribed:
        extra["oversubscribed"] = True
    if r.incomplete:
        extra["incomplete"] = True
    return Row(cells, extra)


def scaling_table(rows: list[ScalingRow], title: str,
                  context: tuple[tuple[str, ...], Mapping[str, Any]] | None = None) -> Table:
    """The scaling rows as a :class:`Table` (JSON rows keep the :class:`ScalingRow` keys).

    Identity fields that vary over the rows are row keys after the batch; the
    constant ones are in the caption. ``context`` is the environment caption and the
    campaigns/environment JSON fields (:func:`dltop.results.caption.context`), without
    which the table states only the constant settings.
    """
    var = identity.variation(placed_identities(rows)).without(NODES)
    with_nodes = any(r.nodes > 1 for r in rows)
    notes = [NOTE, *([NOTE_NODES] if with_nodes else [])]
    if any(r.marks for r in rows):
        notes.append(NOTE_MARKS)
    if any(MIXED_MARK in r.marks for r in rows):
        notes.append(MIXED_NOTE)
    if any(r.incomplete for r in rows):
        notes.append(NOTE_INCOMPLETE)
    if any(r.superlinear for r in rows):
        notes.append(NOTE_SUPERLINEAR)
    constants = var.caption()
    lines, meta = context or (((constants,) if constants else ()), {})
    lines = (*lines, *oversub.caption_lines(rows))
    columns = (*COLUMNS[:3], *var.columns(), *COLUMNS[3:])
    if with_nodes:
        at = 4 + len(var.fields)
        columns = (*columns[:at], NODE_COLUMNS[0], *columns[at:], *NODE_COLUMNS[1:])
    # Transformer rows count tokens (results/tokens.py): say so, per row if mixed.
    models = [r.model for r in rows]
    modes = {str(r.identity.get("mode") or "train") for r in rows}
    rate, time = tokens.metric_for("throughput", models, modes), tokens.metric_for(
        "time", models, modes)  # a set of serve runs: e2e request latency, tok/s per request
    columns = tuple(Column(c.key, rate.header, c.role, rate.unit) if c.key == "samples_per_s"
                    else Column(c.key, time.header, c.role, time.unit)
                    if c.key == "seconds_per_iter" and modes == {"serve"} else c
                    for c in columns)
    if modes == {"serve"}:
        notes[0] = NOTE.replace("samples/s", rate.header)
    per_row = tokens.labels_rows("throughput", models)
    if per_row:
        at = 4 + len(var.fields) + with_nodes
        columns = (*columns[:at], Column(tokens.UNIT_COLUMN, "unit", Role.KEY), *columns[at:])
    if (lm_note := tokens.note(models)) is not None:
        notes.append(lm_note)
    return Table(title=title, columns=columns,
                 rows=tuple(_row(r, var, with_nodes, per_row) for r in rows),
                 notes=tuple(notes), comment=title, caption=lines,
                 meta={**meta, "title": title, "identity": var.as_json()})


def campaigns_scaling_table(db: sqlite_utils.Database,
                            camps: Sequence[queries.CampaignRow]) -> Table:
    """The scaling table of resolved campaigns, with its environment caption."""
    rows = scaling_rows(db, [c.id for c in camps])
    constants = identity.variation(placed_identities(rows)).caption()
    return scaling_table(rows, caption.title(camps, "scaling", created=False),
                         caption.context(db, camps, constants))
