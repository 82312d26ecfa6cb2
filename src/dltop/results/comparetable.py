"""``dltop compare A B``'s table: one row per configuration pair (:mod:`dltop.results.compare`
computes the pairs), its verdict, interval and flags cells, its notes and caption; the
cells and notes ``compare CAMPAIGN --by SETTING`` (:mod:`dltop.results.abtest`) shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dltop.results import caption, identity, queries, tokens
from dltop.results.compare import INCONCLUSIVE, ONE_RUN, WITHIN, Comparison
from dltop.results.table import (
    Cell,
    Column,
    Millis,
    Role,
    Row,
    Table,
    fmt_seconds,
    key_cell,
    pick_columns,
)

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils


def verdict_text(c: Comparison) -> str:
    """The verdict cell: ``inconclusive (slower)`` for a flagged pair, ``inconclusive:
    one run``, ``slower (within-run)`` for an interval of one run's samples."""
    if c.flagged_verdict:
        return f"{c.verdict} ({c.flagged_verdict})"
    if c.why == ONE_RUN:
        return f"{INCONCLUSIVE}: {ONE_RUN}"
    return f"{c.verdict} ({WITHIN})" if c.interval == WITHIN else c.verdict


def ci_cells(c: Comparison) -> tuple[Cell, Cell]:
    """The interval's two cells; ``n/a: one run`` where a single run gave none."""
    if c.why == ONE_RUN:
        return Cell(f"n/a: {ONE_RUN}"), Cell(f"n/a: {ONE_RUN}")
    return _num(c.ci_low, f"{c.ci_low or 0.0:.3f}"), _num(c.ci_high, f"{c.ci_high or 0.0:.3f}")


def notes(rows: Sequence[Comparison], threshold: float) -> tuple[str, ...]:
    """The notes under a comparison: how the interval is made, and what the inconclusive
    and within-run rows mean."""
    return (
        "CI95: 2000-resample seeded two-level bootstrap across repeats (each side's runs "
        "drawn with replacement, then each drawn run's measured samples). A change is "
        f"called when the interval excludes 1 and B/A differs from 1 by more than "
        f"{threshold:.0%} (docs/metrics.md, statistics policy).",
        *(("inconclusive: A or B is flagged (noisy, packed, shared, contaminated, "
           "simulated), so no change is called (the numbers' own verdict in brackets); "
           "--allow-flagged calls it anyway.",) if any(c.why == "flagged" for c in rows)
          else ()),
        *(("inconclusive: one run: A or B has a single ok run, so there is no interval "
           "across repeats; --within-run gives one from that run's own samples, "
           "labelled (within-run).",) if any(c.why == ONE_RUN for c in rows) else ()),
        *(("(within-run): A or B has a single ok run; its interval resamples that run's "
           "samples only (--within-run): how precisely the run was measured, not where "
           "another run would land.",) if any(c.interval == WITHIN for c in rows) else ()))


def row_extra(c: Comparison) -> dict[str, Any]:
    """A row's JSON beyond its cells: the identity, the flags, the runs on each side and
    what the interval resamples."""
    return {"identity": dict(c.identity),
            "flags": {"a": list(c.flags_a), "b": list(c.flags_b)},
            "unflagged_verdict": c.flagged_verdict,
            "runs": {"a": c.runs_a, "b": c.runs_b}, "interval": c.interval or None}


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
    modes = identity.modes(c.identity for c in rows)
    unit = tokens.metric_for(metric, models, modes).unit
    per_row = tokens.labels_rows(metric, models)
    # 4 significant digits, trailing zeros kept (0.2320 beside 0.1611, not 0.232)
    fmt = "{:.1f}".format if metric == "throughput" else fmt_seconds
    var = identity.variation(c.identity for c in rows)
    row_var = var.without(*identity.ROW_KEYS)
    unit_col = (Column(tokens.UNIT_COLUMN, "unit", Role.KEY),) if per_row else ()
    # a token's latencies read in ms in Markdown and LaTeX, as in every other table
    ms = Millis.ALWAYS if metric in ("ttft", "tpot") else None
    cols = (Column("model", "model", Role.KEY), Column("framework", "framework", Role.KEY),
            Column("batch", "batch", Role.KEY), Column("device", "device", Role.KEY),
            *(Column(name, identity.header(name), Role.KEY, setting=True)
              for name in identity.ROW_KEYS),
            *row_var.columns(), *unit_col,
            Column("a", f"A {unit}", Role.VALUE, unit, ms=ms),
            Column("b", f"B {unit}", Role.VALUE, unit, ms=ms),
            Column("ratio", "B/A", Role.VALUE, "1"),
            Column("ci_low", "CI95 low", Role.VALUE, "1"),
            Column("ci_high", "CI95 high", Role.VALUE, "1"),
            Column("runs", "runs A/B", Role.KEY),  # the n behind each side, as --by shows
            Column("flags_a", "A flags", Role.KEY), Column("flags_b", "B flags", Role.KEY),
            Column("verdict", "verdict", Role.KEY))
    table_rows = []
    for c in rows:
        m, f, batch, dev, *keyed = c.label
        table_rows.append(Row((
            key_cell(m), key_cell(f), key_cell(batch), key_cell(dev),
            *identity.value_cells(keyed),
            *row_var.cells(c.identity),
            *((key_cell(tokens.row_unit(metric, m)),) if per_row else ()),
            _num(c.a, fmt(c.a or 0.0)), _num(c.b, fmt(c.b or 0.0)),
            _num(c.ratio, f"{c.ratio or 0.0:.3f}"), *ci_cells(c),
            key_cell(f"{c.runs_a}/{c.runs_b}" if c.runs_a or c.runs_b else ""),
            key_cell(", ".join(c.flags_a)), key_cell(", ".join(c.flags_b)),
            Cell(verdict_text(c))),
            row_extra(c)))
    what = {"time": "median e2e s/request" if modes == {"serve"} else "median s/iter",
            "mfu": "MFU (nanoGPT's FLOPs)",
            "mfu-no-embedding": "MFU (FLOPs without the embedding, torchtitan's)"
            }.get(metric) or \
        (metric if per_row or metric in ("ttft", "tpot") else unit)
    table_notes = (f"B/A of the {what} (median over runs).", *notes(rows, threshold))
    constants = var.caption()
    camps = list({c.id: c for c in (*side_a, *side_b)}.values())
    lines, meta = caption.context(db, camps, constants) if db is not None else \
        ((constants,) if constants else (), {})

    def names(side: list[queries.CampaignRow]) -> str:
        return ", ".join(f"{c.id} `{c.name}`" for c in side)

    def refs(side: list[queries.CampaignRow]) -> dict[str, Any] | list[dict[str, Any]]:
        # a study's campaign keeps its "ref" (FILE:ID) beside its id, as in every export
        out = [{k: v for k, v in c.as_json().items() if k in ("id", "ref", "name")}
               for c in side]
        return out[0] if len(out) == 1 else out

    table = Table(
        title=f"Compare A = campaign{'s' if len(side_a) > 1 else ''} {names(side_a)} with "
              f"B = campaign{'s' if len(side_b) > 1 else ''} {names(side_b)}: {what}",
        columns=cols, rows=tuple(table_rows), notes=table_notes, caption=lines,
        meta={**meta, "a": refs(side_a), "b": refs(side_b),
              "metric": metric, "unit": unit, "threshold": threshold,
              "identity": var.as_json()})
    other = identity.row_keys_of_other_modes(modes)
    return pick_columns(table, [c.key for c in cols if c.key not in other]) if other else table
