"""The power and energy figure: mean GPU power and energy per sample (per token for a
transformer) per configuration, one bar per framework.

Each mode is its own row of panels with its own axes (issue 40): a generated token
costs hundreds of times a trained one (0.55 against 0.0018 J/token on an H200), so on
one axis the training bars vanish. A mode whose rows mix transformers and other models
is split once more, by unit: a J/token and a J/sample bar are not the same quantity.
:mod:`dltop.report.specs` draws each panel on a log axis where its values still span
more than 100×.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from dltop import catalog
from dltop.report.captions import cap_lines, flagged_text, n_text
from dltop.report.captions import order as _order
from dltop.report.content import Figure
from dltop.report.encode import HIDDEN
from dltop.report.leftout import caption_text
from dltop.results import identity, labels, tokens
from dltop.results.aggregate import ConfigResult, floats
from dltop.results.metricdefs import metric
from dltop.results.places import rank
from dltop.results.readings import readings_check

MODE_WORDS = {"train": "training", "inference": "inference", "generate": "generation"}
"""A mode as a row of panels is titled."""


def _mode(r: ConfigResult) -> str:
    return str(r.identity.get("mode") or "train")


def _configs(gpu: Sequence[ConfigResult], var: identity.Variation) -> dict[int, str]:
    """Each configuration's category (the run label without its framework, which the
    bar's colour says): without the mode and the run length where the rest is unique
    within its mode."""
    def name(r: ConfigResult, fields: Sequence[str]) -> str:
        return labels.compose(None, r.model, r.batch_size, r.device,
                              labels.settings_text(r.identity, fields))
    short = [f for f in var.fields if f not in HIDDEN]
    names = {id(r): name(r, short) for r in gpu}
    seen = {(_mode(r), r.framework, names[id(r)]) for r in gpu}
    if len(seen) < len(gpu):  # two configurations would share a bar: name them whole
        names = {id(r): name(r, var.fields) for r in gpu}
    return names


def energy_figure(results: Sequence[ConfigResult], var: identity.Variation) -> Figure:
    """Mean GPU power and energy per sample (token) per framework: bars over the runs'
    mean, error bars their min–max, per model, batch and device; a row of panels per
    mode (and unit, where a mode mixes transformers with other models)."""
    key = "power-energy"
    gpu = [r for r in results if r.device_kind == "gpu" and r.runs]
    per = {tokens.TOKENS: "token", tokens.MIXED: "sample or token"}.get(
        tokens.kind(r.model for r in gpu), "sample")
    title = f"GPU power and energy per {per} per framework"
    if not gpu:
        return Figure(key, "energy", title, omitted=(
            "no GPU run: power and energy per sample are GPU telemetry"))
    names = _configs(gpu, var)
    mixed = {m: {tokens.is_lm(r.model) for r in gpu if _mode(r) == m} for m in catalog.MODES}
    rows: list[dict[str, Any]] = []
    short: list[tuple[str, str]] = []  # configurations whose runs hold too few readings
    for r in sorted(gpu, key=lambda r: (rank(_mode(r), catalog.MODES), *_order(r))):
        config = names[id(r)]
        why, _ = readings_check(r, gpu=True)
        if why:
            short.append((f"{config} ({r.framework})", why))  # counted by model
            continue
        mode = _mode(r)
        joules = tokens.row_unit("energy", r.model)
        facet = MODE_WORDS.get(mode, mode)
        if len(mixed.get(mode, ())) > 1:  # this mode mixes units: a row per unit
            facet += f", {'transformers' if tokens.is_lm(r.model) else 'other models'}"
        power = metric("power").header  # the axes' titles: the metrics' declared labels
        for panel, column in ((power, "power_mean_w"), (joules, "joules_per_sample")):
            values = floats(r.runs, column)
            if values:
                rows.append({"panel": panel, "framework": r.framework, "config": config,
                             "mode": mode, "facet": facet, "bar": f"{facet}: {config}",
                             "value": statistics.fmean(values), "low": min(values),
                             "high": max(values), "n": len(values)})
    if not rows:
        return Figure(key, "energy", title, omitted=(
            "too few readings: " + "; ".join(f"{n} ({w})" for n, w in short) if short
            else "GPU telemetry was not sampled"))
    rows, capped = cap_lines(rows, "bar", what="configurations", by_framework=False)
    simulated = any(run.simulated for r in gpu for run in r.runs)
    facets = len({row["facet"] for row in rows})
    notes = ["bars: mean over the ok runs; error bars: min–max",
             "a row of panels per mode, each with its own axes" if facets > 1 else "",
             n_text(gpu),
             flagged_text(gpu), capped, caption_text("left out, too few readings", short)]
    if simulated:
        title += " (SIMULATED GPUs)"
        notes.append("readings from SIMULATED GPUs (--fake-gpus): not real hardware")
    return Figure(key, "energy", title, rows=tuple(rows), x_title="framework",
                  panels=tuple(dict.fromkeys(str(row["panel"]) for row in rows)),
                  caption="; ".join(n for n in notes if n) + ".")
