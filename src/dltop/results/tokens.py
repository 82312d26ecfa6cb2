"""What a sample is in a results table: a token for the transformers, else a sample.

The transformer runners count each step's samples as tokens (batch x seq_len;
generated tokens in ``generate``), so their throughput is tokens/s, their
energy J/token and their FLOPs per token. A table of transformers only says so
in its titles and headers; a table of other models only keeps its usual units;
a table that mixes them labels every row (a ``unit`` key column), since one
header cannot name both units. See docs/metrics.md ("Tokens, not samples").
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import replace
from typing import Final

from dltop import catalog
from dltop.results.metricdefs import METRICS, Metric, metric

SAMPLES: Final = "samples"
TOKENS: Final = "tokens"
MIXED: Final = "mixed"
UNIT_METRICS: Final = tuple(n for n, m in METRICS.items() if m.per_sample and
                           re.search(r"\bsamples?\b", m.unit))
"""Metrics whose unit names what a sample is (the others are per step, per run, or %)."""
UNIT_COLUMN: Final = "unit"
"""The key column a mixed table labels each row's unit in."""
NOTE: Final = ("transformer rows ({models}): a sample is a token (batch x seq_len per "
               "training or inference step; generated tokens in generate), so their "
               "throughput is tokens/s, their energy J/token and their TFLOP/s and MFU "
               "count FLOPs per token.")

_MIXED_TITLES: Final = {
    "throughput": "samples per second, tokens per second on the transformer rows (see "
                  "each row's unit; total samples / total measured seconds)",
    "energy": "GPU energy in J per sample, per token on the transformer rows (see each "
              "row's unit)",
    "tflops": "achieved TFLOP/s (training FLOPs per sample × samples/s; per token × "
              "tokens/s on the transformer rows)",
}
"""The title of a table that mixes samples and tokens, in words (the unit and header are
read off the declaration)."""
_SAMPLE = re.compile(r"\bsample(s?)\b")


def is_lm(model: str) -> bool:
    """Whether ``model``'s samples are tokens (a transformer of docs/models.md)."""
    return model in catalog.TRANSFORMER_MODELS


def kind(models: Iterable[str]) -> str:
    """:data:`TOKENS` when every model is a transformer, :data:`SAMPLES` when none is
    (and for no model at all), else :data:`MIXED`."""
    flags = {is_lm(m) for m in models}
    if flags == {True}:
        return TOKENS
    return MIXED if flags == {True, False} else SAMPLES


def metric_for(name: str, models: Iterable[str], modes: Collection[str] = ()) -> Metric:
    """Metric ``name`` with its title, unit and header for a table of ``models`` (of
    runs of ``modes``: :meth:`~dltop.results.metricdefs.Metric.of_modes`).

    Raises:
        ValueError: an unknown metric.
    """
    m, what = metric(name).of_modes(modes), kind(models)
    if not m.per_sample or what == SAMPLES:
        return m
    token = _SAMPLE.sub(r"token\1", m.unit)
    if what == TOKENS:
        return replace(m, title=_SAMPLE.sub(r"token\1", m.title), unit=token,
                       header=_SAMPLE.sub(r"token\1", m.header))
    return replace(m, title=_MIXED_TITLES.get(name, m.title),
                   unit=m.unit if token == m.unit else f"{m.unit} | {token}",
                   header=_SAMPLE.sub(r"sample\1|token\1", m.header))


def row_unit(name: str, model: str) -> str:
    """The unit of metric ``name`` on a row of ``model`` (``tokens/s``, ``J/sample``...)."""
    return metric_for(name, (model,)).unit


def labels_rows(name: str | None, models: Iterable[str]) -> bool:
    """Whether a table of ``models`` needs the per-row unit column (for metric ``name``;
    None: a table of every metric, the summary)."""
    return kind(models) == MIXED and (name is None or name in UNIT_METRICS)


def note(models: Iterable[str]) -> str | None:
    """The note a table with transformer rows carries, else None."""
    lm = sorted({m for m in models if is_lm(m)}, key=catalog.TRANSFORMER_MODELS.index)
    return NOTE.format(models=", ".join(lm)) if lm else None
