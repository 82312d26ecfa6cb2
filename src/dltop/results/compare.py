"""``dltop compare A B``: per configuration, B/A of a metric with a confidence interval.

Configurations are paired by identity (:mod:`dltop.results.identity`: every
setting of the profile that can change the measurement) without the
interpreter, since the environment (another venv, framework version or host) is
what a comparison usually measures; a campaign that ran one configuration under
two interpreters keeps them apart by it. The rows show model, framework, batch,
device, precision and any other identity field that varies. For each
pair the ratio B/A of the median (``time``: median over runs of each run's
median s/iter; ``throughput``: median over runs of total samples / total
seconds) comes with a 95 % interval from a seeded two-level bootstrap of both
sides' measured iterations (:mod:`dltop.results.bootstrap`). As in pyperf's
``compare_to`` and asv's ``compare``, a change is called only when it is both
statistically and practically significant: the interval excludes 1 *and* the
ratio differs from 1 by more than the threshold. Otherwise the verdict is
``no significant change``.

A pair where either side is flagged (noisy, packed, shared, contaminated or
simulated: :func:`dltop.results.summary.flags`) is ``inconclusive``: its ratio and
interval are shown, but a flagged measurement cannot gate a change, so
``--fail-on-regression`` ignores it. ``allow_flagged`` gives such pairs their
verdict anyway (the flags stay in the table).

Either side may be several campaigns (``3,5``, ``all``, a name: see
:func:`dltop.results.queries.resolve_campaigns`); their configurations merge as
in an export (same identity on the same host and GPU model). The comparison's table
is :mod:`dltop.results.comparetable`'s.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dltop import catalog
from dltop.errors import UserError
from dltop.results import bootstrap, comparemetrics, identity, idread
from dltop.results.aggregate import ConfigResult, config_results
from dltop.results.metricdefs import metric as metric_spec
from dltop.results.places import device_key, rank

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils

SAME = "no significant change"
INCONCLUSIVE = "inconclusive"
ONE_RUN = "one run"
"""Why a pair of which a side has a single ok run is inconclusive: its interval would
be of that run's iterations, not across repeats (docs/metrics.md, statistics policy)."""
ACROSS, WITHIN = "across repeats", "within-run"
"""What a pair's interval resamples: runs and their samples, or one run's samples only
(``--within-run``)."""
GATING_FLAGS = ("noisy", "packed", "shared", "contaminated", "simulated")
"""The flags that make a pair inconclusive (``incomplete`` does not: fewer repeats
widen the interval, which the verdict already accounts for)."""


@dataclass(frozen=True)
class Comparison:
    """One configuration of A and/or B."""

    label: tuple[Any, ...]
    """(model, framework, batch, device, then the identity's row keys: precision)."""
    config_key: str
    verdict: str
    """``faster``, ``slower``, ``no significant change``, ``only in A``, ``only in B``,
    or ``not comparable: ...`` (a side without an ok run with iterations)."""
    a: float | None = None
    b: float | None = None
    ratio: float | None = None
    """B/A of the metric."""
    ci_low: float | None = None
    ci_high: float | None = None
    identity: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The identity the two sides were paired by (flat; see :func:`pairing`)."""
    flags_a: tuple[str, ...] = ()
    """A's flags (:func:`dltop.results.summary.flags`), empty when A has no such side."""
    flags_b: tuple[str, ...] = ()
    flagged_verdict: str | None = None
    """For an ``inconclusive`` pair of a flagged side: the verdict its numbers alone would
    give."""
    metric: str = "time"
    runs_a: int = 0
    """A's ok runs behind its value (0: no such side)."""
    runs_b: int = 0
    interval: str = ""
    """:data:`ACROSS`, :data:`WITHIN`, or empty without an interval."""
    why: str = ""
    """Why an ``inconclusive`` pair is: ``flagged`` or :data:`ONE_RUN`."""

    @property
    def regression(self) -> bool:
        """B is significantly worse than A (slower, more energy, lower MFU), and neither
        side is flagged (or flags were allowed)."""
        return self.verdict in comparemetrics.WORSE

    @property
    def inconclusive(self) -> bool:
        """A flagged side keeps the pair from a verdict."""
        return self.verdict == INCONCLUSIVE


def _label(r: ConfigResult) -> tuple[Any, ...]:
    return (r.model, r.framework, r.batch_size, r.device,
            *(r.identity.get(name) for name in identity.ROW_KEYS))


def verdict(ratio: float, low: float, high: float, metric: str, threshold: float) -> str:
    """``faster``, ``slower`` (for energy ``less``/``more energy``, for MFU ``higher``/
    ``lower MFU``) or ``no significant change`` for B/A of ``metric``."""
    if low <= 1.0 <= high or abs(ratio - 1.0) <= threshold:
        return SAME
    better, worse = metric_spec(metric).words
    return better if (ratio > 1.0) == metric_spec(metric).higher else worse


def bare(r: ConfigResult) -> dict[str, Any]:
    """A configuration's identity without the interpreter."""
    return {k: v for k, v in r.identity.items() if k != idread.INTERPRETER}


def bare_key(r: ConfigResult) -> str:
    """:func:`dltop.results.identity.key` of :func:`bare`."""
    return idread.key(bare(r))


def pairing(results: list[ConfigResult], placed: frozenset[str] = frozenset(),
            ) -> dict[str, tuple[dict[str, Any], ConfigResult]]:
    """A side's configurations by the identity they pair by: their identity without
    the interpreter, or with it where two configurations differ only by it; with the
    host and GPU model too for identities in ``placed`` (:func:`bare_key` s that occur
    on several hosts or GPU models of one side)."""
    def where(r: ConfigResult) -> dict[str, Any]:
        return {"host": r.host, "gpu": r.gpu_name} if bare_key(r) in placed else {}

    count = Counter(idread.key({**bare(r), **where(r)}) for r in results)
    out: dict[str, tuple[dict[str, Any], ConfigResult]] = {}
    for r in results:
        ident = bare(r) if count[idread.key({**bare(r), **where(r)})] == 1 \
            else dict(r.identity)
        ident.update(where(r))
        out[idread.key(ident)] = (ident, r)
    return out


def placed_keys(*sides: Sequence[ConfigResult]) -> frozenset[str]:
    """The :func:`bare_key` s that occur on several hosts or GPU models of one side: an
    identity on several places pairs place by place; one place per side (A on one host,
    B on another) pairs across them."""
    placed: set[str] = set()
    for side in sides:
        places: dict[str, set[tuple[str, str]]] = {}
        for r in side:
            places.setdefault(bare_key(r), set()).add(r.place)
        placed |= {k for k, where in places.items() if len(where) > 1}
    return frozenset(placed)


def side_flags(r: ConfigResult | None) -> tuple[str, ...]:
    """A side's flags (:func:`dltop.results.summary.flags`) that gate a verdict."""
    from dltop.results.summary import flags

    return () if r is None else tuple(f for f in flags(r) if f in GATING_FLAGS)


def compare_pair(a: ConfigResult | None, b: ConfigResult | None, metric: str,
                 threshold: float, pair_identity: dict[str, Any],
                 allow_flagged: bool = False, within_run: bool = False) -> Comparison:
    """B/A of ``metric`` for one pair, its interval and its verdict.

    The interval is across repeats (both sides' runs resampled, then each run's
    samples); a side with a single ok run makes the pair ``inconclusive`` (why:
    :data:`ONE_RUN`; its ratio is shown, no interval) unless ``within_run``, which
    takes the interval from the runs' own samples and labels it :data:`WITHIN`. A
    flagged side makes it ``inconclusive`` (why: ``flagged``) unless ``allow_flagged``.
    """
    some = a or b
    assert some is not None
    label, ident = _label(some), pair_identity
    key = idread.key(ident)
    fa, fb = side_flags(a), side_flags(b)
    base: dict[str, Any] = {"identity": ident, "flags_a": fa, "flags_b": fb, "metric": metric}
    if a is None or b is None:
        return Comparison(label, key, "only in B" if a is None else "only in A", **base)
    sa, sb = comparemetrics.sides(a, metric), comparemetrics.sides(b, metric)
    counts: dict[str, Any] = {"runs_a": len(a.runs), "runs_b": len(b.runs)}
    if sa.runs is None or sb.runs is None:
        side, why = ("A", sa.reason) if sa.runs is None else ("B", sb.reason)
        return Comparison(label, key, f"not comparable: {side} {why}", **base, **counts)
    va, vb = sa.value(), sb.value()
    ratio = vb / va if va > 0 else math.nan
    one = min(sa.n_runs, sb.n_runs) < 2
    if one and not (within_run and sa.within_run and sb.within_run):
        # a single run's samples say how precisely that run was timed, not where a
        # second run would land: no interval, no verdict (docs/metrics.md)
        return Comparison(label, key, INCONCLUSIVE, va, vb, ratio, **base, **counts,
                          why=ONE_RUN)
    _, low, high = bootstrap.ratio_ci(sa.runs, sb.runs, sa.stat)
    scale = sb.scale / sa.scale
    low, high = low * scale, high * scale
    said = verdict(ratio, low, high, metric, threshold)
    gated = bool(fa or fb) and not allow_flagged
    return Comparison(label, key, INCONCLUSIVE if gated else said, va, vb, ratio, low, high,
                      **base, flagged_verdict=said if gated else None, **counts,
                      interval=WITHIN if one else ACROSS, why="flagged" if gated else "")


def check_options(metric: str | None, threshold: float) -> None:
    """The errors of :func:`compare` for its options.

    Raises:
        UserError: an unknown metric or a negative threshold.
    """
    if metric is not None and metric not in comparemetrics.ALL:
        raise UserError(f"compare --metric: use one of {', '.join(comparemetrics.METRICS)}")
    if threshold < 0:
        raise UserError("compare --threshold must be >= 0 (e.g. 0.05 for 5 %)")


def compare(db: sqlite_utils.Database, a_id: int | Sequence[int], b_id: int | Sequence[int],
            metric: str = "time", threshold: float = 0.05,
            allow_flagged: bool = False, within_run: bool = False) -> list[Comparison]:
    """Every configuration of campaign(s) ``a_id`` and ``b_id``, paired by identity.

    A pair with a flagged side is ``inconclusive`` unless ``allow_flagged``; one with a
    single-run side is unless ``within_run`` (:func:`compare_pair`).

    Raises:
        UserError: an unknown metric, a negative threshold, the same campaigns on both
            sides, or no configuration in common.
    """
    check_options(metric, threshold)
    if _id_set(a_id) == _id_set(b_id):
        raise UserError(f"compare A B: A and B are the same campaign(s) ({_ids(a_id)}); "
                        "to compare settings inside one campaign: "
                        f"dltop compare {_ids(a_id)} --by SETTING")
    ra, rb = config_results(db, a_id), config_results(db, b_id)
    placed = placed_keys(ra, rb)
    a, b = pairing(ra, placed), pairing(rb, placed)
    if not a.keys() & b.keys():
        raise UserError(f"campaigns {_ids(a_id)} and {_ids(b_id)} have no configuration "
                        "in common")
    out = [compare_pair(a[k][1] if k in a else None, b[k][1] if k in b else None, metric,
                        threshold, (a.get(k) or b[k])[0], allow_flagged, within_run)
           for k in {**a, **b}]
    out.sort(key=lambda c: (rank(c.label[0], catalog.MODELS),
                            rank(c.label[1], catalog.FRAMEWORKS), c.label[2],
                            device_key(c.label[3]),
                            *(identity.sort_value(v) for v in c.label[4:]), c.config_key))
    return out


def _id_set(ids: int | Sequence[int]) -> frozenset[int]:
    return frozenset([ids] if isinstance(ids, int) else ids)


def _ids(ids: int | Sequence[int]) -> str:
    return str(ids) if isinstance(ids, int) else ",".join(str(i) for i in ids)
