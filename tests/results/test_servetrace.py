"""A serve run's requests as its detail draws them (results/servetrace.py): send order,
failed requests counted and left out, per-token ITL, histogram bins."""

from __future__ import annotations

import pytest

from dltop.results.servetrace import histogram, itl_per_token, serve_trace
from dltop.results.serving import ServeRequest


def _req(idx: int, sent_s: float, chunks: tuple[float, ...], counts: tuple[int, ...],
         error: str | None = None) -> ServeRequest:
    return ServeRequest(idx, chunks[0] if chunks else None, (chunks[-1] + 0.001)
                        if chunks else None, 200 if error is None else 500, error,
                        sum(counts), False, 0.0, 0.0, chunks, sent_s, counts)


def test_a_chunk_of_k_tokens_is_k_equal_gaps() -> None:
    # first chunk 2 tokens (one zero), then 3 tokens 0.009 s later, then 1 token 0.004 s
    q = _req(0, 0.0, (0.020, 0.029, 0.033), (2, 3, 1))
    assert itl_per_token(q) == pytest.approx([0.0, 0.003, 0.003, 0.003, 0.004])
    assert len(itl_per_token(q)) == q.output_tokens - 1
    # counts missing (an old row): one token a chunk
    assert itl_per_token(_req(0, 0.0, (0.02, 0.025), ())) == pytest.approx([0.005])


def test_histogram_bins_cover_every_value() -> None:
    assert histogram([]) == ()
    (one,) = histogram([0.004] * 5)  # all equal: one bin holds them
    assert (one.lo_s, one.hi_s, one.count) == (0.004, 0.004, 5)
    bins = histogram([0.0, 0.1, 0.25, 0.5, 1.0], bins=4)
    assert [b.count for b in bins] == [2, 1, 1, 1]  # the greatest in the last bin, closed
    assert bins[0].lo_s == 0.0 and bins[-1].hi_s == pytest.approx(1.0)


def test_failed_requests_are_counted_not_drawn() -> None:
    reqs = [_req(1, 0.05, (0.03, 0.034), (1, 1)), _req(0, 0.0, (0.02, 0.026), (1, 1)),
            _req(2, 0.10, (), (), error="HTTP 500: boom")]
    t = serve_trace(reqs)
    assert t is not None
    assert t.sent_s == (0.0, 0.05, 0.10)  # send order, whatever the list's
    assert t.ttft_s == (0.02, 0.03, None) and t.e2e_s[2] is None and t.failed == 1
    assert sum(b.count for b in t.ttft_bins) == 2 and t.n_itl == 2
    assert serve_trace([]) is None
