"""Which identity field each line figure draws how: colour, facets, or the line's label.

A figure's configurations are told apart by the fields that vary among them
(:func:`dltop.results.identity.variation`, the fields a table makes row keys). The
encodings follow from those fields, figure by figure:

- ``mode`` varies: each mode is a facet (its own axes). A training step, an inference
  batch and a generation request are not the same work, so they never share an axis.
- ``precision`` varies: with one framework, precision is the colour (the framework
  then says nothing); with several, the framework keeps the colour (one framework is
  one colour in every figure) and each precision is a facet.
- Every other varying field stays in the line's label (its dash or shape).
- What varies in the campaign but not in this figure is stated once in the caption
  (``same for every line: torch, bf16, inference``), never repeated per line; the
  campaign's constants are the page's ``constant:`` line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dltop import catalog
from dltop.report.captions import label as line_label
from dltop.report.precision import ORDER
from dltop.results import identity, labels, scaling
from dltop.results.aggregate import ConfigResult
from dltop.results.places import rank

Config = ConfigResult | scaling.ScalingRow
"""A figure's configuration: a result (time, batch figures) or a scaling row."""


@dataclass(frozen=True)
class Encoding:
    """How one figure draws the identity fields that vary among its configurations."""

    color: str
    """The row field coloured: ``framework`` or ``precision``."""
    facets: tuple[str, ...]
    """Fields of which each combination of values gets its own axes (``mode``,
    ``precision``), in that order; empty: one set of axes."""
    local: identity.Variation
    """What varies among the figure's configurations: a line's name (unique per
    configuration)."""
    var: identity.Variation
    """:attr:`local` less the fields colour and facets draw: the words of a line's
    dash or shape."""
    same: str
    """``same for every line: torch, bf16``: the campaign's varying fields (and the
    framework) that this figure holds constant; empty when none."""

    def facet(self, c: Config) -> str:
        """The facet of a configuration (``train``, ``inference bf16``; empty: none)."""
        return " ".join(labels.field_text(f, c.identity.get(f)) or identity.fmt_value(
            c.identity.get(f)) for f in self.facets)

    def facet_rank(self, c: Config) -> int:
        """Where a configuration's facet goes: training first, then inference and
        generation; within a mode, precisions wide to narrow."""
        mode = str(c.identity.get("mode") or "train")
        return 100 * rank(mode, catalog.MODES) + rank(str(c.identity.get("precision")), ORDER)

    def row(self, c: Config, *, batch: bool = True, host: bool = False) -> dict[str, Any]:
        """The fields every line row of ``c`` carries: framework, its colour's value, its
        facet, and the line's name (``series``: unique per line) and ``variant`` (the
        name less the words colour and facets say, for its dash or shape).

        Args:
            c: the configuration.
            batch: name the batch (False: the figure's x axis is the batch, or it is
                the same for every line).
            host: name the host (the set spans several).
        """
        color = str(c.identity.get(self.color) if self.color != "framework" else c.framework)
        variant = line_label(c, self.var, batch=batch, host=host).removeprefix(c.framework)
        return {"framework": c.framework, "color": color, "facet": self.facet(c),
                "facet_rank": self.facet_rank(c),
                "mode": str(c.identity.get("mode") or "train"),
                "series": line_label(c, self.local, batch=batch, host=host),
                "variant": variant.strip()}


def encoding(configs: Sequence[Config], campaign: identity.Variation) -> Encoding:
    """The encodings of a figure of ``configs`` in a campaign varying ``campaign``."""
    local = identity.variation(c.identity for c in configs)
    frameworks = {c.framework for c in configs}
    facets: list[str] = []
    color = "framework"
    if "mode" in local.fields:
        facets.append("mode")
    if "precision" in local.fields:
        if len(frameworks) > 1:
            facets.append("precision")
        else:
            color = "precision"
    drawn = (*facets, *(["precision"] if color == "precision" else []))
    same = sorted(frameworks) if len(frameworks) == 1 else []
    held = dict(local.constant)
    for name in campaign.fields:
        if name not in local.fields and name in held and \
                (text := labels.field_text(name, held[name])):
            same.append(text)
    return Encoding(color, tuple(facets), local, local.without(*drawn),
                    f"same for every line: {', '.join(same)}" if same else "")


PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d")
"""Framework colours (Vega's tableau10 start), fixed so torch is one colour everywhere."""


def colors(frameworks: Sequence[str]) -> dict[str, Any]:
    """The framework colour scale (catalogue order: torch is one colour everywhere)."""
    known = sorted(set(frameworks), key=lambda f: (rank(f, catalog.FRAMEWORKS), f))
    return {"domain": known, "range": [PALETTE[i % len(PALETTE)] for i in range(len(known))]}


def color_domain(field: str, values: Sequence[str]) -> list[str]:
    """The values of a colour field in drawing order (precisions wide to narrow)."""
    if field == "precision":
        return sorted(set(values), key=lambda p: (rank(p, ORDER), p))
    return sorted(set(values))


LOG_SPAN = 100.0
"""A panel whose positive values span more than this factor is drawn on a log axis: on a
linear one the smallest bars (0.0018 J/token beside 0.55) would vanish."""


def log_axis(values: Sequence[Any]) -> bool:
    """Whether a panel of ``values`` needs a log axis (its positive values span more than
    :data:`LOG_SPAN`×; a zero or negative value keeps it linear: a log axis cannot show
    it)."""
    nums = [float(v) for v in values if v is not None]
    if not nums or min(nums) <= 0:
        return False
    return max(nums) / min(nums) > LOG_SPAN


HIDDEN = ("mode", *labels.LAST)
"""Fields a line's short name (and a bar's category, when the rest still tells
configurations apart) leaves out: its row of panels says the mode, and the run length does
not make a configuration."""


def variants(configs: Sequence[Config]) -> dict[int, str]:
    """``id(config)`` → the words that tell it from the other configurations of its mode
    (a legend entry or a point's label): the fields varying among them but the mode and
    the run length, a setting off or at its default named (``cuda graphs off``) so no
    line goes without a name."""
    out: dict[int, str] = {}
    modes: dict[str, list[Config]] = {}
    for c in configs:
        modes.setdefault(str(c.identity.get("mode") or "train"), []).append(c)
    for group in modes.values():
        fields = identity.variation(c.identity for c in group).without(*HIDDEN).fields
        for c in group:
            words = []
            for f in fields:
                value = c.identity.get(f)
                words.append(labels.field_text(f, value) or (
                    f"{identity.header(f)} "
                    f"{'off' if value in (None, False, 'off') else identity.fmt_value(value)}"))
            out[id(c)] = " ".join(words)
    return out
