"""The report's generation figures (``mode = "generate"`` runs, issue 29).

Per model: TPOT and TTFT p50 vs batch (concurrent sequences), one line per
framework and every other identity field that varies; and TTFT p50 vs prompt length
where the prompt length varies. A point is the configuration's p50 over every
measured request of its ok runs together (:mod:`dltop.results.generation`, the
export's ``ttft``/``tpot`` cells); its error bar spans the ok runs' own p50s, so a
run that disagrees with the others shows. A campaign without generate runs gets no
generation figure at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dltop.report import captions, encode
from dltop.report.captions import cap_lines, flagged_text, n_text
from dltop.report.content import Figure
from dltop.results import convergence as conv
from dltop.results import generation as gen
from dltop.results import identity
from dltop.results.aggregate import ConfigResult
from dltop.results.metricdefs import metric
from dltop.results.metrics import value_of
from dltop.results.places import placed_identities


def pct_panel(name: str, pct: str = "p50") -> str:
    """The panel of metric ``name``'s percentile ``pct``: its declared label and unit
    (``TTFT p50 s``)."""
    return f"{metric(name).label} {pct} {metric(name).unit}"


PANELS = {pct_panel(n): n for n in ("tpot", "ttft")}
"""Panel title → metric (:mod:`dltop.results.metrics`)."""
SPREAD = "error bars: min–max of the ok runs' own p50"


def _per_model(results: Sequence[ConfigResult]) -> Iterator[tuple[str, list[ConfigResult]]]:
    """Each model and its configurations, in the report's order."""
    for model in captions.models(results):
        yield model, sorted((r for r in results if r.model == model), key=captions.order)


def _run_p50s(r: ConfigResult, pick: Callable[[gen.GenStats], conv.Percentiles | None],
              ) -> list[float]:
    out = []
    for run in r.runs:
        st = gen.stats(run.generations)
        p = pick(st) if st is not None else None
        if p is not None:
            out.append(p[0])
    return out


PICKS: dict[str, Callable[[gen.GenStats], conv.Percentiles | None]] = {
    "tpot": lambda s: s.tpot_s, "ttft": lambda s: s.ttft_s}
"""A latency metric's percentiles in a run's generation statistics."""


def _rows(ok: Sequence[ConfigResult], var: identity.Variation, x: str,
          panels: dict[str, str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    hosts = len({r.host for r in ok}) > 1
    devices = len({r.device for r in ok}) > 1
    short = encode.variants(ok) if x == "batch" else {}  # a legend's, a lone point's words
    for r in ok:
        series = f"{captions.label(r, var, batch=x != 'batch', host=hosts)} {r.device}"
        variant = short.get(id(r), series.removeprefix(r.framework).strip())
        if x == "batch" and devices:
            variant = f"{variant} {r.device}".strip()
        for panel, name in panels.items():
            value = value_of(r, name).value
            if value is None:
                continue
            own = _run_p50s(r, PICKS[name])
            rows.append({"panel": panel, "framework": r.framework, "series": series,
                         "variant": variant,
                         x: r.batch_size if x == "batch" else r.identity.get(x),
                         "value": value, "low": min(own, default=None),
                         "high": max(own, default=None)})
    return rows


def _caption(ok: Sequence[ConfigResult], what: str, capped: str = "") -> str:
    return "; ".join([
        f"points: {what} p50 over every measured request of a configuration's ok runs "
        "together (TTFT: prompt in to first token out, prefill included; TPOT: (end to "
        "end - TTFT) / (new tokens - 1); each the whole batch's, device synchronised)",
        n_text(ok), SPREAD, flagged_text(ok), *([capped] if capped else [])]) + "."


def latency_batch_figures(results: Sequence[ConfigResult],
                          var: identity.Variation) -> list[Figure]:
    """Per model of ``results`` (generate configurations): TPOT and TTFT p50 vs batch
    size, side by side."""
    out = []
    for model, ok in _per_model(results):
        key, title = f"generate-batch-{model}", f"{model}: TPOT and TTFT vs batch (generate)"
        batches = {r.batch_size for r in ok}
        if len(batches) < 2:
            out.append(Figure(key, "batch", title,
                              omitted=f"one batch size only ({min(batches)})"))
            continue
        rows, capped = cap_lines(_rows(ok, var, "batch", PANELS))
        out.append(Figure(key, "batch", title, rows=tuple(rows),
                          x_title="batch (concurrent sequences)",
                          panels=tuple(dict.fromkeys(str(r["panel"]) for r in rows)),
                          caption=_caption(ok, "TPOT and TTFT", capped)))
    return out


def ttft_prompt_figures(results: Sequence[ConfigResult],
                        var: identity.Variation) -> list[Figure]:
    """Per model whose configurations in ``results`` (generate ones) vary
    ``prompt_tokens``: TTFT p50 vs prompt length."""
    out = []
    for model, ok in _per_model(results):
        prompts = {r.identity.get("prompt_tokens") for r in ok}
        if len(prompts) < 2 or None in prompts:
            continue  # the prompt length does not vary: nothing to say, no figure
        rows, capped = cap_lines(_rows(ok, var.without("prompt_tokens"), "prompt_tokens",
                                       {pct_panel("ttft"): "ttft"}))
        out.append(Figure(f"generate-prompt-{model}", "prompt",
                          f"{model}: TTFT vs prompt length (generate)", rows=tuple(rows),
                          x_title="prompt tokens", panels=(pct_panel("ttft"),),
                          caption=_caption(ok, "TTFT", capped)))
    return out


def generation_figures(results: Sequence[ConfigResult]) -> list[Figure]:
    """Every generation figure of the report (none without generate runs). A line is
    named by what varies among the generate configurations only (the campaign's training
    runs would add ``mode``, ``new tokens``... to every label)."""
    gen_results = [r for r in results if r.identity.get("mode") == "generate"
                   and any(run.generations for run in r.runs)]
    if not gen_results:
        return []
    var = identity.variation(placed_identities(gen_results))
    return [*latency_batch_figures(gen_results, var), *ttft_prompt_figures(gen_results, var)]
