"""Generation metrics (``mode = "generate"``, issue 29): TTFT, TPOT, ITL, decode tokens/s.

Each measured generation request of a run is one ``generations`` row
(:mod:`dltop.store.generations`): ``batch`` sequences prefilled with
``prompt_tokens`` tokens, then ``new_tokens`` tokens generated per sequence. The
runner's loop (``lm_loop.run_generate``) times each step with the device
synchronised (a host read of the sampled ids), so:

- **TTFT** (time to first token): prompt in to the first generated token out,
  prefill and the first token's sampling included; the request's first step.
- **ITL** (inter-token latency): each later token's step, from the previous token's
  end to its own; ``new_tokens - 1`` per request. Percentiles are over every
  measured latency of the runs together.
- **TPOT** (time per output token) of a request: ``(e2e - TTFT) / (new_tokens - 1)``,
  its mean ITL; percentiles are over requests (a request with one new token, or
  whose end-to-end time is unknown, has none).
- **decode tokens/s**: ``batch × (new_tokens - 1)`` over the summed ITLs of the
  measured requests (the prefill left out), per run.
- **end-to-end**: the request's ``iter`` seconds (dltop's ``latency`` metric).

Every latency is the whole batch's: the sequences of a request decode together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dltop.results.convergence import Percentiles, percentiles
from dltop.store.read import generations
from dltop.telemetry.values import opt_float

if TYPE_CHECKING:
    from dltop.store.reader import Db


@dataclass(frozen=True)
class Request:
    """One generation request (a ``generations`` row)."""

    idx: int
    warmup: bool
    ttft_s: float
    e2e_s: float | None
    """Its ``iter`` seconds (None: the runner ended between the two events)."""
    prompt_tokens: int
    new_tokens: int
    batch: int
    itl_s: tuple[float, ...]
    """The ``new_tokens - 1`` inter-token latencies, in order."""

    @property
    def tpot_s(self) -> float | None:
        """``(e2e - TTFT) / (new_tokens - 1)``: None with one new token or no e2e."""
        if self.e2e_s is None or self.new_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.new_tokens - 1)




@dataclass(frozen=True)
class GenStats:
    """The generation metrics of a set of measured requests (one run or a configuration)."""

    requests: int
    ttft_s: Percentiles
    tpot_s: Percentiles | None
    """None when no request has a TPOT (one new token each, or no e2e known)."""
    itl_s: Percentiles | None
    n_itl: int
    """Inter-token latencies behind :attr:`itl_s`."""
    decode_tokens_per_s: float | None
    """Σ batch × (new_tokens - 1) / Σ ITL; None without any ITL (or all zero)."""
    e2e_s: Percentiles | None


def generations_of(db: Db, run_ids: Sequence[int],
                   *, warmup: bool = False) -> dict[int, list[Request]]:
    """Each run's generation requests in order, measured ones only unless ``warmup``
    (runs without any are left out; none before migration 17)."""
    return {rid: [Request(int(r["idx"]), bool(r["warmup"]), float(r["ttft_s"]),
                          opt_float(r["e2e_s"]),
                          int(r["prompt_tokens"]), int(r["new_tokens"]), int(r["batch"]),
                          r["itl_s"]) for r in rows]
            for rid, rows in generations.requests(db, run_ids, warmup=warmup).items()}


def decode_rate(requests: Sequence[Request]) -> float | None:
    """Decoded tokens per second: Σ batch × (new_tokens - 1) / Σ ITL (prefill excluded)."""
    seconds = sum(sum(r.itl_s) for r in requests)
    tokens = sum(r.batch * len(r.itl_s) for r in requests)
    return tokens / seconds if seconds > 0 else None


def stats(requests: Sequence[Request]) -> GenStats | None:
    """The metrics of measured ``requests`` (None without any)."""
    measured = [r for r in requests if not r.warmup]
    ttft = percentiles([r.ttft_s for r in measured])
    if ttft is None:
        return None
    itl = [x for r in measured for x in r.itl_s]
    return GenStats(
        requests=len(measured), ttft_s=ttft,
        tpot_s=percentiles([t for t in (r.tpot_s for r in measured) if t is not None]),
        itl_s=percentiles(itl), n_itl=len(itl), decode_tokens_per_s=decode_rate(measured),
        e2e_s=percentiles([r.e2e_s for r in measured if r.e2e_s is not None]))
