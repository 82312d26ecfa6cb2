"""``dltop export --table overhead`` (issue 41, item 5): serve runs against the streaming
fake (``shape = "gpt-tiny"``) beside real ``generate`` runs of gpt-tiny in one campaign;
the table's numbers checked against the stored rows, and its refusals."""

from __future__ import annotations

import json
import sqlite3
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.serving.conftest import OVERHEAD_GEN as GEN
from tests.serving.conftest import OVERHEAD_HEAD as HEAD
from tests.serving.conftest import OVERHEAD_SERVE as SERVE
from tests.serving.conftest import overhead_campaign as _campaign
from tests.serving.conftest import start_fake

from dltop import cli

# One worker builds the campaigns (~25 s of real generate runs): under `make test`'s
# --dist loadgroup the module fixture would otherwise run once on each worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("overhead_table")]

@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """pair.db: gpt-tiny generate at batch 1 and 2 beside serve runs of "tiny-folder"
    (shape gpt-tiny) at concurrency 1, 2 and 4 (no batch 4), "tiny-bf16" (shape gpt-tiny,
    precision bf16) at 1, "tiny-bos" (shape gpt-tiny; a fake whose usage counts a BOS in
    each prompt) at 1, and "other" without a shape; refuse.db: campaigns that cannot
    pair."""
    tmp = tmp_path_factory.mktemp("overhead")
    proc, url = start_fake("--ttft-ms", "20", "--itl-ms", "3")
    bos, bos_url = start_fake("--ttft-ms", "20", "--itl-ms", "3", "--bos", "1")
    try:
        pair, refuse = tmp / "pair.db", tmp / "refuse.db"
        _campaign(pair, tmp, "pair", GEN.format(batches="[1, 2]", new=8),
                  SERVE.format(model="tiny-folder", url=url, conc="[1, 2, 4]",
                               extra='shape = "gpt-tiny"'),
                  SERVE.format(model="tiny-bf16", url=url, conc=1,
                               extra='shape = "gpt-tiny"\nprecision = "bf16"'),
                  SERVE.format(model="tiny-bos", url=bos_url, conc=1, extra='shape = "gpt-tiny"'),
                  SERVE.format(model="other", url=url, conc=1, extra=""))
        _campaign(refuse, tmp, "noshape", SERVE.format(model="m", url=url, conc=1, extra=""))
        _campaign(refuse, tmp, "nogen", SERVE.format(model="m", url=url, conc=1,
                                                     extra='shape = "gpt2-small"'))
        _campaign(refuse, tmp, "tokens", GEN.format(batches="[1]", new=4),
                  SERVE.format(model="m", url=url, conc=1, extra='shape = "gpt-tiny"'))
        _campaign(refuse, tmp, "batch", GEN.format(batches="[1]", new=8),
                  SERVE.format(model="m", url=url, conc=2, extra='shape = "gpt-tiny"'))
        _campaign(refuse, tmp, "genonly", GEN.format(batches="[1]", new=8))
        yield {"pair": pair, "refuse": refuse}
    finally:
        for p in (proc, bos):
            p.kill()
            p.wait()


def _cli(capsys: pytest.CaptureFixture[str], db: Path, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main(["export", "--db", str(db), "--table", "overhead", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return rc, out, err


def _stored(db: Path) -> dict[str, dict[str, Any]]:
    """Per served or generated model and batch/concurrency: the p50s of the stored
    measured requests, computed here from the rows (not by dltop)."""
    runs = json.loads(subprocess.run([sys.executable, "-m", "dltop", "runs", "--db", str(db),
                                      "--json"], capture_output=True, text=True,
                                     check=True).stdout)
    con = sqlite3.connect(db)
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        run_id, s = run["run_id"], run["identity"]
        rows = con.execute("SELECT ttft_s, e2e_s, new_tokens FROM generations WHERE run_id "
                           "= ? AND NOT warmup", (run_id,)).fetchall()
        key = f"{s['model']} {s['concurrency'] if s['mode'] == 'serve' else s['batch_size']}"
        out[key] = {"ttft": statistics.median(r[0] for r in rows),
                    "tpot": statistics.median((e - t) / (n - 1) for t, e, n in rows),
                    "n": len(rows)}
        if s["mode"] == "serve":
            (window,) = con.execute("SELECT serve_window_s FROM runs WHERE id = ?",
                                    (run_id,)).fetchone()
            (tokens,) = con.execute("SELECT SUM(output_tokens) FROM serve_requests WHERE "
                                    "run_id = ? AND NOT warmup AND error IS NULL",
                                    (run_id,)).fetchone()
            out[key]["out"] = tokens / window
    return out


def test_pairs_serve_with_generate_of_its_shape_numbers_from_the_stored_rows(
        dbs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _cli(capsys, dbs["pair"], "--format", "json")
    assert rc == 0, err
    table = json.loads(out)
    rows = table["rows"]
    got = {(r["served"], r["pairing"]) for r in rows}
    assert got == {("tiny-folder", "concurrency 1 = batch 1"),
                   ("tiny-folder", "concurrency 2 ~ batch 2"),
                   ("tiny-bf16", "concurrency 1 = batch 1"),
                   ("tiny-bos", "concurrency 1 = batch 1")}
    stored = _stored(dbs["pair"])
    for r in rows:
        c = r["identity"].get("concurrency") or 1
        g, s = stored[f"gpt-tiny {c}"], stored[f"{r['served']} {c}"]
        assert r["shape"] == "gpt-tiny" and r["generate"] == f"torch batch {c}"
        assert r["tpot_generate"] == pytest.approx(g["tpot"], rel=1e-9)
        assert r["tpot_serve"] == pytest.approx(s["tpot"], rel=1e-9)
        assert r["ttft_generate"] == pytest.approx(g["ttft"], rel=1e-9)
        assert r["ttft_serve"] == pytest.approx(s["ttft"], rel=1e-9)
        assert r["tpot_ratio"] == pytest.approx(s["tpot"] / g["tpot"], rel=1e-9)
        assert r["tpot_diff"] == pytest.approx(s["tpot"] - g["tpot"], rel=1e-9)
        assert r["out_serve"] == pytest.approx(s["out"], rel=1e-6)
        assert r["out_generate"] > 0
        assert r["detail"]["tpot_serve"]["n"] == s["n"] == 10
        assert r["like_for_like"] == (c == 1)
        # the fake answers a token every 3 ms: its TPOT is the schedule's, not generate's
        assert 0.002 < r["tpot_serve"] < 0.02
    bf16 = next(r for r in rows if r["served"] == "tiny-bf16")
    assert bf16["differs"] == ["precision generate fp32, serve bf16 (the profile's; the "
                               "server's command sets its own)"]
    assert all(r["differs"] == [] for r in rows if r["served"] == "tiny-folder")
    # the lengths the server's usage reported, where they are not the asked ones
    (with_bos,) = [r["differs"] for r in rows if r["served"] == "tiny-bos"]
    assert with_bos == ["served prompts 9 tokens (the server's usage), asked 8"]
    assert table["left_out"] == ["no generate run of gpt-tiny at batch 4 (the serve runs' "
                                 "concurrency; batches run: 1, 2)",
                                 "1 serve configuration without a shape"]


def test_markdown_states_pairing_ratio_and_the_difference_in_ms(
        dbs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _cli(capsys, dbs["pair"])
    assert rc == 0, err
    assert "the server's overhead against dltop's own generate runs" in out
    assert "| TPOT generate (ms) | TPOT serve (ms) | TPOT serve/generate | " \
           "TPOT serve − generate (ms) |" in out
    assert "concurrency 2 ~ batch 2" in out and "precision generate fp32, serve bf16" in out
    assert "Left out: no generate run of gpt-tiny at batch 4 (the serve runs' concurrency; " \
           "batches run: 1, 2); 1 serve configuration without a shape." in out
    assert "concurrency c ~ batch c" in out and "differs: what is not the same" in out
    rc, out, err = _cli(capsys, dbs["pair"], "--format", "csv")
    assert rc == 0 and "TPOT serve s p90_s" in out and "TPOT serve s n" in out


@pytest.mark.parametrize(("campaign", "said"), [
    ("noshape", 'do not say which of dltop\'s models they serve: set shape = "NAME" '
                "(one of gpt-tiny, gpt2-small, gpt2-medium, llama-1b)"),
    ("nogen", 'no generate run of gpt2-small (set mode = "generate" runs of models = '
              '["gpt2-small"] beside the serve runs of m)'),
    ("tokens", "the generate runs of gpt-tiny have prompt_tokens/new_tokens 8/4; the serve "
               "runs of m 8/8"),
    ("batch", "no generate run of gpt-tiny at batch 2 (the serve runs' concurrency; "
              "batches run: 1)"),
    ("genonly", "no serve runs in campaign 5"),
])
def test_no_pair_exits_2_with_the_reason(dbs: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                         campaign: str, said: str) -> None:
    before = dbs["refuse"].read_bytes()
    rc, out, err = _cli(capsys, dbs["refuse"], "--campaign", campaign)
    assert rc == 2 and out == ""
    assert "--table overhead: " in err and said in err, err
    assert dbs["refuse"].read_bytes() == before


@pytest.mark.parametrize(("line", "said"), [
    ('shape = "gpt-huge"', "matrix[0].shape: unknown value 'gpt-huge' (valid: gpt-tiny, "
                           "gpt2-small, gpt2-medium, llama-1b)"),
    ('shape = ["gpt-tiny"]', "matrix[0].shape:"),
])
def test_a_shape_not_of_dltops_models_is_refused_naming_file_and_key(
        tmp_path: Path, line: str, said: str) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text(HEAD.format(name="p") + SERVE.format(
        model="m", url="http://127.0.0.1:9/v1", conc=1, extra=line))
    res = subprocess.run([sys.executable, "-m", "dltop", "run", "--db",
                          str(tmp_path / "x.db"), str(prof)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2, res.stderr
    assert f"{prof}: {said}" in res.stderr
    assert not (tmp_path / "x.db").exists()


def test_shape_on_a_generate_entry_is_refused(tmp_path: Path) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text(HEAD.format(name="p") + GEN.format(batches="[1]", new=8)
                    + 'shape = "gpt-tiny"\n')
    res = subprocess.run([sys.executable, "-m", "dltop", "run", "--db",
                          str(tmp_path / "x.db"), str(prof)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2
    assert f'{prof}: matrix[0].shape: shape applies to frameworks = ["openai"] ' \
           '(mode = "serve") only' in res.stderr


def test_the_report_states_the_overhead_in_its_serving_section(
        dbs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "r.html"
    capsys.readouterr()
    assert cli.main(["report", "--db", str(dbs["pair"]), "-o", str(page)]) == 0
    html = page.read_text()
    section = html.index("<h2>Serving: latency, throughput, goodput")
    table = html.index('<table class="summary" id="overhead">')
    assert section < table
    row = html[table:html.index("</table>", table)]
    assert "<td>gpt-tiny<td>tiny-folder<td>torch batch 1<td>cpu:1<td>" in row
    assert "<td>concurrency 1 = batch 1<td>" in row and "<td>concurrency 2 ~ batch 2<td>" in row
    # a campaign without a pair leaves the table out, not the report
    assert cli.main(["report", "--db", str(dbs["refuse"]), "--campaign", "batch", "-o",
                     str(page)]) == 0
    assert 'id="overhead"' not in page.read_text()
