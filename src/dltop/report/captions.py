"""What every report figure's lines and captions share: a configuration's line label,
n, the flagged runs, the order of configurations and models (:mod:`dltop.report.data`,
:mod:`dltop.report.generation`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dltop import catalog
from dltop.results import identity, labels, scaling
from dltop.results.aggregate import ConfigResult, rank
from dltop.textsafe import one_line


def label(r: ConfigResult | scaling.ScalingRow, var: identity.Variation, *,
          batch: bool = True, host: bool = False) -> str:
    """``torch b32`` (with the varying identity fields, and the host where the set
    spans several): one line of a figure, so two configurations never share one."""
    parts = [r.framework] + ([f"b{r.batch_size}"] if batch else [])
    if settings := labels.settings_text(r.identity, var.fields):  # the run label's words
        parts.append(settings)
    if host:
        parts.append(f"@{r.host}")
    return one_line(" ".join(parts))


def n_text(results: Sequence[ConfigResult]) -> str:
    """``n = 2 runs per point`` (``n = 1–3`` when it differs)."""
    ns = sorted({r.n_runs for r in results})
    if not ns:
        return "n = 0"
    span = str(ns[0]) if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
    return f"n = {span} ok run{'s' if ns[-1] != 1 else ''} per point"


def flagged_text(results: Sequence[ConfigResult]) -> str:
    """Which runs were noisy, packed, shared or contaminated (``none`` for each that
    none was; ``shared`` only when some was: it is rare)."""
    parts = []
    names = labels.labels({i: r.identity for i, r in enumerate(results)})  # the run label
    for name in ("noisy", "packed", "shared", "contaminated"):
        who = []
        for i, r in enumerate(results):
            ids = [str(run.run_id) for run in r.runs if getattr(run, name)]
            if ids:
                who.append(one_line(f"{names[i]} "
                                    f"(run{'s' if len(ids) > 1 else ''} {', '.join(ids)})"))
        if who or name != "shared":
            parts.append(f"{name}: {', '.join(who) if who else 'none'}")
    return "; ".join(parts)


def order(r: ConfigResult) -> tuple[Any, ...]:
    """Sort key of a figure's configurations: model, framework, batch, device count."""
    return (rank(r.model, catalog.MODELS), rank(r.framework, catalog.FRAMEWORKS),
            r.batch_size, r.device_count)


def models(results: Sequence[ConfigResult]) -> list[str]:
    """The models of ``results`` in catalogue order (unknown ones after, by name)."""
    return sorted({r.model for r in results}, key=lambda m: (rank(m, catalog.MODELS), m))
