"""``dltop compare A B``: per configuration, B/A of a metric with a confidence interval.

Configurations are paired by identity (:mod:`dltop.results.identity`: every
setting of the profile that can change the measurement) without the
interpreter, since the environment (another venv, framework version or host) is
what a comparison usually measures; a campaign that ran one configuration under
two interpreters keeps them apart by it. The rows show model, framework, batch,
device, precision and any other identity field that varies. For each
pair the ratio B/A of the median (``time``: median over runs of each run's
median s/iter; ``throughput``: median over runs of total samples / total
seconds) comes with a 95 % interval from a seeded two-level bootstrap of both
sides' measured iterations (:mod:`dltop.results.bootstrap`). As in pyperf's
``compare_to`` and asv's ``compare``, a change is called only when it is both
statistically and practically significant: the interval excludes 1 *and* the
ratio differs from 1 by more than the threshold. Otherwise the verdict is
``no significant change``.

A pair where either side is flagged (noisy, packed, shared, contaminated or
simulated: :func:`dltop.results.summary.flags`) is ``inconclusive``: its ratio and
interval are shown, but a flagged measurement cannot gate a change, so
``--fail-on-regression`` ignores it. ``allow_flagged`` gives such pairs their
verdict anyway (the flags stay in the table).

Either side may be several campaigns (``3,5``, ``all``, a name: see
:func:`dltop.results.queries.resolve_campaigns`); their configurations merge as
in an export (same identity on the same host and GPU model).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dltop import catalog
from dltop.errors import UserError
from dltop.results import bootstrap, caption, identity, queries, tokens
from dltop.results.aggregate import ConfigResult, config_results, device_key, rank
from dltop.results.table import Cell, Column, Role, Row, Table, key_cell

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils

METRICS = ("time", "throughput")
FASTER, SLOWER, SAME = "faster", "slower", "no significant change"
INCONCLUSIVE = "inconclusive"
GATING_FLAGS = ("noisy", "packed", "shared", "contaminated", "simulated")
"""The flags that make a pair inconclusive (``incomplete`` does not: fewer repeats
widen the interval, which the verdict already accounts for)."""


@dataclass(frozen=True)
class Comparison:
    """One configuration of A and/or B."""

    label: tuple[Any, ...]
    """(model, framework, batch, device, then the identity's row keys: precision)."""
    config_key: str
    verdict: str
    """``faster``, ``slower``, ``no significant change``, ``only in A``, ``only in B``,
    or ``not comparable: ...`` (a side without an ok run with iterations)."""
    a: float | None = None
    b: float | None = None
    ratio: float | None = None
    """B/A of the metric."""
    ci_low: float | None = None
    ci_high: float | None = None
    identity: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The identity the two sides were paired by (flat; see :func:`pairing`)."""
    flags_a: tuple[str, ...] = ()
    """A's flags (:func:`dltop.results.summary.flags`), empty when A has no such side."""
    flags_b: tuple[str, ...] = ()
    flagged_verdict: str | None = None
    """For an ``inconclusive`` pair: the verdict its numbers alone would give."""

    @property
    def regression(self) -> bool:
        """B is significantly slower than A, and neither side is flagged (or flags
        were allowed)."""
        return self.verdict == SLOWER

    @property
    def inconclusive(self) -> bool:
        """A flagged side keeps the pair from a verdict."""
        return self.verdict == INCONCLUSIVE


def _label(r: ConfigResult) -> tuple[Any, ...]:
    return (r.model, r.framework, r.batch_size, r.device,
            *(r.identity.get(name) for name in identity.ROW_KEYS))


def _sides(r: ConfigResult | None) -> list[list[tuple[float, int]]] | None:
    if r is None or not r.runs or any(not x.iterations for x in r.runs):
        return None
    if any(not math.isfinite(s) for x in r.runs for s, _ in x.iterations):
        return None  # an old database's infinite time: no interval (bootstrap refuses it)
    return [list(x.iterations) for x in r.runs]


def verdict(ratio: float, low: float, high: float, metric: str, threshold: float) -> str:
    """``faster``, ``slower`` or ``no significant change`` for B/A of ``metric``."""
    if low <= 1.0 <= high or abs(ratio - 1.0) <= threshold:
        return SAME
    higher_is_better = metric == "throughput"
    return FASTER if (ratio > 1.0) == higher_is_better else SLOWER


def bare(r: ConfigResult) -> dict[str, Any]:
    """A configuration's identity without the interpreter."""
    return {k: v for k, v in r.identity.items() if k != identity.INTERPRETER}


def bare_key(r: ConfigResult) -> str:
    """:func:`dltop.results.identity.key` of :func:`bare`."""
    return identity.key(bare(r))


def pairing(results: list[ConfigResult], placed: frozenset[str] = frozenset(),
            ) -> dict[str, tuple[dict[str, Any], ConfigResult]]:
    """A side's configurations by the identity they pair by: their identity without
    the interpreter, or with it where two configurations differ only by it; with the
    host and GPU model too for identities in ``placed`` (:func:`bare_key` s that occur
    on several hosts or GPU models of one side)."""
    def where(r: ConfigResult) -> dict[str, Any]:
        return {"host": r.host, "gpu": r.gpu_name} if bare_key(r) in placed else {}

    count = Counter(identity.key({**bare(r), **where(r)}) for r in results)
    out: dict[str, tuple[dict[str, Any], ConfigResult]] = {}
    for r in results:
        ident = bare(r) if count[identity.key({**bare(r), **where(r)})] == 1 \
            else dict(r.identity)
        ident.update(where(r))
        out[identity.key(ident)] = (ident, r)
    return out


def side_flags(r: ConfigResult | None) -> tuple[str, ...]:
    """A side's flags (:func:`dltop.results.summary.flags`) that gate a verdict."""
    from dltop.results.summary import flags

    return () if r is None else tuple(f for f in flags(r) if f in GATING_FLAGS)


def _compare_one(a: ConfigResult | None, b: ConfigResult | None, metric: str,
                 threshold: float, pair_identity: dict[str, Any],
                 allow_flagged: bool = False) -> Comparison:
    some = a or b
    assert some is not None
    label, ident = _label(some), pair_identity
    key = identity.key(ident)
    fa, fb = side_flags(a), side_flags(b)
    if a is None or b is None:
        return Comparison(label, key, "only in B" if a is None else "only in A",
                          identity=ident, flags_a=fa, flags_b=fb)
    sa, sb = _sides(a), _sides(b)
    if sa is None or sb is None:
        missing = a if sa is None else b
        side = "A" if sa is None else "B"
        return Comparison(label, key,
                          f"not comparable: {side} {missing.label}",
                          identity=ident, flags_a=fa, flags_b=fb)
    stat = bootstrap.STATS[metric]
    ratio, low, high = bootstrap.ratio_ci(sa, sb, stat)
    said = verdict(ratio, low, high, metric, threshold)
    gated = bool(fa or fb) and not allow_flagged
    return Comparison(label, key, INCONCLUSIVE if gated else said,
                      bootstrap.estimate(sa, stat), bootstrap.estimate(sb, stat),
                      ratio, low, high, ident, fa, fb, said if gated else None)


def compare(db: sqlite_utils.Database, a_id: int | Sequence[int], b_id: int | Sequence[int],
            metric: str = "time", threshold: float = 0.05,
            allow_flagged: bool = False) -> list[Comparison]:
    """Every configuration of campaign(s) ``a_id`` and ``b_id``, paired by identity.

    A pair with a flagged side is ``inconclusive`` unless ``allow_flagged``.

    Raises:
        UserError: an unknown metric, a negative threshold, or no configuration in common.
    """
    if metric not in METRICS:
        raise UserError(f"compare --metric: use one of {', '.join(METRICS)}")
    if threshold < 0:
        raise UserError("compare --threshold must be >= 0 (e.g. 0.05 for 5 %)")
    ra, rb = config_results(db, a_id), config_results(db, b_id)
    # an identity on several hosts or GPU models of one side pairs place by place; one
    # place per side (A on one host, B on another) pairs across them
    placed: set[str] = set()
    for side in (ra, rb):
        places: dict[str, set[tuple[str, str]]] = {}
        for r in side:
            places.setdefault(bare_key(r), set()).add(r.place)
        placed |= {k for k, where in places.items() if len(where) > 1}
    a, b = pairing(ra, frozenset(placed)), pairing(rb, frozenset(placed))
    if not a.keys() & b.keys():
        raise UserError(f"campaigns {_ids(a_id)} and {_ids(b_id)} have no configuration "
                        "in common")
    out = [_compare_one(a[k][1] if k in a else None, b[k][1] if k in b else None, metric,
                        threshold, (a.get(k) or b[k])[0], allow_flagged)
           for k in {**a, **b}]
    out.sort(key=lambda c: (rank(c.label[0], catalog.MODELS),
                            rank(c.label[1], catalog.FRAMEWORKS), c.label[2],
                            device_key(c.label[3]),
                            *(identity.sort_value(v) for v in c.label[4:]), c.config_key))
    return out


def _verdict_text(c: Comparison) -> str:
    return f"{c.verdict} ({c.flagged_verdict})" if c.flagged_verdict else c.verdict


def _ids(ids: int | Sequence[int]) -> str:
    return str(ids) if isinstance(ids, int) else ",".join(str(i) for i in ids)


def _side(camps: queries.CampaignRow | Sequence[queries.CampaignRow]) -> list[queries.CampaignRow]:
    return [camps] if isinstance(camps, queries.CampaignRow) else list(camps)


def _num(value: float | None, text: str) -> Cell:
    return Cell(text if value is not None else "", value)


def compare_table(rows: list[Comparison],
                  a: queries.CampaignRow | Sequence[queries.CampaignRow],
                  b: queries.CampaignRow | Sequence[queries.CampaignRow],
                  metric: str, threshold: float,
                  db: sqlite_utils.Database | None = None) -> Table:
    """The comparison as a :class:`Table` (md, csv, json, latex alike).

    With ``db``, the caption states the environment of both sides' campaigns.
    """
    side_a, side_b = _side(a), _side(b)
    models = [c.label[0] for c in rows]
    # throughput of transformer rows is tokens/s (results/tokens.py): per row if mixed
    unit = "s" if metric == "time" else tokens.metric_for("throughput", models).unit
    per_row = metric != "time" and tokens.labels_rows("throughput", models)
    fmt = "{:.4g}" if metric == "time" else "{:.1f}"
    var = identity.variation(c.identity for c in rows)
    row_var = var.without(*identity.ROW_KEYS)
    unit_col = (Column(tokens.UNIT_COLUMN, "unit", Role.KEY),) if per_row else ()
    cols = (Column("model", "model", Role.KEY), Column("framework", "framework", Role.KEY),
            Column("batch", "batch", Role.KEY), Column("device", "device", Role.KEY),
            *(Column(name, identity.header(name), Role.KEY) for name in identity.ROW_KEYS),
            *row_var.columns(), *unit_col,
            Column("a", f"A {unit}", Role.VALUE, unit),
            Column("b", f"B {unit}", Role.VALUE, unit),
            Column("ratio", "B/A", Role.VALUE, "1"),
            Column("ci_low", "CI95 low", Role.VALUE, "1"),
            Column("ci_high", "CI95 high", Role.VALUE, "1"),
            Column("flags_a", "A flags", Role.KEY), Column("flags_b", "B flags", Role.KEY),
            Column("verdict", "verdict", Role.KEY))
    table_rows = []
    for c in rows:
        m, f, batch, dev, *keyed = c.label
        table_rows.append(Row((
            key_cell(m), key_cell(f), key_cell(batch), key_cell(dev),
            *identity.value_cells(keyed),
            *row_var.cells(c.identity),
            *((key_cell(tokens.row_unit("throughput", m)),) if per_row else ()),
            _num(c.a, fmt.format(c.a or 0.0)), _num(c.b, fmt.format(c.b or 0.0)),
            _num(c.ratio, f"{c.ratio or 0.0:.3f}"), _num(c.ci_low, f"{c.ci_low or 0.0:.3f}"),
            _num(c.ci_high, f"{c.ci_high or 0.0:.3f}"),
            key_cell(", ".join(c.flags_a)), key_cell(", ".join(c.flags_b)),
            Cell(_verdict_text(c))),
            {"identity": dict(c.identity),
             "flags": {"a": list(c.flags_a), "b": list(c.flags_b)},
             "unflagged_verdict": c.flagged_verdict}))
    what = "median s/iter" if metric == "time" else \
        ("throughput" if per_row else unit)
    notes: tuple[str, ...] = (
        f"B/A of the {what} (median over runs); CI95: 2000-resample seeded two-level "
        "bootstrap of both campaigns' measured iterations. A change is called when "
        f"the interval excludes 1 and B/A differs from 1 by more than {threshold:.0%}.",
        *(("inconclusive: A or B is flagged (noisy, packed, shared, contaminated, "
           "simulated), so no change is called (the numbers' own verdict in brackets); "
           "--allow-flagged calls it anyway.",) if any(c.inconclusive for c in rows)
          else ()))
    constants = var.caption()
    camps = list({c.id: c for c in (*side_a, *side_b)}.values())
    lines, meta = caption.context(db, camps, constants) if db is not None else \
        ((constants,) if constants else (), {})

    def names(side: list[queries.CampaignRow]) -> str:
        return ", ".join(f"{c.id} `{c.name}`" for c in side)

    def refs(side: list[queries.CampaignRow]) -> dict[str, Any] | list[dict[str, Any]]:
        out = [{"id": c.id, "name": c.name} for c in side]
        return out[0] if len(out) == 1 else out

    return Table(
        title=f"Compare A = campaign{'s' if len(side_a) > 1 else ''} {names(side_a)} with "
              f"B = campaign{'s' if len(side_b) > 1 else ''} {names(side_b)}: {what}",
        columns=cols, rows=tuple(table_rows), notes=notes, caption=lines,
        meta={**meta, "a": refs(side_a), "b": refs(side_b),
              "metric": metric, "unit": unit, "threshold": threshold,
              "identity": var.as_json()})
