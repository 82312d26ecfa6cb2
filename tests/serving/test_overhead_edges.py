"""The overhead table (``dltop export --table overhead``) against a server that gives no
usage (tests/programs/fake_openai.py's ``nousage`` model: the client estimates each
answer's tokens) and ends each answer early (``--eos-after 2``), at an asked rate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.dltop_env import query
from tests.serving.conftest import OVERHEAD_GEN as GEN
from tests.serving.conftest import OVERHEAD_SERVE as SERVE
from tests.serving.conftest import overhead_campaign, start_fake

from dltop import cli


def test_estimated_lengths_are_said_estimated_and_the_rate_as_its_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proc, url = start_fake("--ttft-ms", "5", "--itl-ms", "2", "--eos-after", "2")
    db = tmp_path / "d.db"
    try:
        overhead_campaign(db, tmp_path, "nousage", GEN.format(batches="[1]", new=8),
                          SERVE.format(model="nousage", url=url, conc=1,
                                       extra='shape = "gpt-tiny"\nrequest_rate = 50'))
    finally:
        proc.kill()
        proc.wait()
    stored = query(db, "select output_tokens, tokens_estimated from serve_requests "
                       "where not warmup")
    assert {(r["output_tokens"], r["tokens_estimated"]) for r in stored} == {(2, 1)}
    capsys.readouterr()
    assert cli.main(["export", "--db", str(db), "--table", "overhead", "--format",
                     "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    # the count is the client's estimate: said so, never stated as the server's
    assert row["differs"] == [f"served 2 new tokens (estimated for {len(stored)} of "
                              f"{len(stored)}: no usage), asked 8"]
    # the rate as the table's rate column shows it (50, not 50.0)
    assert row["pairing"] == "concurrency 1 = batch 1 at 50 req/s"
    assert row["identity"]["request_rate"] == 50.0
    # the caption's settings say whose they are: "constant: mode serve" over a table
    # with generate runs (of their own iterations, precision...) was false of them
    capsys.readouterr()
    assert cli.main(["export", "--db", str(db), "--table", "overhead"]) == 0
    (said,) = [ln for ln in capsys.readouterr().out.splitlines() if "constant:" in ln]
    serve, generate = said.split("; generate runs' constant: ")
    assert serve.startswith("serve runs' constant: ") and "mode serve" in serve
    assert "mode generate" in generate and "warmup 2" in generate  # OVERHEAD_GEN's
    assert "mode generate" not in serve and "warmup 1" in serve and "warmup 2" not in serve
