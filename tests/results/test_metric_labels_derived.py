"""A transformer table's titles, units and headers, and the generation figures' panels,
are read off the metric's declaration (``results/metricdefs.py``; issue 39): a declared
label or unit changed shows up in each of them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dltop.report.generation import PANELS, pct_panel
from dltop.results import tokens
from dltop.results.metricdefs import METRICS


def _texts(name: str, models: list[str]) -> tuple[str, str, str]:
    m = tokens.metric_for(name, models)
    return m.title, m.unit, m.header


def test_the_variants_today() -> None:
    assert _texts("throughput", ["gpt-tiny"]) == (
        "tokens per second (total tokens / total measured seconds)", "tokens/s", "tokens/s")
    assert _texts("throughput", ["fcn-r", "gpt-tiny"])[1:] == ("samples/s | tokens/s",
                                                             "samples|tokens/s")
    assert _texts("energy", ["fcn-r", "gpt-tiny"])[1:] == ("J/sample | J/token",
                                                         "J/sample|token")
    assert _texts("tflops", ["gpt-tiny"])[0] == ("achieved TFLOP/s (training FLOPs per "
                                                 "token × tokens/s)")
    assert _texts("tflops", ["fcn-r", "gpt-tiny"])[1:] == ("TFLOP/s", "TFLOP/s")
    assert tokens.UNIT_METRICS == ("throughput", "energy")
    assert PANELS == {"TPOT p50 s": "tpot", "TTFT p50 s": "ttft"}


def test_a_declared_change_shows_in_every_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    energy = METRICS["energy"]
    monkeypatch.setitem(METRICS, "energy", replace(
        energy, title="energy in mJ per sample", unit="mJ/sample", header="mJ/sample"))
    assert _texts("energy", ["gpt-tiny"]) == ("energy in mJ per token", "mJ/token",
                                              "mJ/token")
    assert _texts("energy", ["fcn-r", "gpt-tiny"])[1:] == ("mJ/sample | mJ/token",
                                                         "mJ/sample|token")
    assert _texts("energy", ["fcn-r"]) == ("energy in mJ per sample", "mJ/sample",
                                           "mJ/sample")
    # a metric declared per sample gets the tokens' words; one that is not keeps its own
    time = METRICS["time"]
    assert _texts("time", ["gpt-tiny"]) == (time.title, time.unit, time.header)
    monkeypatch.setitem(METRICS, "time", replace(time, title="seconds per sample",
                                                 per_sample=True))
    assert _texts("time", ["gpt-tiny"])[0] == "seconds per token"
    ttft = METRICS["ttft"]
    monkeypatch.setitem(METRICS, "ttft", replace(ttft, header="first p50/p90/p99 ms",
                                                 unit="ms"))
    assert pct_panel("ttft") == "first p50 ms" and pct_panel("ttft", "p99") == "first p99 ms"
