"""Run detail panels that exist only for some runs: convergence evaluations, the
operator profile (issue 17's convergence runs and ``profile = true``) and generation
latencies (issue 29's ``mode = "generate"``)."""

from __future__ import annotations

from rich.text import Text

from dltop.live.rundetail import RunDetail
from dltop.results.convergence import Percentiles
from dltop.results.metricdefs import metric
from dltop.results.runtrace import RunTrace
from dltop.textsafe import one_line
from dltop.tui.format import serves

PROFILE_ROWS = 12
"""Operators listed (the table ``dltop export --table profile --run N`` has them all)."""
EVAL_ROWS = 8


def convergence_text(trace: RunTrace | None) -> Text:
    """The run's evaluations on the test set (empty: none)."""
    evals = trace.evals if trace is not None else ()
    t = Text(no_wrap=True, overflow="ellipsis")
    if not evals:
        return t
    t.append("Convergence\n", "bold underline")
    lm = evals[0].accuracy is None  # a language model: perplexity
    t.append(f"{'epoch':>6} {'step':>7} {'perplexity' if lm else 'accuracy':>10} "
             f"{'test loss':>9} {'train s':>8}\n", "dim")
    shown = evals if len(evals) <= EVAL_ROWS else (*evals[:2], None, *evals[-(EVAL_ROWS - 3):])
    for e in shown:
        if e is None:
            t.append(f"{'…':>6} ({len(evals) - EVAL_ROWS + 1} more)\n", "dim")
            continue
        value = e.perplexity if lm else e.accuracy
        text = "-" if value is None else f"{value:.2f}" if lm else f"{value:.2%}"
        t.append(f"{'-' if e.epoch is None else f'{e.epoch:g}':>6} {e.idx:>7} {text:>10} "
                 f"{'-' if e.loss is None else f'{e.loss:.4g}':>9} {e.train_s:>8.1f}\n")
    if not lm:
        best = max((e for e in evals if e.accuracy is not None),
                   key=lambda e: e.accuracy or 0.0, default=None)
        if best is not None:
            t.append(f"best {best.accuracy:.2%} after {best.train_s:.1f} s of training "
                     "(evaluation time excluded)\n", "dim")
    return t


def profile_text(d: RunDetail) -> Text:
    """The run's top operators per profiled step (empty: no profile)."""
    t = Text(no_wrap=True, overflow="ellipsis")
    if not d.profile:
        return t
    device = d.profile_device or "?"
    t.append("Operator profile\n", "bold underline")
    t.append(f"{d.profile_steps} extra steps after the measured ones, "
             f"{d.profile_step_ms or 0:.2f} ms each on {device}\n", "dim")
    kernel = any(op.self_device_ms is not None for op in d.profile)
    t.append(f"{'share':>6} {'self ms':>8} {'kernel ms' if kernel else '':>9} {'calls':>6}  op\n",
             "dim")
    for op in d.profile[:PROFILE_ROWS]:
        dev = "" if op.self_device_ms is None else f"{op.self_device_ms:.3f}"
        t.append(f"{op.share_pct:>5.1f}% {op.self_cpu_ms:>8.3f} {dev:>9} {op.calls:>6g}  ")
        t.append(one_line(op.name) + "\n")
    if len(d.profile) > PROFILE_ROWS:
        t.append(f"… {len(d.profile) - PROFILE_ROWS} more: dltop export --table profile "
                 f"--run {d.run_id}\n", "dim")
    return t


def _ms(p: Percentiles | None) -> str:
    # a percentile from too few requests is N/A (results.convergence.min_samples)
    return "N/A" if p is None else "  ".join(
        f"{'N/A':>9}" if v is None else f"{v * 1e3:>9.3f}" for v in p)


def generation_text(d: RunDetail) -> Text:
    """A generate run's TTFT, TPOT, ITL and end-to-end p50/p90/p99 (ms) and decode
    tokens/s over its measured requests so far (empty: no request stored)."""
    g = d.generation
    t = Text(no_wrap=True, overflow="ellipsis")
    if g is None:
        return t
    serve = serves(d.framework)  # a serve run's timings are its client's, not a device's
    t.append(("Requests" if serve else "Generation") + (" so far" if d.running else "")
             + "\n", "bold underline")
    t.append(f"{g.requests} measured request{'s' if g.requests != 1 else ''}, "
             f"{g.n_itl} inter-token latencies; ms, " + (
                 "the client's, from each request's send\n" if serve
                 else "whole batch, device synchronised\n"), "dim")
    t.append(f"{'':<11}{'p50':>9}  {'p90':>9}  {'p99':>9}\n", "dim")
    one = "N/A (one new token per request)"
    for label, p, none in ((metric("ttft").label, g.ttft_s, "N/A"),
                           (metric("tpot").label, g.tpot_s, one),
                           (metric("itl").label, g.itl_s, one), ("end to end", g.e2e_s, "N/A")):
        t.append(f"{label:<11}")
        t.append((_ms(p) if p is not None else none) + "\n")
    rate, decode = g.decode_tokens_per_s, metric("decode-rate")
    t.append(f"{decode.label:<11}{'N/A' if rate is None else f'{rate:,.1f}':>9} "
             f"{decode.unit} (batch × (new - 1) / Σ ITL)\n")
    return t
