"""The precision figure: throughput and energy per sample per model and precision, one
bar per framework (issue 31 item 1), drawn whenever precision varies in the report.

Each model is its own row of panels with its own axes: a fully connected net runs a
hundred times the samples/s of a ResNet-50, so one axis would flatten every bar but
one. Within a panel the bars are horizontal, one category per precision (with the
batch and any other varying setting when the model ran several), one bar per
framework; training, inference and generation get separate rows (a step of one is not
a step of another). J/sample bars are left out for a configuration whose runs stored
too few GPU readings (:func:`dltop.results.readings.readings_check`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from dltop.report.captions import flagged_text, n_text
from dltop.report.captions import models as _models
from dltop.report.content import Figure
from dltop.report.leftout import caption_text
from dltop.results import identity, labels, tokens
from dltop.results.aggregate import ConfigResult
from dltop.results.places import rank
from dltop.results.readings import readings_check

ORDER = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
"""Precisions from wide to narrow (others after, by name)."""
PANELS = ("samples/s", "tokens/s", "J/sample", "J/token")
"""Panel order: throughput before energy; a transformer's in tokens
(:mod:`dltop.results.tokens`)."""
KEPT_OUT = ("precision", "framework", "mode", *labels.LAST)
"""Fields not repeated in a bar's category: its own axis, colour or row says them, and
the run length does not make a configuration."""


def precision_figures(results: Sequence[ConfigResult], var: identity.Variation
                      ) -> list[Figure]:
    """The figure, or none when precision does not vary (nothing to compare)."""
    if "precision" not in var.fields:
        return []
    per = {tokens.TOKENS: "token", tokens.MIXED: "sample or token"}.get(
        tokens.kind(r.model for r in results), "sample")
    key, title = "precision", f"Throughput and energy per {per} by precision"
    ok = [r for r in results if r.samples_per_s is not None]
    if not ok:
        return [Figure(key, "precision", title, omitted="no ok run")]
    others = [f for f in var.fields if f not in KEPT_OUT]
    rows: list[dict[str, Any]] = []
    short: list[tuple[str, str]] = []
    for model in _models(ok):
        rate, energy = (tokens.row_unit(m, model) for m in ("throughput", "energy"))
        mine = [r for r in ok if r.model == model]
        batches = len({r.batch_size for r in mine}) > 1
        devices = len({r.device for r in mine}) > 1  # cpu:1 and cpu:2: two bars, not one
        for r in mine:
            category = str(r.identity.get("precision"))
            if batches:
                category += f" b{r.batch_size}"
            if devices:
                category += f" {r.device}"
            if extra := labels.settings_text(r.identity, others):
                category += f" {extra}"
            mode = str(r.identity.get("mode") or "train")
            base = {"model": model, "mode": mode, "framework": r.framework,
                    "category": category, "rank": rank(str(r.identity.get("precision")), ORDER)}
            rates = [x for x in (run.samples_per_s for run in r.runs) if x is not None]
            rows.append({**base, "panel": rate, "value": r.samples_per_s,
                         "low": min(rates, default=None), "high": max(rates, default=None)})
            joules = [float(v) for v in (run.get("joules_per_sample") for run in r.runs)
                      if v is not None]
            why, _ = readings_check(r, gpu=True) if r.device_kind == "gpu" else ("", None)
            if joules and not why:
                rows.append({**base, "panel": energy, "value": statistics.fmean(joules),
                             "low": min(joules), "high": max(joules)})
            elif why:
                short.append((labels.compose(None, r.model, r.batch_size, r.device,  # by model
                                             labels.settings_text(r.identity, var.fields))
                              + f" ({r.framework})", why))
    rate_word, energy_word = (tokens.metric_for(m, (r.model for r in ok)).unit
                              for m in ("throughput", "energy"))
    notes = ["one row of panels per model and mode, each with its own axes",
             f"bars: {rate_word} (the configuration's) and {energy_word} (mean over the ok "
             "runs); error bars: the runs' min–max", n_text(ok), flagged_text(ok)]
    if not any(str(row["panel"]).startswith("J/") for row in rows):
        notes.append(f"{energy_word} omitted: no GPU energy reading")
    if short:
        notes.append(caption_text(f"{energy_word} left out, too few readings", short))
    if any(run.simulated for r in ok for run in r.runs):
        title += " (SIMULATED GPUs)"
        notes.append("energy from SIMULATED GPUs (--fake-gpus): not real hardware")
    return [Figure(key, "precision", title, rows=tuple(rows), x_title="precision",
                   panels=tuple(p for p in PANELS if any(row["panel"] == p for row in rows)),
                   caption="; ".join(notes) + ".")]
