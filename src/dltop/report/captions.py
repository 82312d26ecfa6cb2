"""What every report figure's lines and captions share: a configuration's line label,
n, the flagged runs, the order of configurations and models (:mod:`dltop.report.data`,
:mod:`dltop.report.generation`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dltop import catalog
from dltop.results import identity, labels, scaling
from dltop.results.aggregate import ConfigResult
from dltop.results.places import rank
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


def at_host(name: str, r: ConfigResult, results: Sequence[ConfigResult]) -> str:
    """``name`` with ``@host`` where ``results`` span several hosts, as the figure's lines
    say it: a study's ``torch fcn-r b64 cpu:1`` is otherwise two configurations."""
    return f"{name} @{r.host}" if len({x.host for x in results}) > 1 else name


def n_text(results: Sequence[ConfigResult]) -> str:
    """``n = 2 runs per point`` (``n = 1–3`` when it differs)."""
    ns = sorted({r.n_runs for r in results})
    if not ns:
        return "n = 0"
    span = str(ns[0]) if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
    return f"n = {span} ok run{'s' if ns[-1] != 1 else ''} per point"


MAX_FLAGGED = 12
"""Configurations named per flag in a caption; the rest are counted (the summary's
``flags`` column names every one)."""


def flagged_text(results: Sequence[ConfigResult]) -> str:
    """Which runs were noisy, packed, shared or contaminated (``none`` for each that
    none was; ``shared`` only when some was: it is rare); past :data:`MAX_FLAGGED`
    configurations per flag, how many more."""
    parts = []
    names = labels.labels({i: r.identity for i, r in enumerate(results)})  # the run label
    for name in ("noisy", "packed", "shared", "contaminated"):
        who: list[str] = []
        more = 0
        for i, r in enumerate(results):
            ids = [str(run.run_id) for run in r.runs if getattr(run, name)]
            if ids and len(who) >= MAX_FLAGGED:
                more += 1
            elif ids:
                who.append(one_line(f"{at_host(names[i], r, results)} "
                                    f"(run{'s' if len(ids) > 1 else ''} {', '.join(ids)})"))
        if more:
            who.append(f"and {more} more configuration{'s' if more > 1 else ''} (the "
                       "summary's flags column)")
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


MAX_LINES = 12
"""Lines (or bar groups) drawn per figure: beyond a dozen, dashes and colours no longer
tell them apart, and a study of thousands of configurations would draw an unreadable
figure of several MB."""
LEFT_OUT_WHERE = "every configuration is in the summary table and `dltop export`"


def spread_pick(keys: Sequence[str], limit: int) -> list[str]:
    """``limit`` of ``keys`` evenly spaced in their order, first and last kept."""
    if len(keys) <= limit:
        return list(keys)
    if limit <= 1:
        return list(keys[:limit])
    return [keys[round(i * (len(keys) - 1) / (limit - 1))] for i in range(limit)]


def cap_lines(rows: Sequence[dict[str, Any]], key: str = "series", *,
              limit: int = MAX_LINES, what: str = "lines", by_framework: bool = True,
              ) -> tuple[list[dict[str, Any]], str]:
    """At most ``limit`` distinct ``key`` values of a figure's rows, shared out among the
    frameworks in turn and evenly spaced within each (so each framework and the range of
    batches and settings stays in view), and the caption's note on what was left out
    (empty when nothing was).

    Args:
        rows: the figure's rows, in drawing order, each with ``framework`` and ``key``.
        key: the field one line (or one group of bars) is made of.
        limit: most distinct values kept.
        what: the noun of the note (``lines``, ``configurations``).
        by_framework: share the lines among the frameworks (False: ``key`` spans them,
            as the energy figure's configurations do).
    """
    seen: dict[str, dict[str, None]] = {}  # ordered sets
    for r in rows:
        seen.setdefault(str(r["framework"]) if by_framework else "", {})[str(r[key])] = None
    per_fw = {f: list(keys) for f, keys in seen.items()}
    total = len({k for keys in per_fw.values() for k in keys})
    if total <= limit:
        return list(rows), ""
    quota = dict.fromkeys(per_fw, 0)
    while sum(quota.values()) < limit:  # round robin; a framework with fewer lines gives
        for f, keys in per_fw.items():  # its share on
            if quota[f] < len(keys) and sum(quota.values()) < limit:
                quota[f] += 1
    kept = {k for f, keys in per_fw.items() for k in spread_pick(keys, quota[f])}
    out = [r for r in rows if str(r[key]) in kept]
    shown = len({str(r[key]) for r in out})
    how = "shared among the frameworks, evenly spaced" if by_framework else "evenly spaced"
    return out, (f"{shown} of {total} {what} drawn (at most {limit}, {how} by batch and "
                 f"settings); {LEFT_OUT_WHERE}")
