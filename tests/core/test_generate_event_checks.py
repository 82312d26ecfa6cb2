"""The parent's checks of the ``generate`` event (issue 29, jobs.protocol_evals)."""

from __future__ import annotations

from typing import Any

import pytest

from dltop.jobs.protocol import EventChecker
from dltop.jobs.protocol_evals import MAX_NEW_TOKENS


def generate(**over: Any) -> dict[str, Any]:
    return {"v": 1, "event": "generate", "index": 0, "warmup": False, "ttft_s": 0.05,
            "itl_s": [0.01, 0.012, 0.011], "prompt_tokens": 16, "new_tokens": 4, "batch": 2,
            **over}


@pytest.mark.parametrize("event", [
    generate(), generate(warmup=True), generate(warmup=1), generate(new_tokens=1, itl_s=[]),
    generate(itl_s=[0, 0.0, 1]), generate(index=7),
    generate(new_tokens=MAX_NEW_TOKENS, itl_s=[0.001] * (MAX_NEW_TOKENS - 1)),
    generate(distinct_tokens=None), generate(distinct_tokens=2), generate(distinct_tokens=8),
])
def test_valid_generate_events_pass(event: dict[str, Any]) -> None:
    assert EventChecker().problem(event) is None


@pytest.mark.parametrize(("event", "says"), [
    (generate(index=-1), "index -1"), (generate(index=1.0), "index 1.0"),
    (generate(index=None), "index None"), (generate(warmup="no"), "warmup 'no'"),
    (generate(warmup=None), "warmup None"),
    (generate(ttft_s=0), "ttft_s 0"), (generate(ttft_s=-0.1), "ttft_s -0.1"),
    (generate(ttft_s="0.1"), "ttft_s '0.1'"), (generate(ttft_s=float("nan")), "ttft_s nan"),
    (generate(ttft_s=float("inf")), "ttft_s inf"), (generate(ttft_s=2e9), "ttft_s 2000000000"),
    (generate(ttft_s=None), "ttft_s None"),
    (generate(prompt_tokens=0), "prompt_tokens 0"), (generate(batch=0), "batch 0"),
    (generate(batch=2.0), "batch 2.0"), (generate(new_tokens=0, itl_s=[]), "new_tokens 0"),
    (generate(new_tokens=True), "new_tokens True"),
    (generate(new_tokens=MAX_NEW_TOKENS + 1, itl_s=[]), f"over {MAX_NEW_TOKENS}"),
    (generate(itl_s=[0.01, 0.01]), "new_tokens - 1 = 3 latencies (got 2 latencies)"),
    (generate(itl_s=[0.01] * 4), "(got 4 latencies)"),
    (generate(itl_s=None), "(got None)"), (generate(itl_s="0.01"), "(got '0.01')"),
    (generate(itl_s=[0.01, -0.001, 0.01]), "itl_s.1 -0.001"),
    (generate(itl_s=[0.01, 0.01, "x"]), "itl_s.2 'x'"),
    (generate(itl_s=[0.01, float("nan"), 0.01]), "itl_s.1 nan"),
    (generate(itl_s=[True, 0.01, 0.01]), "itl_s.0 True"),
    (generate(itl_s=[0.01, 0.01, 1e10]), "itl_s.2"),
    (generate(batch=2**64), "out of range"),
    # distinct_tokens: one per sequence at least, new_tokens per sequence at most
    (generate(distinct_tokens=1), "distinct_tokens 1 is not an integer in [batch, batch x "
     "new_tokens] = [2, 8]"), (generate(distinct_tokens=9), "distinct_tokens 9"),
    (generate(distinct_tokens=4.0), "distinct_tokens 4.0"),
    (generate(distinct_tokens=True), "distinct_tokens True"),
])
def test_a_bad_generate_field_is_refused_with_its_name(event: dict[str, Any],
                                                      says: str) -> None:
    problem = EventChecker().problem(event)
    assert problem is not None and problem.startswith("generate event: "), problem
    assert says in problem, problem


def test_generate_indexes_must_increase_and_refused_ones_do_not_count() -> None:
    checker = EventChecker()
    assert checker.problem(generate(index=0)) is None
    assert "index 0 repeats" in str(checker.problem(generate(index=0)))
    assert "ttft_s" in str(checker.problem(generate(index=1, ttft_s=-1)))
    assert checker.problem(generate(index=1)) is None  # the refused 1 did not move it
    # a request's iter shares its index: the two sequences are counted apart
    assert checker.problem({"event": "iter", "index": 0, "seconds": 0.1}) is None
    assert checker.problem({"event": "iter", "index": 1, "seconds": 0.1}) is None
