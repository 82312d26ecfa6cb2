"""What a report leaves out, said once per reason instead of once per thing.

A GPU check of 21 configurations used to print 11 ``omitted: one count only`` stubs
and a caption naming 17 configurations, each with its own ``n/a: window 0.04 s,
readings not counted`` (issue 40). Here things left out for the same reason (its text
with the numbers taken out) become one line: the reason with the range of its numbers,
how many, and whose.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dltop.catalog import JobStatus, RunStatus
from dltop.results.aggregate import ConfigResult
from dltop.textsafe import one_line

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
MAX_NAMED = 6
"""Things named on a line; past this many, they are counted by their first word (the
model)."""


def _template(reason: str) -> str:
    return _NUMBER.sub("#", reason)


def _with_ranges(reasons: Sequence[str]) -> str:
    """The reasons (one template) as one text, each number the range of its values
    (``window 0.024–0.67 s``)."""
    numbers = [[float(x) for x in _NUMBER.findall(r)] for r in reasons]
    parts = _NUMBER.split(reasons[0])
    out = [parts[0]]
    for i, tail in enumerate(parts[1:]):
        vals = sorted({n[i] for n in numbers if i < len(n)})
        # a few values (batch 128 and 1024) listed; many (windows) as their range
        out.append(", ".join(f"{v:g}" for v in vals) if len(vals) <= 3
                   else f"{vals[0]:g}–{vals[-1]:g}")
        out.append(tail)
    return "".join(out)


def _names(names: Sequence[str], noun: str) -> str:
    """``fcn-r, alexnet-r`` or, past :data:`MAX_NAMED`, ``17 configurations (fcn-r 4,
    alexnet-r 6...)``: counted by their first word."""
    unique = list(dict.fromkeys(names))
    if len(unique) <= MAX_NAMED:
        return ", ".join(unique)
    counts: dict[str, int] = {}
    for n in unique:
        head = n.split(" ", 1)[0]
        counts[head] = counts.get(head, 0) + 1
    groups = ", ".join(f"{k} {v}" for k, v in counts.items())
    return f"{len(unique)} {noun} ({groups})"


def caption_text(prefix: str, items: Sequence[tuple[str, str]]) -> str:
    """A caption's note of what it left out, one clause per reason (empty when nothing
    was): ``left out, too few readings: 17 configurations (...) (window 0.024–0.67 s,
    ...)``."""
    if not items:
        return ""
    groups: dict[str, list[tuple[str, str]]] = {}
    for name, reason in items:
        groups.setdefault(_template(reason.removeprefix("n/a: ")), []).append(
            (name, reason.removeprefix("n/a: ")))
    clauses = [f"{_names([n for n, _ in g], 'configurations')} "
               f"({_with_ranges([r for _, r in g])})" for g in groups.values()]
    return f"{prefix}: {'; '.join(clauses)}"


def figure_subject(title: str) -> tuple[str, str]:
    """(what, whose) of a figure's title: ``resnet-50: throughput vs batch size`` →
    (``throughput vs batch size``, ``resnet-50``); a title without a model, whole."""
    head, sep, tail = title.partition(": ")
    return (tail, head) if sep and " " not in head else (title, "")


def omitted_lines(titles_and_reasons: Sequence[tuple[str, str]]) -> list[str]:
    """The figures not drawn, one line per (figure, reason):
    ``time per mini-batch vs GPUs: GPUs: one count only (1): fcn-r, alexnet-r``."""
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for title, reason in titles_and_reasons:
        what, whose = figure_subject(title)
        groups.setdefault((what, _template(reason)), []).append((whose, reason))
    lines = []
    for (what, _), g in groups.items():
        names = [w for w, _ in g if w]
        text = f"{what}: {_with_ranges([r for _, r in g])}"
        if names:
            text += f" ({_names(names, 'figures')})"
        lines.append(one_line(text))
    return lines


def failed_text(results: Sequence[ConfigResult]) -> str:
    """``left out of the figures: 3 configurations without an ok run (OOM 1, failed 2);
    the summary table says why`` (empty when every finished configuration has one)."""
    counts: dict[str, int] = {}
    for r in results:
        if not r.runs and r.status not in (JobStatus.QUEUED, RunStatus.RUNNING):
            counts[r.label] = counts.get(r.label, 0) + 1
    n = sum(counts.values())
    if not n:
        return ""
    per = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    return (f"Left out of the figures: {n} configuration{'s' if n != 1 else ''} without "
            f"an ok run ({per}); the summary table says why.")
