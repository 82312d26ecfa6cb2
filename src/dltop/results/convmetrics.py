"""The compute functions (:func:`dltop.results.metricdefs.computes`) of the metrics of
some modes: accuracy and perplexity (means over the ok runs of the last evaluation's),
time-to-accuracy or -perplexity and epoch time (medians over runs), latency percentiles
over the measured iterations of every ok run together, a generate run's TTFT, TPOT, ITL
percentiles and decode tokens/s (:mod:`dltop.results.generation`), and a serve run's.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from dltop.results import convergence as conv
from dltop.results import generation as gen
from dltop.results import lmcost, serving
from dltop.results.aggregate import ConfigResult, RunRecord, floats
from dltop.results.metricdefs import REQUESTS, Value, computes
from dltop.results.metricdefs import mean_or_none as _mean
from dltop.results.table import fmt_seconds
from dltop.store.generations import DISTINCT_COLUMN


def may_have_value(res: ConfigResult) -> bool:
    """False where none of these metrics can have a value: no ok run, or training runs
    that never evaluated (a table asks each of them of every configuration)."""
    return bool(res.runs) and (res.identity.get("mode", "train") in REQUESTS
                               or any(r.evals for r in res.runs))


@computes("latency")
def _latency(res: ConfigResult) -> Value:
    """Percentiles over the measured iterations of every ok run together."""
    if res.identity.get("mode", "train") not in REQUESTS:
        return Value(None, "n/a: training run")
    seconds = [s for r in res.runs for s, _ in r.iterations]
    lat = conv.percentiles(seconds)
    if lat is None:
        return Value(None, "n/a: not sampled")
    return _percentiles(lat, len(seconds))


def _evaluated(of: Callable[[ConfigResult, list[RunRecord]], Value],
               ) -> Callable[[ConfigResult], Value]:
    """A metric of the runs' evaluations (``of`` the evaluated runs): ``n/a: no
    evaluations`` where none evaluated."""
    def compute(res: ConfigResult) -> Value:
        evaluated = [r for r in res.runs if r.evals]
        return of(res, evaluated) if evaluated else Value(None, "n/a: no evaluations")
    return compute


def _per_run(read: Callable[[Sequence[conv.EvalPoint]], float | None],
             over: Callable[[list[float]], float | None], none: str,
             ) -> Callable[[ConfigResult], Value]:
    """``over`` the evaluated runs of what ``read`` finds in each one's evaluations."""
    def of(res: ConfigResult, evaluated: list[RunRecord]) -> Value:
        got = [x for x in (read(r.evals) for r in evaluated) if x is not None]
        return Value(over(got)) if got else Value(None, none)
    return _evaluated(of)


computes("accuracy")(_per_run(conv.final_accuracy, _mean, "n/a: no accuracy (perplexity)"))
computes("perplexity")(_per_run(conv.final_perplexity, _mean, "n/a: no perplexity"))
computes("epoch-time")(_per_run(conv.epoch_time, statistics.median, "n/a: no epochs"))
computes("time-to-accuracy")(_evaluated(lambda res, ev: _time_to(
    res, [(r, r.target_accuracy) for r in ev], conv.time_to_accuracy, "target_accuracy")))
computes("time-to-perplexity")(_evaluated(lambda res, ev: _time_to(
    res, [(r, r.target_perplexity) for r in ev], conv.time_to_perplexity,
    "target_perplexity")))


def _serving(name: str) -> Callable[[ConfigResult], Value]:
    """A serving metric (:mod:`dltop.results.serving`): percentiles like latency's, rates
    and the error share as numbers, ``n/a`` with the reason for other runs."""
    def compute(res: ConfigResult) -> Value:
        value, why, detail = serving.serving_numbers(res, name)
        if value is None:
            return Value(None, why)
        if "p90_s" in detail:
            return _percentiles((value, detail["p90_s"], detail["p99_s"]),
                                int(detail["n"] or 0))
        said = [f"asked {detail['asked']:g}"] if detail.get("asked") is not None else []
        if detail.get("runs"):  # several runs: their spread beside the median
            said.append(f"{detail['min']:.4g}-{detail['max']:.4g} over "
                        f"{detail['runs']:.0f} runs")
        suffix = f" ({'; '.join(said)})" if said else ""
        return Value(value, suffix=suffix, extra=tuple(detail.items()))
    return compute


for _name in serving.SERVING_NUMBERS:  # a declared one missing here: check_computed says
    computes(_name)(_serving(_name))


def _percentiles(p: conv.Percentiles, n: int) -> Value:
    """p50 with p90 / p99 after it; a percentile from too few samples says so
    (``n/a: n=10``, :func:`dltop.results.convergence.min_samples`)."""
    p50, p90, p99 = p

    def shown(v: float | None) -> str:
        return conv.too_few(n) if v is None else fmt_seconds(v)

    # a percentile from too few samples already names n: said once
    count = "" if p99 is None else f" (n {n})"
    missing = [q for q, v in (("p90", p90), ("p99", p99)) if v is None]
    return Value(p50, suffix=f" / {shown(p90)} / {shown(p99)}{count}",
                 reason=f"{', '.join(missing)} {conv.too_few(n)}" if missing else "",
                 extra=(("p50_s", p50), ("p90_s", p90), ("p99_s", p99), ("n", float(n))))


Requests = list[gen.Request]


def _generated(of: Callable[[ConfigResult, Requests], Value]) -> Callable[[ConfigResult], Value]:
    """A metric ``of`` the requests of every ok run together; ``n/a`` with the reason for
    a run without requests."""
    def compute(res: ConfigResult) -> Value:
        mode = res.identity.get("mode", "train")
        if mode not in ("generate", "serve"):  # the latency metric's words for a training run
            return Value(None, "n/a: training run" if mode == "train" else f"n/a: {mode} run")
        requests = [q for r in res.runs for q in r.generations]
        return of(res, requests) if requests \
            else Value(None, "n/a: no generation requests stored")
    return compute


def _measured(of: Callable[[ConfigResult, Requests, gen.GenStats], Value],
              ) -> Callable[[ConfigResult], Value]:
    """A metric ``of`` the measured requests' :func:`dltop.results.generation.stats`."""
    def compute(res: ConfigResult, requests: Requests) -> Value:
        st = gen.stats(requests)
        return of(res, requests, st) if st is not None \
            else Value(None, "n/a: no generation requests stored")
    return _generated(compute)


@computes("decode-rate")
@_generated
def _decode_rate(res: ConfigResult, requests: Requests) -> Value:
    """The median over runs of each run's decode tokens/s."""
    rates = [x for x in (gen.decode_rate(r.generations) for r in res.runs) if x is not None]
    if not rates:
        return Value(None, "n/a: one token per request")
    return Value(statistics.median(rates), extra=(("n", float(len(rates))),))


def _shaped(of: Callable[[ConfigResult, gen.Request, gen.GenStats], Value],
            ) -> Callable[[ConfigResult], Value]:
    """A metric of the model's shape (bytes, FLOPs) and the first measured request's."""
    def compute(res: ConfigResult, requests: Requests, st: gen.GenStats) -> Value:
        mode = res.identity.get("mode", "train")
        if mode != "generate":  # a served model's shape and precision are not known
            return Value(None, f"n/a: {mode} run (no model shape)")
        return of(res, next(q for q in requests if not q.warmup), st)  # stats() found one
    return _measured(compute)


computes("prefill-tflops")(_shaped(lambda res, q, st: lmcost.prefill_tflops(
    res, st.ttft_s[0], q.prompt_tokens, q.batch)))
computes("mbu")(_shaped(lambda res, q, st: lmcost.mbu(
    res, st.tpot_s[0] if st.tpot_s is not None else None, q.prompt_tokens, q.new_tokens,
    q.batch)))
computes("ttft")(_measured(lambda res, qs, st: _percentiles(st.ttft_s, st.requests)))
computes("tpot")(_measured(lambda res, qs, st: _per_token(st.tpot_s, st.requests)))
computes("itl")(_measured(lambda res, qs, st: _per_token(st.itl_s, st.n_itl)))


def _per_token(p: conv.Percentiles | None, n: int) -> Value:
    return _percentiles(p, n) if p is not None else Value(None, "n/a: one token per request")


@computes("distinct-tokens")
def distinct_value(res: ConfigResult) -> Value:
    """A generate configuration's distinct-token fraction: the mean over its ok runs of
    ``runs.distinct_token_frac`` (:data:`dltop.store.generations.DISTINCT_COLUMN`)."""
    mode = res.identity.get("mode", "train")
    if mode != "generate":
        return Value(None, f"n/a: {mode} run" if mode != "train" else "n/a: training run")
    fracs = floats(res.runs, DISTINCT_COLUMN)
    if not fracs:
        return Value(None, "n/a: tokens not counted (stored before dltop counted them)")
    return Value(_mean(fracs))


def _time_to(res: ConfigResult, targets: list[tuple[RunRecord, float | None]],
             reach: Callable[[Sequence[conv.EvalPoint], float], conv.Reached | None],
             key: str) -> Value:
    """Time to accuracy or to perplexity: the median training seconds over the runs
    that reached their target (``reach``), the evaluations' seconds apart."""
    aimed = [(r, t) for r, t in targets if t is not None]
    if not aimed:
        return Value(None, f"n/a: no {key}")
    reached = [x for x in (reach(r.evals, float(t)) for r, t in aimed) if x is not None]
    if not reached:
        return Value(None, "not reached")
    train = statistics.median(x.train_s for x in reached)
    evals = statistics.median(x.eval_s for x in reached)
    suffix = f" (eval {evals:.3g})"
    if len(reached) < len(res.runs):
        suffix += f" ({len(reached)}/{len(res.runs)} reached)"
    return Value(train, suffix=suffix,
                 extra=(("eval_s", evals), ("reached", float(len(reached)))))
