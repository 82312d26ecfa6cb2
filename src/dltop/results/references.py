"""Performance references checked against results: ``dltop check`` and the summary's
``reference`` column (docs/cluster.md#performance-references).

Each configuration's references were resolved when its profile was loaded and stored in
its jobs' specs (``JobSpec.references``), so a check reads what the campaign was run
against. A metric is judged by its measured 95 % interval, not its point: the check
**fails only when the whole interval lies outside the band** ``reference x (1 + lower)``
to ``reference x (1 + upper)``. An interval that reaches the band is not shown to
miss it. Without an interval (a run of one iteration) the point value is judged; a
configuration with a reference but no ``ok`` run fails (nothing was measured).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dltop.profiles.jobspec import JobSpec
from dltop.profiles.references import METRICS, Reference
from dltop.results import identity, idread, queries
from dltop.results.aggregate import ConfigResult
from dltop.results.table import Cell, Column, Role, Row, Table, fmt_seconds, key_cell
from dltop.store.read import jobs
from dltop.telemetry.values import finite_float

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils

PASS, FAIL, NONE = "pass", "fail", "no reference"
NOTE = ("reference: the configuration against its performance references (dltop check): "
        "pass, fail (the metric's whole 95 % interval below or above the band), - none.")


@dataclass(frozen=True)
class Verdict:
    """One metric of one configuration against its reference (``ref`` None: it has none)."""

    result: ConfigResult
    ref: Reference | None
    measured: float | None = None
    interval: tuple[float, float] | None = None
    outcome: str = NONE
    """``pass``, ``fail`` or ``no reference``."""
    why: str = ""
    """For a failure: ``below``, ``above``, or why nothing was measured."""


def bare_key(ident: Mapping[str, Any]) -> str:
    return idread.key({k: v for k, v in ident.items()
                         if k not in (idread.INTERPRETER, identity.PLACE)})


def stored_references(db: sqlite_utils.Database, campaign_ids: Sequence[int],
                      ) -> dict[str, tuple[Reference, ...]]:
    """Each configuration's references (by its identity without the interpreter), read
    from one stored spec per configuration (``job_configs``: no job row read), parsed only
    where it holds one; configurations without any are left out."""
    out: dict[str, tuple[Reference, ...]] = {}
    for spec_json in jobs.reference_specs(db, campaign_ids):
        spec = JobSpec.from_json_dict(json.loads(spec_json))
        if spec.references:
            out[bare_key(idread.identity_of(spec_json, None))] = spec.references
    return out


def judge(res: ConfigResult, ref: Reference,
          time_interval: tuple[float, float] | None) -> Verdict:
    """``res``'s metric against ``ref``; ``time_interval`` is its median s/iter's 95 % CI."""
    if not all(math.isfinite(x) for x in (ref.value, ref.lower, ref.upper)):
        # stored before the loader refused them: judged by nothing, said so
        return Verdict(res, ref, outcome=FAIL, why="the reference is not finite: "
                       f"[{ref.value}, {ref.lower}, {ref.upper}]")
    if not res.runs or res.median_s is None:
        return Verdict(res, ref, outcome=FAIL, why=f"no ok run: {res.label}")
    if ref.metric == "s_per_iter":
        measured, interval = res.median_s, time_interval
    else:
        # The summary's samples/s (total samples / total seconds, median over runs): one
        # figure, one value in every command (docs/metrics.md). Its interval is the
        # median's, scaled: the same relative run-to-run spread around it.
        rate = res.samples_per_s
        if rate is None:
            return Verdict(res, ref, outcome=FAIL, why="no samples/s measured")
        measured, interval = rate, None if time_interval is None else (
            rate * res.median_s / time_interval[1], rate * res.median_s / time_interval[0])
    low, high = interval if interval is not None else (measured, measured)
    band_low, band_high = ref.band
    if high < band_low:
        return Verdict(res, ref, measured, interval, FAIL, "below")
    if low > band_high:
        return Verdict(res, ref, measured, interval, FAIL, "above")
    return Verdict(res, ref, measured, interval, PASS)


def verdicts(results: Sequence[ConfigResult], refs: Mapping[str, tuple[Reference, ...]],
             cis: Sequence[tuple[tuple[float, float] | None, str]]) -> list[Verdict]:
    """:func:`dltop.results.checks.check` over configurations whose references and
    intervals are known."""
    out: list[Verdict] = []
    for res, (interval, _) in zip(results, cis, strict=True):
        own = refs.get(bare_key(res.identity), ())
        if not own:
            out.append(Verdict(res, None))
        out.extend(judge(res, ref, interval) for ref in own)
    return out


def cell_text(verdicts: Sequence[Verdict]) -> str:
    """A configuration's summary cell: ``pass``, ``fail (tokens_per_s below)`` or ``-``."""
    judged = [v for v in verdicts if v.ref is not None]
    if not judged:
        return "-"
    failed = [f"{v.ref.metric} {v.why}" if v.why in ("below", "above") else v.why
              for v in judged if v.outcome == FAIL and v.ref]
    return f"fail ({'; '.join(dict.fromkeys(failed))})" if failed else PASS


def by_config(verdicts: Sequence[Verdict]) -> dict[str, list[Verdict]]:
    """Verdicts grouped by their configuration's ``config_key``."""
    out: dict[str, list[Verdict]] = {}
    for v in verdicts:
        out.setdefault(v.result.config_key, []).append(v)
    return out


def _num(x: float | None) -> str:
    return "" if x is None else fmt_seconds(x)  # 0.2200, as the summary prints it


def check_table(verdicts: Sequence[Verdict], camps: Sequence[queries.CampaignRow],
                db: sqlite_utils.Database | None = None) -> Table:
    """The verdicts as a table (md, csv, json): one row per configuration and metric.

    With ``db``, the caption states the environment and JSON the campaigns, as every
    export does (a CI job's JSON said ``"campaigns": []``).
    """
    cols = (Column("model", "model", Role.KEY), Column("framework", "framework", Role.KEY),
            Column("batch", "batch", Role.KEY), Column("device", "device", Role.KEY),
            Column("precision", "precision", Role.KEY, setting=True),
            Column("system", "system", Role.KEY, setting=True),
            Column("metric", "metric", Role.KEY),
            Column("measured", "measured", Role.VALUE),
            Column("ci_low", "CI95 low", Role.VALUE), Column("ci_high", "CI95 high", Role.VALUE),
            Column("reference", "reference", Role.VALUE),
            Column("tolerance", "tolerance", Role.KEY), Column("result", "result", Role.KEY))
    rows = []
    for v in verdicts:
        r, ref = v.result, v.ref
        low, high = v.interval if v.interval is not None else (None, None)
        # JSON has no NaN or infinity: the row's result says why a cell is empty
        measured, low, high = finite_float(v.measured), finite_float(low), finite_float(high)
        value = None if ref is None else finite_float(ref.value)
        tol = "" if ref is None or not math.isfinite(ref.lower + ref.upper) else \
            f"{ref.lower:+.0%} / {ref.upper:+.0%}"
        result = v.outcome if not v.why else f"{v.outcome} ({v.why})"
        rows.append(Row((
            key_cell(r.model), key_cell(r.framework), key_cell(r.batch_size),
            key_cell(r.device), key_cell(str(r.identity.get("precision", ""))),
            key_cell(str(r.identity.get(idread.SYSTEM) or "-")),
            key_cell("" if ref is None else f"{ref.metric} ({METRICS[ref.metric]})"),
            Cell(_num(measured), measured), Cell(_num(low), low), Cell(_num(high), high),
            Cell(_num(value), value),
            key_cell(tol), key_cell(result)),
            {"pattern": None if ref is None else ref.pattern}))
    names = ", ".join(f"{c.id} {c.name}" for c in camps)
    lines: tuple[str, ...] = ()
    meta: dict[str, Any] = {}
    if db is not None:
        from dltop.results import caption

        lines, meta = caption.context(db, camps)
    return Table(title=f"References of campaign {names}", columns=cols, rows=tuple(rows),
                 caption=lines, meta=meta,
                 notes=("measured: the median s/iter, or the summary's samples/s (total "
                        "samples / total seconds); CI95: the median's 95 % bootstrap interval "
                        "across repeats, for samples/s scaled by median / its bounds (one "
                        "run: none, the value alone is judged; docs/metrics.md, statistics "
                        "policy). A metric fails only when the whole interval is outside "
                        "reference x (1 + tolerance).",))
