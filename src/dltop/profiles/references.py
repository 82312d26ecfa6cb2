"""Performance references: ReFrame-style expected values with tolerances (docs/cluster.md).

A reference table maps a configuration pattern to expected metrics::

    "gpt2-small/torch/bf16" = { tokens_per_s = [510000, -0.05, 0.10] }
    "fcn-r/torch/fp32/cpu:1/b8" = { s_per_iter = [0.002, -0.5, 0.5] }

The pattern is ``model/framework/precision``, optionally followed by a device label and
a batch (``b8``), any part ``*``. The value is ``[reference, lower, upper]``: the band
is ``reference x (1 + lower)`` to ``reference x (1 + upper)`` (``lower <= 0 <= upper``).
Tables come from the profile (``[references]``: patterns for every system, or
``[references.SYSTEM]`` tables) and from the config (``[systems.NAME.references]``);
:func:`resolve` picks, per metric, the rule of the highest layer, then the most
specific pattern. Everything here is pure and standard-library.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dltop import catalog
from dltop.errors import UserError
from dltop.profiles.limits import MAX_REFERENCE, MAX_UPPER_TOLERANCE

METRICS: dict[str, str] = {
    "tokens_per_s": "tokens/s",
    "samples_per_s": "samples/s",
    "s_per_iter": "s",
}
"""The metrics a reference may name, with their units. ``tokens_per_s`` and
``samples_per_s`` are the summary's throughput (tokens for the transformers, samples
otherwise), ``s_per_iter`` its median seconds per iteration."""

_DEVICE = re.compile(r"^(cpu|cpus|gpu):[0-9]+$")
_BATCH = re.compile(r"^b([0-9]+)$")

Err = Callable[[str, str], UserError]


@dataclass(frozen=True)
class Reference:
    """One expected metric of a configuration: pass while the measurement reaches the band
    ``value x (1 + lower)`` .. ``value x (1 + upper)``."""

    metric: str
    """A key of :data:`METRICS`."""
    value: float
    lower: float
    """Relative lower tolerance, <= 0 (``-0.05``: 5 % below)."""
    upper: float
    """Relative upper tolerance, >= 0."""
    pattern: str = ""
    """The pattern that matched (for messages)."""

    @property
    def band(self) -> tuple[float, float]:
        """The accepted range in the metric's unit."""
        return self.value * (1 + self.lower), self.value * (1 + self.upper)


@dataclass(frozen=True)
class Rule:
    """One pattern of a reference table with its metrics."""

    pattern: str
    parts: tuple[str, ...]
    """model, framework, precision, device, batch; ``*`` matches anything."""
    metrics: tuple[tuple[str, float, float, float], ...]
    layer: int = 0
    """Higher wins over lower (profile over config, a system's table over ``*``)."""

    @property
    def specificity(self) -> int:
        return sum(1 for p in self.parts if p != "*")

    def matches(self, model: str, framework: str, precision: str, device: str,
                batch: int) -> bool:
        want = (model, framework, precision, device, f"b{batch}")
        return all(p in ("*", w) for p, w in zip(self.parts, want, strict=True))


def parse_rules(err: Err, where: str, table: Any, layer: int = 0) -> tuple[Rule, ...]:
    """The patterns of one reference table (``{pattern: {metric: [v, lo, hi]}}``).

    Raises:
        UserError: via ``err(key, message)``, naming the pattern and metric at fault.
    """
    if not isinstance(table, dict):
        raise err(where, 'expected a table of "model/framework/precision" = '
                  "{ metric = [reference, lower, upper] }")
    out = []
    for pattern, metrics in table.items():
        key = f'{where}."{pattern}"'
        parts = _pattern(err, key, pattern)
        if not isinstance(metrics, dict) or not metrics:
            raise err(key, "expected a table like { tokens_per_s = [510000, -0.05, 0.10] }")
        values = []
        for metric, triple in metrics.items():
            if metric not in METRICS:
                raise err(f"{key}.{metric}", f"unknown metric (expected one of "
                          f"{', '.join(METRICS)})")
            values.append((metric, *_triple(err, f"{key}.{metric}", triple)))
        out.append(Rule(pattern, parts, tuple(values), layer))
    return tuple(out)


def _pattern(err: Err, key: str, pattern: str) -> tuple[str, ...]:
    parts = pattern.split("/")
    if not 3 <= len(parts) <= 5 or not all(parts):
        raise err(key, "expected model/framework/precision[/device][/bBATCH] (any part *)")
    model, framework, precision, *rest = parts
    if framework not in ("*", *catalog.FRAMEWORKS):
        raise err(key, f"unknown framework {framework!r} (expected * or one of "
                  f"{', '.join(catalog.FRAMEWORKS)})")
    if precision not in ("*", *catalog.PRECISIONS):
        raise err(key, f"unknown precision {precision!r} (expected * or one of "
                  f"{', '.join(catalog.PRECISIONS)})")
    device = batch = "*"
    for part in rest:
        if _DEVICE.match(part) and device == "*":
            device = part
        elif _BATCH.match(part) and batch == "*":
            batch = part
        elif part != "*":
            raise err(key, f"{part!r}: expected a device (cpu:2, gpu:4) or a batch (b256)")
    return model, framework, precision, device, batch


def _triple(err: Err, key: str, v: Any) -> tuple[float, float, float]:
    def num(x: Any) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool)

    if not isinstance(v, list) or len(v) != 3 or not all(num(x) for x in v):
        raise err(key, f"expected [reference, lower, upper] (three numbers, e.g. "
                  f"[510000, -0.05, 0.10]), got {v!r}")
    value, lower, upper = (float(x) for x in v)
    # NaN fails every comparison: each test is written so that it refuses NaN too
    if not (math.isfinite(value) and 0 < value <= MAX_REFERENCE):
        raise err(key, f"the reference must be a finite number > 0 and <= "
                  f"{MAX_REFERENCE:g}, got {v[0]!r}")
    if not -1 <= lower <= 0:
        raise err(key, f"the lower tolerance is relative, from -1 to 0 (a finite number; "
                  f"-0.05: 5 % below), got {v[1]!r}")
    if not 0 <= upper <= MAX_UPPER_TOLERANCE:
        raise err(key, f"the upper tolerance is relative, a finite number >= 0 and <= "
                  f"{MAX_UPPER_TOLERANCE:g} (0.10: 10 % above), got {v[2]!r}")
    return value, lower, upper


PROFILE_LAYER, SYSTEM_LAYER = 1, 2
"""Layers of a profile's references: its patterns for every system, then those of its
``[references.SYSTEM]`` table (a system's own, from the config, are layer 0)."""


def profile_rules(err: Err, table: Any, system: str | None,
                  system_rules: Sequence[Rule] = ()) -> tuple[Rule, ...]:
    """The rules that apply on ``system``: its own (``system_rules``, the config's), the
    profile's patterns for every system, and the profile's ``[references.SYSTEM]``.

    Raises:
        UserError: via ``err``: a table of the profile's ``[references]`` is malformed
            (every system's table is checked, whichever system this run is on).
    """
    rules = list(system_rules)
    if table is None:
        return tuple(rules)
    if not isinstance(table, dict):
        raise err("references", 'expected a table [references] of "model/framework/'
                  'precision" = { metric = [reference, lower, upper] }')
    common = {k: v for k, v in table.items() if "/" in k}
    rules += parse_rules(err, "references", common, PROFILE_LAYER)
    for name, sub in table.items():
        if "/" not in name:
            own = parse_rules(err, f"references.{name}", sub, SYSTEM_LAYER)
            if name == system:
                rules += own
    return tuple(rules)


def resolve(err: Err, rules: Sequence[Rule], model: str, framework: str, precision: str,
            device: str, batch: int) -> tuple[Reference, ...]:
    """The references of one configuration: per metric, the matching rule of the highest
    layer, then the most specific pattern.

    Raises:
        UserError: two equally specific patterns of one layer give the same metric, or a
            metric that does not fit the model (``tokens_per_s`` of a CNN).
    """
    best: dict[str, tuple[tuple[int, int], Rule, tuple[float, float, float]]] = {}
    for rule in rules:
        if not rule.matches(model, framework, precision, device, batch):
            continue
        rank = (rule.layer, rule.specificity)
        for metric, value, lower, upper in rule.metrics:
            seen = best.get(metric)
            if seen is not None and seen[0] == rank and seen[1].pattern != rule.pattern:
                raise err("references", f'"{seen[1].pattern}" and "{rule.pattern}" both give '
                          f"{metric} for {model}/{framework}/{precision} {device} b{batch}; "
                          "make one more specific")
            if seen is None or rank > seen[0]:
                best[metric] = (rank, rule, (value, lower, upper))
    out = []
    for metric, (_, rule, (value, lower, upper)) in sorted(best.items()):
        lm = model in catalog.TRANSFORMER_MODELS
        if (metric == "tokens_per_s" and not lm) or (metric == "samples_per_s" and lm):
            right = "samples_per_s" if metric == "tokens_per_s" else "tokens_per_s"
            raise err(f'references."{rule.pattern}".{metric}', f"{model}'s throughput is "
                      f"counted in {METRICS[right]}: use {right}")
        out.append(Reference(metric, value, lower, upper, rule.pattern))
    return tuple(out)


def references_to_json(refs: Sequence[Reference]) -> list[dict[str, Any]]:
    """Plain JSON of a job's references (its spec.json)."""
    return [{"metric": r.metric, "value": r.value, "lower": r.lower, "upper": r.upper,
             "pattern": r.pattern} for r in refs]


def references_from_json(data: Any) -> tuple[Reference, ...]:
    """Inverse of :func:`references_to_json` (anything else: none)."""
    if not isinstance(data, list):
        return ()
    return tuple(Reference(str(d["metric"]), float(d["value"]), float(d["lower"]),
                           float(d["upper"]), str(d.get("pattern", "")))
                 for d in data if isinstance(d, Mapping))
