"""A serve run whose responses reach the client in one piece says so in its note: their
TTFT is the whole answer's time and their TPOT about zero (vLLM 0.32 on a loaded 2-core
machine, docs/serving.md "Checked against real servers"). The fake server's ``--hold``
writes each answer in one piece at its end, as the client reads it when its process did
not run while the server streamed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from tests.dltop_env import query

from dltop.jobs.serving import BUNCHED_GAP_S, ServeExtras

from .conftest import named, run_runner, spec

FORCED = {"force_length": ["ignore_eos", "min_tokens"]}


def note(events: list[dict[str, Any]]) -> str | None:
    extras = ServeExtras(1, cast(Any, None), lambda *a, **k: None)
    for e in named(events, "request") + named(events, "load"):
        extras.on_event(e)
    return extras.fields().get("note")


def test_responses_read_in_one_piece_are_named_in_the_note(tmp_path: Path,
                                                           fake_server) -> None:
    held = fake_server("--ttft-ms", "5", "--itl-ms", "3", "--hold")
    code, events, err = run_runner(tmp_path, spec(held, "steady", iterations=6, options=FORCED))
    assert code == 0, err
    measured = [r for r in named(events, "request") if not r["warmup"]]
    assert len(measured) == 6 and all(len(r["chunk_s"]) == 8 for r in measured)
    # 8 chunks made 3 ms apart, read together: about the whole answer's 26 ms, then none
    gaps = [(r["chunk_s"][-1] - r["chunk_s"][0]) / 7 for r in measured]
    assert sum(g < BUNCHED_GAP_S for g in gaps) >= 3, gaps
    assert all(r["ttft_s"] >= 0.026 for r in measured), [r["ttft_s"] for r in measured]
    said = note(events)
    assert said is not None and said.startswith("chunks bunched: "), said
    assert said.endswith(" of 6 measured requests arrived in one piece (the client did "
                         "not run while the server streamed, or the server or a proxy "
                         "held them): TTFT, TPOT and ITL do not time tokens"), said
    # the same answers streamed as made: no note
    streamed = fake_server("--ttft-ms", "5", "--itl-ms", "3")
    code, events, err = run_runner(tmp_path, spec(streamed, "steady", iterations=6, options=FORCED))
    assert code == 0, err
    assert note(events) is None


def test_short_answers_and_a_minority_are_not_named() -> None:
    def request(i: int, chunk_s: list[float]) -> dict[str, Any]:
        return {"v": 1, "event": "request", "index": i, "request": i, "warmup": False,
                "scheduled_s": 0.0, "dispatch_lag_s": 0.0, "slot_wait_s": 0.0,
                "ttft_s": chunk_s[0], "e2e_s": chunk_s[-1], "status": 200,
                "output_tokens": len(chunk_s), "tokens_estimated": False,
                "chunk_s": chunk_s, "chunk_tokens": [1] * len(chunk_s)}

    load = {"v": 1, "event": "load", "window_s": 1.0, "client_cpu_s": 0.1, "ok": 3}
    together = [0.05, 0.05001, 0.05002, 0.05003]
    apart = [0.01, 0.015, 0.02, 0.025]
    for chunks, said in (([together, together, apart], "chunks bunched: 2 of 3"),
                         ([together, apart, apart], None),  # a minority
                         ([together[:3]] * 3, None)):  # 3 chunks: too few to tell
        extras = ServeExtras(1, cast(Any, None), lambda *a, **k: None)
        for i, c in enumerate(chunks):
            extras.on_event(request(i, c))
        extras.on_event(load)
        got = extras.fields().get("note")
        assert (got or "")[:len(said or "")] == (said or "") and (got is None) == (
            said is None), got


def test_a_fast_stream_is_not_bunched() -> None:
    # Labelled synthetic events (the judgement alone): a toy model's real gaps are 7 to
    # 60 us, under BUNCHED_GAP_S, yet its chunks' spread is a good part of its TTFT; vLLM's
    # bunched answers came whole 37 to 83 ms after the send, within 0.1 ms.
    def request(i: int, ttft_s: float, gap_s: float) -> dict[str, Any]:
        chunk_s = [ttft_s + k * gap_s for k in range(8)]
        return {"v": 1, "event": "request", "index": i, "request": i, "warmup": False,
                "scheduled_s": 0.0, "dispatch_lag_s": 0.0, "slot_wait_s": 0.0,
                "ttft_s": ttft_s, "e2e_s": chunk_s[-1], "status": 200, "output_tokens": 8,
                "tokens_estimated": False, "chunk_s": chunk_s, "chunk_tokens": [1] * 8}

    load = {"v": 1, "event": "load", "window_s": 1.0, "client_cpu_s": 0.1, "ok": 4}
    for ttft_s, gap_s, bunched in ((0.001, 7e-6, False), (0.0008, 60e-6, False),
                                   (0.002, 30e-6, False), (0.037, 14e-6, True),
                                   (0.083, 5e-6, True)):
        extras = ServeExtras(1, cast(Any, None), lambda *a, **k: None)
        for i in range(4):
            extras.on_event(request(i, ttft_s, gap_s))
        extras.on_event(load)
        got = extras.fields().get("note")
        assert (got is not None and got.startswith("chunks bunched: 4 of 4")) == bunched, (
            ttft_s, gap_s, got)


PROFILE = """[defaults]
frameworks = ["openai"]
mode = "serve"
models = ["steady"]
new_tokens = 8
prompt_tokens = 4
iterations = 5
warmup = 1
timeout_s = 30
force_length = ["ignore_eos", "min_tokens"]
[[matrix]]
endpoint = "{held}"
[[matrix]]
endpoint = "{streamed}"
"""


@pytest.mark.slow  # a dltop campaign of two runs
def test_the_run_s_note_is_stored(tmp_path: Path, fake_server) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE.format(
        held=fake_server("--ttft-ms", "2", "--itl-ms", "2", "--hold"),
        streamed=fake_server("--ttft-ms", "2", "--itl-ms", "2")))
    db = tmp_path / "d.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run",
                          str(profile)], capture_output=True, text=True, timeout=240,
                         env={**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0"})
    assert res.returncode == 0, res.stdout + res.stderr
    held, streamed = query(db, "select status, note from runs order by id")
    assert held["status"] == "ok" and re.fullmatch(
        r"chunks bunched: [345] of 5 measured requests arrived in one piece \(.*\): TTFT, "
        r"TPOT and ITL do not time tokens", held["note"] or ""), held["note"]
    assert (streamed["status"], streamed["note"]) == ("ok", None)
