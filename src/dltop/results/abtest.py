"""``dltop compare CAMPAIGN --by SETTING``: one setting's effect inside a campaign (issue 40).

Configurations of the campaign that differ only in ``SETTING`` (every other identity
field equal: :mod:`dltop.results.identity`; the host and GPU model too where the
campaign spans several) are paired: the baseline value (the first value in queue
order, or ``--baseline``) is A, each other value B. Every pair gets, for time,
throughput, energy per sample (per token for a transformer), MFU, TTFT and TPOT
(those it has), B/A with its interval and verdict from the same machinery as
``compare A B`` (:func:`dltop.results.compare.compare_pair`): intervals across
repeats, a single run inconclusive unless ``--within-run``, flagged sides
inconclusive unless ``--allow-flagged``.

A setting that does not vary in the campaign, or that never varies alone (each
configuration with another value differs in some other setting too), is refused with
the settings that do vary.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dltop import catalog
from dltop.errors import UserError
from dltop.profiles import fields as declared
from dltop.profiles.jobspec import JobSpec
from dltop.results import (
    caption,
    compare,
    comparemetrics,
    comparetable,
    identity,
    idread,
    queries,
    tokens,
)
from dltop.results.aggregate import ConfigResult, config_results
from dltop.results.metrics import value_of
from dltop.results.places import device_key, rank
from dltop.results.table import Cell, Column, Role, Row, Table, key_cell

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils

LABEL_FIELDS = ("model", "framework", "batch_size", "device", *identity.ROW_KEYS)
"""The identity fields behind :attr:`dltop.results.compare.Comparison.label`, in order."""
_ALIASES = {"batch": "batch_size", "batch_sizes": "batch_size", "devices": "device",
            "frameworks": "framework", "models": "model"}


def setting_name(given: str) -> str:
    """The identity field ``--by`` names: a field's name, its profile key (``compile``),
    its column header, or ``batch``; an option key as it is."""
    text = given.strip().lower().replace("-", "_")
    names = {f.name: f.name for f in dataclasses.fields(JobSpec)}
    for f in dataclasses.fields(JobSpec):
        for alias in (f.metadata.get(declared.KEY), f.metadata.get(declared.HEADER)):
            if alias:
                names.setdefault(str(alias).lower().replace(" ", "_"), f.name)
    return _ALIASES.get(text) or names.get(text) or text


@dataclass(frozen=True)
class Pair:
    """One metric of one pair: the baseline value against another."""

    a_value: Any
    b_value: Any
    comparison: compare.Comparison


@dataclass(frozen=True)
class ByResult:
    """``compare --by``: the setting, its values, and every pair's comparisons."""

    setting: str
    baseline: Any
    values: tuple[Any, ...]
    pairs: tuple[Pair, ...]
    unpaired: int
    """Configurations with another value whose group has no baseline to pair with."""


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def by_setting(db: sqlite_utils.Database, campaign_ids: Sequence[int], given: str,
               baseline: str | None = None, metrics: Sequence[str] = comparemetrics.METRICS,
               threshold: float = 0.05, allow_flagged: bool = False,
               within_run: bool = False) -> ByResult:
    """Pairs of configurations of ``campaign_ids`` that differ only in setting ``given``.

    Raises:
        UserError: a negative threshold or unknown metric; a setting that does not vary,
            or never varies alone (both naming the settings that vary); a baseline that
            is not one of its values.
    """
    for m in metrics:
        compare.check_options(m, threshold)
    name = setting_name(given)
    results = config_results(db, list(campaign_ids))
    paired = list(compare.pairing(results, compare.placed_keys(results)).values())
    idents = [ident for ident, _ in paired]
    names = sorted({n for ident in idents for n in ident} - {idread.INTERPRETER})
    varying = [n for n in names if len({_text(i.get(n)) for i in idents}) > 1]
    where = f"campaign{'s' if len(campaign_ids) > 1 else ''} " + \
        ",".join(str(c) for c in campaign_ids)
    listed = ", ".join(varying) or "none"
    if name not in varying:
        raise UserError(f"compare --by {given}: {name} does not vary in {where}; the "
                        f"settings that vary: {listed}")
    values: list[Any] = []
    groups: dict[str, dict[str, tuple[dict[str, Any], ConfigResult]]] = {}
    for ident, r in paired:
        value = ident.get(name)
        if _text(value) not in map(_text, values):
            values.append(value)
        rest = {k: v for k, v in ident.items() if k != name}
        groups.setdefault(idread.key(rest), {})[_text(value)] = (rest, r)
    alone = [g for g in groups.values() if len(g) > 1]
    if not alone:
        raise UserError(f"compare --by {given}: {name} never varies alone in {where} (every "
                        f"configuration with another {name} differs in "
                        f"{_co_varying(idents, name, varying)} too); the settings that vary: "
                        f"{listed}")
    base = _default(name, values) if baseline is None else \
        _baseline(given, name, baseline, values)
    pairs: list[Pair] = []
    unpaired = 0
    for group in alone:
        if _text(base) not in group:
            unpaired += len(group)
            continue
        rest, a = group[_text(base)]
        for value in values:
            if _text(value) == _text(base) or _text(value) not in group:
                continue
            b = group[_text(value)][1]
            for m in metrics:
                if len(metrics) > 1 and not _either_has(a, b, m):
                    continue
                pairs.append(Pair(base, value, compare.compare_pair(
                    a, b, m, threshold, rest, allow_flagged, within_run)))
    if not pairs:
        raise UserError(f"compare --by {given} --baseline {baseline}: no configuration with "
                        f"{name} = {identity.fmt_value(base)} has a partner that differs "
                        "only in it")
    order = {_text(v): i for i, v in enumerate(values)}
    pairs.sort(key=lambda p: (
        rank(p.comparison.label[0], catalog.MODELS), rank(p.comparison.label[1],
                                                          catalog.FRAMEWORKS),
        p.comparison.label[2], device_key(p.comparison.label[3]),
        *(identity.sort_value(v) for v in p.comparison.label[4:]), p.comparison.config_key,
        order[_text(p.b_value)], comparemetrics.ALL.index(p.comparison.metric)))
    return ByResult(name, base, tuple(values), tuple(pairs), unpaired)


def _either_has(a: ConfigResult, b: ConfigResult, metric: str) -> bool:
    if metric in ("time", "throughput"):
        return True
    return value_of(a, metric).value is not None or value_of(b, metric).value is not None


def _default(name: str, values: Sequence[Any]) -> Any:
    """The baseline without ``--baseline``: the setting's default (what a profile that
    does not name it runs: compile ``off``, CUDA graphs off, fp32) where the campaign
    has it, else its first value in queue order."""
    for f in dataclasses.fields(JobSpec):
        if f.name == name and f.default is not dataclasses.MISSING \
                and _text(f.default) in map(_text, values):
            return f.default
    return values[0]


def _baseline(given: str, name: str, baseline: str, values: Sequence[Any]) -> Any:
    for v in values:
        if baseline.strip().lower() in (identity.fmt_value(v).lower(), _text(v).lower()):
            return v
    raise UserError(f"compare --by {given} --baseline {baseline}: not a value of {name} in "
                    f"the campaign; its values: "
                    f"{', '.join(identity.fmt_value(v) for v in values)}")


def _co_varying(idents: Sequence[dict[str, Any]], name: str, varying: Sequence[str]) -> str:
    """The settings that differ in every pair of configurations with different ``name``
    (else every setting that differs in some such pair)."""
    always: set[str] | None = None
    some: set[str] = set()
    for i, x in enumerate(idents):
        for y in idents[i + 1:]:
            if _text(x.get(name)) == _text(y.get(name)):
                continue
            diff = {n for n in varying if n != name and _text(x.get(n)) != _text(y.get(n))}
            some |= diff
            always = diff if always is None else always & diff
    return ", ".join(sorted(always or some)) or "another setting"


def by_table(res: ByResult, camps: Sequence[queries.CampaignRow], threshold: float,
             db: sqlite_utils.Database | None = None) -> Table:
    """``compare --by`` as a :class:`Table`: one row per pair and metric."""
    rows = [p.comparison for p in res.pairs]
    head = identity.header(res.setting)
    # a base key (framework, model, batch, device) is never a variation's field, but the
    # variation reads it (interpreters are stated per framework): A's value stands in
    keyed = res.setting in (*identity.BASE, identity.COLUMN)
    var = identity.variation({**p.comparison.identity, res.setting: p.a_value} if keyed
                             else p.comparison.identity for p in res.pairs)
    row_var = var.without(*identity.ROW_KEYS)
    keep = [i for i, f in enumerate(LABEL_FIELDS) if f != res.setting]
    labels = ("model", "framework", "batch", "device", *identity.ROW_KEYS)
    cols = (*(Column(labels[i], identity.header(labels[i]) if i > 3 else labels[i], Role.KEY,
                     setting=i > 3) for i in keep),
            *row_var.columns(),
            Column("a_setting", f"A {head}", Role.KEY), Column("b_setting", f"B {head}",
                                                                Role.KEY),
            Column("metric", "metric", Role.KEY), Column("unit", "unit", Role.KEY),
            Column("a", "A", Role.VALUE), Column("b", "B", Role.VALUE),
            Column("ratio", "B/A", Role.VALUE, "1"),
            Column("ci_low", "CI95 low", Role.VALUE, "1"),
            Column("ci_high", "CI95 high", Role.VALUE, "1"),
            Column("runs", "runs A/B", Role.KEY),
            Column("flags_a", "A flags", Role.KEY), Column("flags_b", "B flags", Role.KEY),
            Column("verdict", "verdict", Role.KEY))
    table_rows = []
    for p in res.pairs:
        c = p.comparison
        m = tokens.metric_for(c.metric, (c.label[0],))
        table_rows.append(Row((
            *(key_cell(c.label[i]) if i < 4 else identity.value_cells([c.label[i]])[0]
              for i in keep),
            *row_var.cells(c.identity),
            *identity.value_cells([p.a_value, p.b_value]), key_cell(c.metric),
            key_cell(m.unit),
            Cell(m.fmt(c.a) if c.a is not None else "", c.a),
            Cell(m.fmt(c.b) if c.b is not None else "", c.b),
            Cell(f"{c.ratio:.3f}" if c.ratio is not None else "", c.ratio),
            *comparetable.ci_cells(c),
            key_cell(f"{c.runs_a}/{c.runs_b}" if c.runs_a or c.runs_b else ""),
            key_cell(", ".join(c.flags_a)), key_cell(", ".join(c.flags_b)),
            Cell(comparetable.verdict_text(c))),
            {**comparetable.row_extra(c), "a_setting": p.a_value, "b_setting": p.b_value}))
    shown = identity.fmt_value(res.baseline)
    notes = (
        f"Pairs: configurations that differ only in {head}; A = {head} {shown} (the "
        "baseline: --baseline, else the setting's default if present, else the first "
        "value in queue order), B = each other "
        f"value (its values: {', '.join(identity.fmt_value(v) for v in res.values)}). Per "
        "metric, B/A "
        "of the median over runs (time: of each run's median s/iter; throughput: total "
        "samples / total seconds; energy: J per sample or token; TTFT, TPOT: each run's "
        "median request).",
        *comparetable.notes(rows, threshold),
        *((f"{res.unpaired} configuration(s) have no {head} = {shown} partner: not "
           "shown.",) if res.unpaired else ()))
    constants = var.caption()
    lines, meta = caption.context(db, camps, constants) if db is not None else \
        ((constants,) if constants else (), {})
    names = ", ".join(f"{c.id} `{c.name}`" for c in camps)
    return Table(
        title=f"Compare by {head} in campaign{'s' if len(camps) > 1 else ''} {names}: B/A "
              f"against {head} = {shown}",
        columns=cols, rows=tuple(table_rows), notes=notes, caption=lines,
        meta={**meta, "by": res.setting, "baseline": res.baseline,
              "values": list(res.values), "threshold": threshold,
              "identity": var.as_json()})
