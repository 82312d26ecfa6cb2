"""The serving answer (``dltop export --table slo``): per serve configuration less its
``request_rate``, the highest rate tried that meets the SLOs, and its tokens per joule.

A configuration's **SLO attainment** at a rate is counted from its stored measured
requests (warm-up excluded) over its ok runs together: those that ended ok and met every
SLO given (:meth:`~dltop.results.serving.ServeRequest.meets`) / all of them, a failed
request a miss. It equals the goodput × the measured window / the measured requests of
a run. A rate **passes** when its attainment is at least the target and no run of it was
``client-bound`` or ``contaminated`` (their figures measure the client, or another
process). The **capacity** is the highest rate tried that passes with every lower rate
tried passing too: a pass above a failure is noise, not capacity, and the row says so.
Its figures are the ones of the configuration at that rate (:mod:`dltop.results.metrics`).
Configurations of different SLOs are different rows (the SLOs are part of the identity).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dltop import catalog
from dltop.errors import UserError
from dltop.results import caption, identity, queries
from dltop.results.aggregate import ConfigResult, config_results
from dltop.results.convergence import too_few
from dltop.results.metricdefs import metric as metric_spec
from dltop.results.metrics import value_of
from dltop.results.places import place_key, place_labeller, placed_identities, rank
from dltop.results.serving import SLO_KEYS, slos
from dltop.results.table import Cell, Column, Millis, Role, Row, Table, fmt_seconds, key_cell

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils

DEFAULT_ATTAINMENT = 0.9
"""The share of requests that must meet the SLOs (docs/metrics.md, "SLO capacity"): 0.9,
DistServe's and the goodput papers' attainment, which a sweep of a few hundred requests a
rate decides by tens of requests, where 0.99 is decided by one or two."""
RATE = "request_rate"
NOTE_RULE = ("Attainment: the measured requests of a rate's ok runs that ended ok and met "
             "every SLO given / all its measured requests (a failed request is a miss), "
             "counted from the stored requests (= goodput × window / measured requests). "
             "A rate passes at attainment ≥ {target:g} unless a run of it was client-bound "
             "or contaminated. Capacity: the highest rate tried that passes with every "
             "lower rate tried passing too; its req/s, out tok/s, TTFT/TPOT p99 and J per "
             "output token (net: less the idle power before the load) are those of that "
             "rate's runs.")
NOTE_SORT = ("Sorted by J per output token at the capacity (fewest first: the most tokens "
             "per joule) where energy is known, then by capacity (highest first).")


def rate_value(ident: Mapping[str, Any]) -> float | None:
    """A configuration's asked request rate (``inf`` for ``"inf"``); None if it has none."""
    value = ident.get(RATE)
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    return None


def rate_text(rate: float) -> str:
    """``4``, ``0.5``, ``inf``."""
    return "inf" if math.isinf(rate) else f"{rate:g}"


@dataclass(frozen=True)
class RatePoint:
    """One rate tried of a configuration: its measured requests, how many met the SLOs,
    and why it cannot pass whatever its attainment (empty: it may)."""

    rate_req_s: float
    result: ConfigResult
    measured: int
    met: int
    why_not: str
    unjudged: str = ""
    """Why no foreign process could have been seen (too few host readings in its window):
    its pass stands on an unchecked host; empty when judged or without telemetry."""

    @property
    def attainment(self) -> float | None:
        """Met / measured requests; None without a measured request."""
        return self.met / self.measured if self.measured else None

    def passes(self, target: float) -> bool:
        """Attainment at least ``target``, and nothing that keeps it from counting."""
        att = self.attainment
        return not self.why_not and att is not None and att >= target - 1e-12

    def text(self) -> str:
        """``4: 1.00 (8/8)``, ``10: client-bound 1.00 (8/8)``, ``20: crashed``."""
        att = self.attainment
        shown = f"{att:.2f} ({self.met}/{self.measured})" if att is not None else ""
        parts = [p for p in (self.why_not, shown) if p]
        return f"{rate_text(self.rate_req_s)}: {' '.join(parts) or 'no requests'}"


def point_of(res: ConfigResult, rate: float) -> RatePoint:
    """The rate point of one configuration (its ok runs' measured requests together)."""
    slo = slos(res.identity)
    reqs = [q for r in res.runs for q in r.serving]
    why = ("client-bound" if res.client_bound else "contaminated" if res.contaminated
           else "" if res.runs else res.label)
    short, detail = res.host_readings
    counted = dict(detail).get("readings") is not None  # None: no telemetry at all
    unjudged = short if short and counted and not res.contaminated else ""
    return RatePoint(rate, res, len(reqs), sum(q.meets(slo) for q in reqs), why, unjudged)


@dataclass(frozen=True)
class Answer:
    """A configuration's rates tried, in order, and the capacity they give."""

    points: tuple[RatePoint, ...]
    target: float
    capacity: RatePoint | None
    verdict: str
    """``20``, ``none: 4 fails (attainment 0.50)``, ``at least 500 (the highest tried)``,
    ``84.24 reached (asked inf, the highest tried)``."""
    note: str
    """Passes above a failure, and rates that could not count, said."""


def answer(points: Sequence[RatePoint], target: float) -> Answer:
    """The capacity of a configuration's rate points (any order) at attainment ``target``."""
    ordered = sorted(points, key=lambda p: p.rate_req_s)
    cap: RatePoint | None = None
    first_fail: RatePoint | None = None
    for p in ordered:
        if not p.passes(target):
            first_fail = p
            break
        cap = p
    notes = [f"{rate_text(p.rate_req_s)} {p.why_not}: not a pass" for p in ordered
             if p.why_not in ("client-bound", "contaminated")]
    if first_fail is not None:
        above = [rate_text(p.rate_req_s) for p in ordered
                 if p.rate_req_s > first_fail.rate_req_s and p.passes(target)]
        if above:
            notes.append(f"{', '.join(above)} {'passes' if len(above) == 1 else 'pass'} "
                         f"above the failure at {rate_text(first_fail.rate_req_s)}: "
                         "not capacity")
    if unjudged := [p for p in ordered if p.unjudged]:
        notes.append(f"{', '.join(rate_text(p.rate_req_s) for p in unjudged)}: "
                     f"contamination not judged ({unjudged[0].unjudged})")
    if cap is None:
        assert first_fail is not None  # an answer has a point
        att = first_fail.attainment
        why = ", ".join(w for w in (first_fail.why_not, f"attainment {att:.2f}"
                                    if att is not None else "") if w) or "no requests"
        verdict = f"none: {rate_text(first_fail.rate_req_s)} fails ({why})"
    elif first_fail is None and math.isinf(cap.rate_req_s):
        verdict = _reached(cap)
    elif first_fail is None:
        verdict = f"at least {rate_text(cap.rate_req_s)} (the highest tried)"
    else:
        verdict = rate_text(cap.rate_req_s)
    return Answer(tuple(ordered), target, cap, verdict, "; ".join(notes))


def _reached(cap: RatePoint) -> str:
    """``84.24 reached (asked inf, the highest tried)``: all at once, ``concurrency``
    permitting, passed; what the server then reached is the rate a reader can use, not
    "at least inf"."""
    got = value_of(cap.result, "req-rate").value
    if got is None:
        return "inf passes (the highest tried; the rate reached is not known)"
    return f"{metric_spec('req-rate').fmt(got)} reached (asked inf, the highest tried)"


def _group_key(res: ConfigResult) -> str:
    ident = {k: v for k, v in res.identity.items() if k != RATE}
    return json.dumps([res.model, res.framework, res.device, res.place, ident],
                      sort_keys=True, default=str)


def answers(results: Sequence[ConfigResult], target: float, where: str = ""
            ) -> list[Answer]:
    """The answer of every serve configuration (less its rate) that gives an SLO.

    Raises:
        UserError: no serve configuration, none with an SLO, or none run at two rates;
            ``where`` names the campaigns in the message.
    """
    served = [r for r in results if r.identity.get("mode") == "serve"]
    if not served:
        raise UserError(f"--table slo: no serve runs in {where or 'these campaigns'} "
                        '(it answers mode = "serve" campaigns: docs/serving.md)')
    with_slo = [r for r in served if slos(r.identity)]
    if not with_slo:
        raise UserError(f"--table slo: the serve runs of {where or 'these campaigns'} give "
                        f"no SLO: set {', '.join(k for k, _ in SLO_KEYS)} in the profile")
    groups: dict[str, list[RatePoint]] = {}
    for r in with_slo:
        rate = rate_value(r.identity)
        if rate is not None:
            groups.setdefault(_group_key(r), []).append(point_of(r, rate))
    if not any(len(g) > 1 for g in groups.values()):
        raise UserError(f"--table slo: no request_rate sweep in {where or 'these campaigns'}"
                        ": each serve configuration ran at one rate; sweep it "
                        "(request_rate = [1, 5, 20])")
    return [answer(g, target) for g in groups.values()]


def check_target(target: float) -> float:
    """``target`` if it is a share in (0, 1].

    Raises:
        UserError: it is not.
    """
    if not (0.0 < target <= 1.0):
        raise UserError(f"--attainment {target:g}: give the share of requests that must "
                        f"meet the SLOs, in (0, 1] (default {DEFAULT_ATTAINMENT:g})")
    return target


COLUMNS = (
    Column("rates", "rates (req/s)", Role.KEY),
    Column("attainment", "attainment per rate", Role.KEY),
    Column("capacity", "capacity (req/s)", Role.VALUE, "req/s"),
    Column("req_rate", "req/s", Role.VALUE, "req/s"),
    Column("output_rate", "out tok/s", Role.VALUE, "tokens/s"),
    Column("ttft_p99", "TTFT p99 s", Role.VALUE, "s", ms=Millis.ALWAYS),
    Column("tpot_p99", "TPOT p99 s", Role.VALUE, "s", ms=Millis.ALWAYS),
    Column("j_per_token", "J/token", Role.VALUE, "J/token"),
    Column("net_j_per_token", "net J/token", Role.VALUE, "J/token"),
    Column("runs", "runs", Role.VALUE, "1"),
    Column("note", "note", Role.KEY),
)


def _at_capacity(a: Answer) -> tuple[tuple[Cell, ...], dict[str, Any]]:
    """The capacity's value cells (req/s ... runs) and the JSON reasons of those without
    a number."""
    cap = a.capacity
    if cap is None:
        why = "n/a: no capacity"
        return tuple(Cell(why, None, "none") for _ in range(7)), {
            c.key: why for c in COLUMNS[3:10]}
    res = cap.result
    cells: list[Cell] = []
    for name in ("req-rate", "output-rate"):
        val = value_of(res, name)
        text = metric_spec(name).fmt(val.value) if val.value is not None else val.reason
        cells.append(Cell(text, val.value, res.status))
    for name in ("ttft", "tpot"):  # p99 by the percentile rule: n/a with its n if too few
        val = value_of(res, name)
        extra = dict(val.extra)
        p99, n = extra.get("p99_s"), int(extra.get("n") or 0)
        text = (fmt_seconds(p99) if p99 is not None
                else too_few(n) if val.value is not None else val.reason)
        cells.append(Cell(text, p99, res.status, {"n": n}))
    energy = value_of(res, "j-per-token")
    net = dict(energy.extra).get("net_j")
    cells.append(Cell(f"{energy.value:.4g}" if energy.value is not None else energy.reason,
                      energy.value, res.status))
    # beside a number, j-per-token's suffix " (net WHY)" says why the net is missing
    said = energy.suffix.removeprefix(" (net ").removesuffix(")")
    net_why = energy.reason if energy.value is None else \
        said if said.startswith("n/a") else f"n/a: {said}"
    cells.append(Cell(f"{net:.4g}" if net is not None else net_why, net, res.status))
    cells.append(Cell(str(res.n_runs), res.n_runs, res.status))
    reasons = {c.key: cell.text for c, cell in zip(COLUMNS[3:10], cells, strict=True)
               if cell.value is None}
    return tuple(cells), reasons


def _sort_key(a: Answer) -> tuple[Any, ...]:
    cap = a.capacity
    energy = value_of(cap.result, "j-per-token").value if cap is not None else None
    some = a.points[0].result
    return (energy is None, energy or 0.0, cap is None,
            -(cap.rate_req_s if cap is not None else 0.0),
            rank(some.model, catalog.MODELS), some.model, place_key(some))


def slo_table(db: sqlite_utils.Database, camps: Sequence[queries.CampaignRow],
              target: float = DEFAULT_ATTAINMENT, *,
              results: Sequence[ConfigResult] | None = None) -> Table:
    """The serving answer table of resolved campaigns at attainment ``target``;
    ``results``: their :func:`config_results`, when the caller read them already.

    Raises:
        UserError: a target outside (0, 1], no serve run, no SLO, or no rate sweep
            (:func:`answers`).
    """
    check_target(target)
    where = "campaign " + ", ".join(str(c.id) for c in camps)
    if results is None:
        results = config_results(db, [c.id for c in camps])
    found = sorted(answers(results, target, where), key=_sort_key)
    firsts = [a.points[0].result for a in found]
    idents = [{k: v for k, v in i.items() if k != RATE} for i in placed_identities(firsts)]
    var = identity.variation(idents)
    label = place_labeller(firsts)
    rows = []
    for a, some, ident in zip(found, firsts, idents, strict=True):
        cap = a.capacity
        at, reasons = _at_capacity(a)
        finite = cap is not None and not math.isinf(cap.rate_req_s)
        reached = value_of(cap.result, "req-rate").value if cap and not finite else None
        capacity = Cell(a.verdict, cap.rate_req_s if finite and cap else reached,
                        "none" if cap is None else "at least"
                        if a.verdict.startswith("at least") else "reached"
                        if not finite else "ok")
        if capacity.value is None:
            reasons["capacity"] = a.verdict
        per_rate = [{"rate": p.rate_req_s if not math.isinf(p.rate_req_s) else "inf",
                     "attainment": p.attainment, "met": p.met, "n": p.measured,
                     "runs": p.result.n_runs, "passes": p.passes(target),
                     **({"why_not": p.why_not} if p.why_not else {})} for p in a.points]
        cells = (key_cell(some.model), key_cell(some.framework), key_cell(label(some)),
                 *var.cells(ident),
                 key_cell(", ".join(rate_text(p.rate_req_s) for p in a.points)),
                 key_cell(", ".join(p.text() for p in a.points)), capacity, *at,
                 key_cell(a.note))
        rows.append(Row(cells, {"verdict": a.verdict, "per_rate": per_rate,
                                "n": cap.measured if cap is not None else None,
                                "identity": ident, "reasons": reasons}))
    columns = (Column("model", "model", Role.KEY), Column("framework", "framework", Role.KEY),
               Column("device", "device", Role.KEY), *var.columns(), *COLUMNS)
    notes = [NOTE_RULE.format(target=target), NOTE_SORT]
    if left := sum(r.identity.get("mode") == "serve" and not slos(r.identity)
                   for r in results):
        notes.append(f"Left out: {left} serve configuration{'s' * (left > 1)} without "
                     f"an SLO ({', '.join(k for k, _ in SLO_KEYS)}).")
    what = f"serving capacity at SLO attainment ≥ {target:g}"
    lines, meta = caption.context(db, camps, var.caption())
    return Table(title=caption.title(camps, what), comment=caption.comment(camps, what),
                 columns=columns, rows=tuple(rows),
                 notes=tuple(notes), caption=lines,
                 meta={**meta, "table": "slo", "attainment": target,
                       "identity": var.as_json()})
