"""The report's serving figures (``mode = "serve"`` runs, issue 41 item 6).

Against request rate, one line per engine (framework, model and every other identity
field that varies but the rate): TTFT and TPOT p50/p99; goodput (the SLOs in the
caption); J per output token where GPU energy was measured. Beside them output tokens/s
against TPOT p50, the throughput-latency curve of each engine. A point is the
configuration's number over its ok runs (:mod:`dltop.results.serving`, the export's
cells); it carries ``n`` and its error bar spans the ok runs' own values. A point of a
configuration whose client could not keep its schedule is ringed (``client-bound``).
The x of a rate asked as ``"inf"`` is the rate reached, and the caption says so.

Per serve run, :func:`serve_run_figures` draws its requests: TTFT and end-to-end
latency against send time, and the TTFT and ITL histograms
(:mod:`dltop.results.servetrace`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dltop.report.captions import cap_lines, flagged_text, n_text
from dltop.report.captions import order as _order
from dltop.report.content import Figure
from dltop.report.generation import PICKS, pct_panel
from dltop.results import generation as gen
from dltop.results import identity, labels
from dltop.results.aggregate import ConfigResult
from dltop.results.metrics import value_of
from dltop.results.places import placed_identities
from dltop.results.servetrace import serve_trace
from dltop.results.serving import SLO_KEYS, serve_requests_of, serving_numbers, slos
from dltop.textsafe import one_line

if TYPE_CHECKING:
    import sqlite_utils

RATE = "request rate (req/s asked; reached where asked inf)"
PCTS = (("p50", 0), ("p99", 2))


def _serve(results: Sequence[ConfigResult]) -> list[ConfigResult]:
    return sorted((r for r in results if r.identity.get("mode") == "serve"
                   and any(run.serving for run in r.runs)), key=_order)


def _engine(r: ConfigResult, var: identity.Variation) -> str:
    return one_line(" ".join(p for p in (r.framework, r.model, labels.settings_text(
        r.identity, var.fields)) if p))


def _rate(r: ConfigResult) -> tuple[float | None, bool]:
    """(x, reached): the rate asked, or the rate reached where ``inf`` was asked."""
    asked = r.identity.get("request_rate")
    if isinstance(asked, int | float) and not isinstance(asked, bool):
        return float(asked), False
    return serving_numbers(r, "req-rate")[0], True


def _row(r: ConfigResult, var: identity.Variation, panel: str, x: float, value: float,
         own: Sequence[float], n: int) -> dict[str, Any]:
    engine = _engine(r, var)
    return {"panel": panel, "framework": r.framework, "series": engine, "color": engine,
            "variant": "", "x": x, "value": value, "low": min(own, default=value),
            "high": max(own, default=value), "n": n, "client_bound": r.client_bound}


def _per_run(r: ConfigResult, one: Callable[[ConfigResult], float | None]) -> list[float]:
    """``one`` of each ok run alone (the error bar's ends)."""
    out = []
    for run in r.runs:
        v = one(replace(r, runs=(run,), n_runs=1))
        if v is not None:
            out.append(v)
    return out


def _latency_rows(ok: Sequence[ConfigResult], var: identity.Variation) -> list[dict[str, Any]]:
    rows = []
    for r in ok:
        x, _ = _rate(r)
        if x is None:
            continue
        for name in ("ttft", "tpot"):
            cell = dict(value_of(r, name).extra)
            for pct, at in PCTS:
                value = cell.get(f"{pct}_s")
                if value is None:
                    continue
                own = [v for run in r.runs if (st := gen.stats(run.generations))
                       and (p := PICKS[name](st)) is not None and (v := p[at]) is not None]
                rows.append(_row(r, var, pct_panel(name, pct), x, value, own,
                                 int(cell.get("n") or 0)))
    return rows


def _numbers_rows(ok: Sequence[ConfigResult], var: identity.Variation, name: str, panel: str,
                  x_of: Callable[[ConfigResult], float | None]) -> list[dict[str, Any]]:
    """A point per configuration of serving metric ``name`` at ``x_of`` (left out where
    either is None), its error bar from each ok run alone."""
    rows = []
    for r in ok:
        x, value = x_of(r), serving_numbers(r, name)[0]
        if x is not None and value is not None:
            own = _per_run(r, lambda c: serving_numbers(c, name)[0])
            rows.append(_row(r, var, panel, x, value, own, r.n_runs))
    return rows


def _joules(r: ConfigResult) -> float | None:
    """The declared ``j-per-token`` of a configuration; simulated GPUs' number too (the
    figure's title says SIMULATED)."""
    cell = value_of(r, "j-per-token")
    return cell.value if cell.value is not None else cell.simulated_value


def _energy(ok: Sequence[ConfigResult], var: identity.Variation
            ) -> tuple[list[dict[str, Any]], list[str]]:
    rows: list[dict[str, Any]] = []
    short: dict[str, None] = {}  # an engine's reason once, whatever its rates
    for r in ok:
        x, _ = _rate(r)
        value = _joules(r)
        if r.device_kind != "gpu":
            short[f"{_engine(r, var)}: no GPU (the energy is GPU telemetry)"] = None
        elif value is None:
            why = value_of(r, "j-per-token").reason
            short[f"{_engine(r, var)}: {why or 'n/a: no energy measured'}"] = None
        elif x is not None:
            per = _per_run(r, _joules)
            rows.append(_row(r, var, "J/output token", x, value, per, len(per)))
    return rows, list(short)


def _slo_text(ok: Sequence[ConfigResult]) -> str:
    given = sorted({"; ".join(f"{key} {1000 * s:g}" for key, s in
                              sorted(slos(r.identity).items())) for r in ok} - {""})
    return "SLOs: " + (" | ".join(given) if given else "none") + " (ms, " + ", ".join(
        k for k, _ in SLO_KEYS) + ")"


def _figure(key: str, title: str, rows: list[dict[str, Any]], ok: Sequence[ConfigResult],
            x_title: str, notes: Sequence[str], omitted: str) -> Figure:
    if not rows:
        return Figure(key, "serving", title, omitted=omitted)
    rows, capped = cap_lines(rows)
    bound = sorted({str(r["series"]) for r in rows if r["client_bound"]})
    caption = "; ".join(n for n in [
        *notes, n_text(ok), "error bars: min–max of the ok runs' own values",
        "ringed: client-bound (" + (", ".join(bound) if bound else "none") + ")",
        flagged_text(ok), capped] if n) + "."
    return Figure(key, "serving", title, rows=tuple(rows), x_title=x_title, caption=caption,
                  panels=tuple(dict.fromkeys(str(r["panel"]) for r in rows)),
                  extra={"color": "engine"})


def serving_figures(results: Sequence[ConfigResult]) -> list[Figure]:
    """Every serving figure of the report (none without serve runs)."""
    ok = _serve(results)
    if not ok:
        return []
    var = identity.variation(placed_identities(ok)).without("request_rate")
    inf = [r for r in ok if _rate(r)[1]]
    x_note = (f"x: rate reached for {len(inf)} configuration(s) asked inf" if inf else "")
    out = [_figure("serve-latency", "Serving: TTFT and TPOT vs request rate",
                   _latency_rows(ok, var), ok, RATE, [
                       "points: p50 and p99 over every measured request of a "
                       "configuration's ok runs together (TTFT: send to first content "
                       "chunk; TPOT: (e2e - TTFT) / (output tokens - 1)); a p99 needs 100 "
                       "requests", x_note], "no serve run with a latency")]
    tput = _numbers_rows(ok, var, "output-rate", "output tokens/s",
                         lambda r: value_of(r, "tpot").value)
    out.append(_figure("serve-throughput", "Serving: output tokens/s vs TPOT p50", tput, ok,
                       pct_panel("tpot"), ["points: one configuration (request rate, "
                                      "concurrency) each; output tokens of ok requests / "
                                      "measured window, median over runs"],
                       "no serve run with a TPOT (one output token per request)"))
    slo_given = any(slos(r.identity) for r in ok)
    out.append(_figure("serve-goodput", "Serving: goodput vs request rate",
                       _numbers_rows(ok, var, "goodput", "goodput req/s",
                                     lambda r: _rate(r)[0]), ok, RATE,
                       ["goodput: requests per s meeting every SLO, median over runs",
                        _slo_text(ok), x_note],
                       "N/A: no SLO given (slo_ttft_ms, slo_tpot_ms, slo_e2e_ms)"
                       if not slo_given else "no serve run with a measured window"))
    rows, short = _energy(ok, var)
    fake = any(run.simulated for r in ok for run in r.runs)
    out.append(_figure("serve-energy", "Serving: J per output token vs request rate"
                       + (" (SIMULATED GPUs)" if fake else ""), rows,
                       ok, RATE, ["GPU energy over the measured window / output tokens of "
                                  "its ok requests, mean over runs", x_note,
                                  "readings from SIMULATED GPUs (--fake-gpus): not real "
                                  "hardware" if fake else "",
                                  "N/A: " + "; ".join(short) if short else ""],
                       "N/A: " + "; ".join(short) if short else "N/A: no energy measured"))
    return out


def serve_run_figures(db: sqlite_utils.Database, runs: Sequence[Figure]) -> list[Figure]:
    """``runs`` with a figure of each serve run's requests after its own."""
    ids = [int(f.extra["run_id"]) for f in runs if "run_id" in f.extra]
    reqs = serve_requests_of(db, ids)
    out: list[Figure] = []
    for f in runs:
        out.append(f)
        trace = serve_trace(reqs.get(int(f.extra.get("run_id", -1)), ()))
        if trace is None:
            continue
        rows: list[dict[str, Any]] = []
        for t, ttft, e2e in zip(trace.sent_s, trace.ttft_s, trace.e2e_s, strict=True):
            rows += [{"panel": "latency s", "t": round(t, 6), "value": v, "series": name}
                     for name, v in (("TTFT", ttft), ("E2E", e2e)) if v is not None]
        for panel, bins in (("TTFT ms", trace.ttft_bins), ("ITL ms", trace.itl_bins)):
            rows += [{"panel": panel, "lo": 1e3 * b.lo_s, "hi": 1e3 * b.hi_s,
                      "count": b.count} for b in bins]
        run_id = int(f.extra["run_id"])
        title = f.title.removesuffix(" (simulated GPU telemetry)")
        out.append(Figure(
            f"serve-run-{run_id}", "serverun", f"{title}: requests",
            rows=tuple(rows), x_title="s since the load started (send time)",
            panels=("latency s", "TTFT ms", "ITL ms"), extra={"run_id": run_id},
            caption=(f"{len(trace.sent_s)} measured requests, {trace.failed} failed (not "
                     "drawn); each request's TTFT and end-to-end latency at its send time; "
                     f"histograms of TTFT and of {trace.n_itl} per-token inter-token "
                     "latencies (a chunk of k tokens: k equal gaps), 20 equal bins.")))
    return out
