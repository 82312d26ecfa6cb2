"""What ``dltop compare`` resamples for each metric it compares (issue 40).

Every metric is a median over a configuration's ok runs of one number per run,
and its interval comes from the same seeded two-level bootstrap
(:mod:`dltop.results.bootstrap`): the runs are drawn with replacement, then each
drawn run's own samples. What a "sample" of a run is depends on the metric:

- ``time``: its measured iterations, the run's median s/iter;
- ``throughput``: its measured iterations, total samples / total seconds;
- ``mfu``: as throughput, times the configuration's FLOPs per sample over its
  devices' peak (a constant per configuration, so the interval scales with it);
- ``ttft``, ``tpot``: its measured generation requests, the run's median;
- ``energy``: the run's J/sample (J/token for a transformer): one number per run,
  so a single run has no within-run spread to show.

A configuration whose table cell has no value (:func:`dltop.results.metrics.value_of`:
too few readings, simulated GPUs, a training run's TTFT...) is not compared on
that metric, and says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dltop.results import bootstrap
from dltop.results.aggregate import ConfigResult
from dltop.results.bootstrap import RunStat, Sample
from dltop.results.metricdefs import BY_FLOPS, DECLARED, metric
from dltop.results.metrics import value_of

ALL = tuple(m.name for m in (*DECLARED, *BY_FLOPS) if m.words)
"""The metrics compare gives a ratio of (those whose declaration has verdict words), with
MFU by torchtitan's FLOPs count (``--metric mfu --flops no-embedding``)."""
METRICS = tuple(n for n in ALL if metric(n).pivot)
"""Those of :data:`ALL` asked for by name, in the order ``--by`` lists them."""
WORSE = frozenset(metric(n).words[1] for n in ALL)
"""The verdicts ``--fail-on-regression`` counts."""
_TIMED = ("time", "throughput")


@dataclass(frozen=True)
class Sides:
    """One configuration's samples of one metric, as the bootstrap takes them."""

    runs: list[list[Sample]] | None
    """Per ok run, its samples (``(value, weight)``); None: not comparable."""
    stat: RunStat = bootstrap.run_median_s
    scale: float = 1.0
    """The metric is ``scale`` × the median over runs of ``stat``."""
    reason: str = ""
    """Why :attr:`runs` is None (a status label or ``n/a: ...``)."""

    @property
    def n_runs(self) -> int:
        """Runs behind the value."""
        return len(self.runs or ())

    @property
    def within_run(self) -> bool:
        """Whether each run has several samples: a spread inside the run to resample."""
        return bool(self.runs) and all(len(r) > 1 for r in self.runs or ())

    def value(self) -> float:
        """The metric's value (``runs`` must be set)."""
        assert self.runs is not None
        return self.scale * bootstrap.estimate(self.runs, self.stat)


def _iterations(r: ConfigResult) -> list[list[Sample]] | None:
    if not r.runs or any(not x.iterations for x in r.runs):
        return None
    if any(not math.isfinite(s) for x in r.runs for s, _ in x.iterations):
        return None  # an old database's infinite time: no interval (bootstrap refuses it)
    return [list(x.iterations) for x in r.runs]


def sides(r: ConfigResult, metric: str) -> Sides:
    """What the bootstrap resamples for ``metric`` of configuration ``r``.

    Raises:
        ValueError: an unknown metric.
    """
    if metric not in ALL:
        raise ValueError(f"unknown compare metric {metric!r}")
    if metric in _TIMED:  # the iterations, as compare has always taken them
        runs = _iterations(r)
        stat = bootstrap.STATS[metric]
        return Sides(runs, stat, reason="" if runs is not None else r.label)
    shown = value_of(r, metric)
    if shown.value is None:
        return Sides(None, reason=shown.reason or "n/a")
    if metric in ("mfu", "mfu-no-embedding"):
        runs = _iterations(r)
        sps = bootstrap.estimate(runs, bootstrap.run_samples_per_s) if runs else 0.0
        if runs is None or sps <= 0:
            return Sides(None, reason="n/a: no iterations")
        return Sides(runs, bootstrap.run_samples_per_s, shown.value / sps)
    if metric == "energy":
        name = "joules_per_sample" if r.device_kind == "gpu" else "cpu_joules_per_sample"
        per_run = [[(float(v), 1)] for x in r.runs if (v := x.get(name)) is not None]
        return Sides(per_run or None, reason="" if per_run else "n/a: not sampled")
    per_run = [[(float(v), 1) for q in x.generations
                if (v := q.ttft_s if metric == "ttft" else q.tpot_s) is not None]
               for x in r.runs]
    per_run = [p for p in per_run if p]
    return Sides(per_run or None, reason="" if per_run else shown.reason or "n/a")
