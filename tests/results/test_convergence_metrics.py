"""Convergence and inference metrics (results.convergence, results.metrics): the rules,
then per configuration from runs stored in a real database."""

from __future__ import annotations

import statistics

import pytest
from tests.results.conftest import CampaignMaker

from dltop.results import identity
from dltop.results.aggregate import ConfigResult, config_results
from dltop.results.convergence import (
    EvalPoint,
    epoch_time,
    final_accuracy,
    min_samples,
    percentile,
    percentile_or_none,
    percentiles,
    time_to_accuracy,
)
from dltop.results.metricdefs import metric
from dltop.results.metrics import value_of
from dltop.store import Store, memory_db


def ev(idx: int, epoch: float | None, acc: float | None, train_s: float,
       eval_s: float = 1.0) -> EvalPoint:
    return EvalPoint(idx, epoch, acc, None, 0.5, eval_s, train_s)


CURVE = (ev(9, 1.0, 0.50, 10.0, 2.0), ev(19, 2.0, 0.80, 21.0, 3.0),
         ev(29, 3.0, 0.79, 30.0, 4.0), ev(39, 4.0, 0.90, 42.0, 5.0))


def test_time_to_accuracy_is_the_first_eval_at_or_above_the_target() -> None:
    reached = time_to_accuracy(CURVE, 0.8)  # exactly the target counts
    assert reached is not None
    # training seconds only; the evaluations up to it (2 + 3 s) reported apart
    assert (reached.train_s, reached.eval_s, reached.epoch) == (21.0, 5.0, 2.0)
    later = time_to_accuracy(CURVE, 0.85)  # the dip at epoch 3 does not count
    assert later is not None and (later.train_s, later.eval_s) == (42.0, 14.0)
    assert time_to_accuracy(CURVE, 0.95) is None  # not reached
    assert time_to_accuracy((ev(9, 1.0, None, 5.0),), 0.1) is None  # perplexity only


def test_final_accuracy_and_epoch_time() -> None:
    assert final_accuracy(CURVE) == 0.90 and final_accuracy(()) is None
    # per epoch: 10, 11, 9, 12 training seconds -> median 10.5
    assert epoch_time(CURVE) == 10.5
    # evaluations every half epoch: per-epoch rate of each interval
    halves = (ev(4, 0.5, 0.3, 4.0), ev(9, 1.0, 0.4, 9.0), ev(14, 1.5, 0.5, 15.0))
    assert epoch_time(halves) == pytest.approx(10.0)
    assert epoch_time((ev(9, None, 0.5, 3.0),)) is None


def test_latency_percentiles_match_the_inclusive_rule() -> None:
    xs = [0.010, 0.012, 0.011, 0.030, 0.013, 0.011, 0.012, 0.015, 0.010, 0.014]
    q = statistics.quantiles(xs, n=100, method="inclusive")
    p50, p90, p99 = percentiles(xs) or (0, 0, 0)
    assert (p50, p90) == pytest.approx((q[49], q[89]))
    assert p99 is None  # 10 samples: too few for a p99 (n >= 100)
    assert percentile([1.0], 99) == 1.0 and percentiles([]) is None
    many = [0.01 + 0.0001 * (i % 37) for i in range(100)]
    q = statistics.quantiles(many, n=100, method="inclusive")
    assert percentiles(many) == pytest.approx((q[49], q[89], q[98]))


def test_a_percentile_needs_enough_samples() -> None:
    assert [min_samples(q) for q in (50, 90, 95, 99, 99.9)] == [1, 10, 20, 100, 1000]
    assert [min_samples(q) for q in (10, 1)] == [10, 100]  # below the median alike
    assert percentiles([0.1] * 9) == (0.1, None, None)
    assert percentiles([0.1] * 99)[1:] == (0.1, None)  # type: ignore[index]
    assert percentile_or_none([0.1] * 10, 99) is None
    assert percentile_or_none([0.1] * 10, 90) == 0.1


def test_a_p99_of_ten_batches_is_n_a_n_10() -> None:
    """One function for every percentile a table shows: the latency cell of an
    inference configuration with 10 measured batches gives p50 and p90, and says
    ``n/a: n=10`` for p99, in the text and as null in the detail."""
    db = memory_db()
    cid, jobs = CampaignMaker.create(
        db, '[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\nbatch_sizes = [8]\n'
            'devices = ["cpu:1"]\nmode = "inference"\n')
    CampaignMaker.add_run(db, cid, jobs[0][1], [0.01 * (i + 1) for i in range(10)])
    (res,) = config_results(db, cid)
    val = value_of(res, "latency")
    assert val.value == pytest.approx(0.055)
    # n is said once, by the p99's reason (it read "n/a: n=10 (n 10)")
    assert val.suffix.endswith("/ n/a: n=10") and "(n " not in val.suffix
    assert dict(val.extra)["p99_s"] is None
    assert dict(val.extra)["p90_s"] == pytest.approx(0.091)


PROFILE = """
name = "conv"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["cpu:1"]
data = "real"
data_dir = "/data"
epochs = 4
target_accuracy = {target}
repeats = 2
"""


def _stored(target: float, curves: list[tuple[EvalPoint, ...]]) -> list[ConfigResult]:
    db = memory_db()
    store = Store(db)
    cid, jobs = CampaignMaker.create(db, PROFILE.format(target=target))
    for (_, job_id), curve in zip(jobs, curves, strict=True):
        run_id = CampaignMaker.add_run(db, cid, job_id, [0.1, 0.1, 0.1])
        store.add_evals(run_id, [{"idx": e.idx, "epoch": e.epoch, "accuracy": e.accuracy,
                                  "loss": e.loss, "eval_s": e.eval_s, "train_s": e.train_s}
                                 for e in curve])
    (res,) = config_results(db, cid)
    return [res]


def test_a_configuration_reports_the_runs_that_reached_and_says_how_many() -> None:
    other = tuple(EvalPoint(e.idx, e.epoch, e.accuracy, None, e.loss, e.eval_s,
                            e.train_s + 10) for e in CURVE)
    (res,) = _stored(0.8, [CURVE, other])
    tta = value_of(res, "time-to-accuracy")
    assert tta.value == 26.0 and "(eval 5)" in tta.text(metric("time-to-accuracy"))
    assert value_of(res, "accuracy").value == pytest.approx(0.90)
    # per run: median of (10, 11, 9, 12) and of (20, 11, 9, 12); over runs, their median
    assert value_of(res, "epoch-time").value == statistics.median([10.5, 11.5])
    (partial,) = _stored(0.85, [CURVE, CURVE[:3]])
    text = value_of(partial, "time-to-accuracy")
    assert text.value == 42.0 and "(1/2 reached)" in text.text(metric("time-to-accuracy"))
    (never,) = _stored(0.95, [CURVE, CURVE])
    assert value_of(never, "time-to-accuracy").reason == "not reached"
    assert value_of(never, "latency").reason == "n/a: training run"



def test_an_epochs_configuration_claims_its_epochs_not_the_unused_iterations() -> None:
    """The spec of an epochs job keeps the default iterations (50), which the runner
    ignores: a caption saying "iterations 50" would be a false claim."""
    (res,) = _stored(0.8, [CURVE, CURVE])
    assert res.identity["epochs"] == 4 and res.identity["iterations"] is None
    text = identity.variation([res.identity]).caption()
    assert "epochs 4" in text and "iterations" not in text, text


def test_time_to_perplexity_is_the_first_eval_at_or_below_the_target() -> None:
    from dltop.results.convergence import time_to_perplexity

    def pp(idx: int, ppl: float | None, train_s: float) -> EvalPoint:
        return EvalPoint(idx, float(idx), None, ppl, 5.0, 1.0, train_s)

    curve = (pp(1, 400.0, 10.0), pp(2, 150.0, 20.0), pp(3, 170.0, 30.0), pp(4, 90.0, 40.0))
    reached = time_to_perplexity(curve, 150.0)  # exactly the target counts
    assert reached is not None and (reached.train_s, reached.eval_s) == (20.0, 2.0)
    later = time_to_perplexity(curve, 100.0)  # the rise at evaluation 3 does not count
    assert later is not None and later.train_s == 40.0
    assert time_to_perplexity(curve, 50.0) is None  # not reached
    assert time_to_perplexity(CURVE, 1e9) is None  # accuracy only: no perplexity
