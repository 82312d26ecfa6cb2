"""The live rate window of :mod:`dltop.live.serve_live` on rows given here (the reader's
monotonic clock passed in): requests that end count for RATE_WINDOW_S of the load's
clock, then drop out, so the rate falls to 0 when none ends; the load's "now" is the
least late of the reads' estimates."""

from __future__ import annotations

from typing import Any

import pytest

from dltop.live.serve_live import RATE_WINDOW_S, _SoFar


def row(idx: int, end_s: float, ok: bool = True, tokens: int = 8) -> dict[str, Any]:
    return {"idx": idx, "warmup": 0, "ok": ok, "output_tokens": tokens, "end_s": end_s,
            "in_flight": 1, "error": None if ok else "boom"}


def test_ends_leave_the_window_and_the_rate_falls_to_zero() -> None:
    s = _SoFar()
    assert s.recent_at(100.0) == (None, 0, 0)  # no measured request yet
    # 2 ok requests a second for 15 s of load (a failed one among them: not counted)
    s.add([row(i, 0.5 * (i + 1), ok=i != 25) for i in range(30)])
    now, ok, tokens = s.recent_at(1000.0)  # read as the newest ended: now = 15 s
    assert now == pytest.approx(15.0)
    assert (ok, tokens) == (19, 152)  # ends in (5, 15]: 20 requests, 19 ok, 8 tokens each
    # a later read sees nothing new: its now is 4 s on, 8 ends left the window
    assert s.recent_at(1004.0)[1:] == (11, 88)
    # a read whose newest end is older than its clock says does not move now back
    assert s.recent_at(1004.0)[0] == pytest.approx(19.0)
    assert s.recent_at(1000.0 + RATE_WINDOW_S + 0.01)[1:] == (0, 0)


def test_the_freshest_read_anchors_now() -> None:
    s = _SoFar()
    s.add([row(0, 1.0)])
    assert s.recent_at(50.0)[0] == pytest.approx(1.0)  # seen late: now 1 s at 50
    s.add([row(1, 3.5)])
    # at 51 the newest end is 3.5 s: the earlier estimate (2 s) was 1.5 s late
    assert s.recent_at(51.0)[0] == pytest.approx(3.5)
    assert s.recent_at(52.0)[0] == pytest.approx(4.5)
