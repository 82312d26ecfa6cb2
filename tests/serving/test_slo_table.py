"""``dltop export --table slo`` (issue 41's question): real serve campaigns against the
streaming fake run one request at a time (``--serial``: a request's TTFT grows with the
queue before it), so that a burst rate misses a TTFT SLO that slower rates meet."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.results.conftest import CampaignMaker
from tests.serving.conftest import SLO_FAKE, slo_campaign, start_fake

from dltop import cli
from dltop.store.db import connect

# One worker runs the serve campaigns (~13 s): under `make test`'s --dist loadgroup the
# module fixture would otherwise run once on each worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slo_table")]


def _cli(capsys: pytest.CaptureFixture[str], db: Path | list[Path], *args: str
         ) -> tuple[int, str, str]:
    """``dltop ARGS`` in this process (exit status, stdout, stderr): a reading command
    needs no process of its own, and each one started costs a second here."""
    dbs = [db] if isinstance(db, Path) else db  # several --db after the command: a study
    capsys.readouterr()
    rc = cli.main([args[0], *(a for d in dbs for a in ("--db", str(d))), *args[1:]])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return rc, out, err


@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """a.db: TTFT SLO 150 ms at 10, 20 and 500 req/s (8 requests of ~38 ms each, one at a
    time: at 10 and 20 req/s each meets it by ~120 ms, a margin a loaded machine keeps;
    the burst's fifth and later queue past it); b.db: SLO 1000 ms at 20 and 500 req/s (met);
    c.db: one serve rate without an SLO, then one with; d.db: a training campaign;
    e.db: SLO 1000 ms at 20 req/s and "inf" (met)."""
    tmp = tmp_path_factory.mktemp("slo")
    proc, url = start_fake(*SLO_FAKE)
    try:
        out = {k: tmp / f"{k}.db" for k in "abcde"}
        slo_campaign(out["a"], tmp, "tight", url, ("[10, 20, 500]", "slo_ttft_ms = 150"))
        slo_campaign(out["b"], tmp, "loose", url, ("[20, 500]", "slo_ttft_ms = 1000"))
        slo_campaign(out["c"], tmp, "noslo", url, ("[20]", ""))
        slo_campaign(out["e"], tmp, "burst", url, ('[20, "inf"]', "slo_ttft_ms = 1000"))
        slo_campaign(out["c"], tmp, "onerate", url, ("[20]", "slo_ttft_ms = 150"))
        db = connect(out["d"])
        cid, jobs = CampaignMaker.create(db, CampaignMaker.profile("train", ["cpu:1"]))
        CampaignMaker.add_run(db, cid, jobs[0][1], [0.1, 0.1, 0.1])
        db.conn.close()
        yield out
    finally:
        proc.kill()
        proc.wait()


def _rows(capsys: pytest.CaptureFixture[str], db: Path | list[Path],
          *args: str) -> list[dict[str, Any]]:
    rc, out, err = _cli(capsys, db, "export", "--table", "slo", "--format", "json", *args)
    assert rc == 0, err
    rows: list[dict[str, Any]] = json.loads(out)["rows"]
    return rows


def _rates(db: Path) -> dict[int, float]:
    """Each ok run's asked rate (``dltop runs --json``)."""
    runs = json.loads(subprocess.run([sys.executable, "-m", "dltop", "runs", "--db", str(db),
                                      "--json"], capture_output=True, text=True,
                                     check=True).stdout)
    return {r["run_id"]: float(r["identity"]["request_rate"]) for r in runs
            if r["status"] == "ok"}


def _raw_attainment(db: Path, bound_s: float) -> dict[float, tuple[int, int]]:
    """(met, measured) per asked rate, straight from the stored requests."""
    rates = _rates(db)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("select run_id, error, output_tokens, ttft_s from serve_requests "
                            "where coalesce(warmup, 0) = 0").fetchall()
    out: dict[float, tuple[int, int]] = {}
    for rid, error, tokens, ttft in rows:
        met, n = out.get(rates[rid], (0, 0))
        ok = error is None and tokens >= 1 and ttft is not None and ttft <= bound_s
        out[rates[rid]] = (met + ok, n + 1)
    return out


def _run_at(db: Path, rate: float) -> int:
    return next(rid for rid, r in _rates(db).items() if r == rate)


def test_capacity_is_the_highest_rate_meeting_the_slo(
        dbs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = _rows(capsys, dbs["a"])
    assert row["verdict"] == "20" and row["capacity"] == 20.0, row
    raw = _raw_attainment(dbs["a"], 0.150)
    got = {p["rate"]: (p["met"], p["n"]) for p in row["per_rate"]}
    assert got == raw  # the attainment is the stored requests' count
    assert [p["passes"] for p in row["per_rate"]] == [True, True, False]
    assert raw[500.0][0] <= 6 and raw[10.0] == raw[20.0] == (8, 8)  # the burst queued
    # the figures at the capacity are the summary's of its configuration
    summary = json.loads(_cli(capsys, dbs["a"], "export", "--table", "summary", "--format",
                              "json")[1])["rows"]
    at20 = next(r for r in summary if r["identity"]["request_rate"] == 20)
    assert row["req_rate"] == at20["req-rate"] and row["runs"] == 1 and row["n"] == 8
    assert row["ttft_p99"] is None and row["reasons"]["ttft_p99"] == "n/a: n=8"
    assert row["reasons"]["j_per_token"] == "n/a: no GPU"
    md = _cli(capsys, dbs["a"], "export", "--table", "slo")[1]
    assert "| 10, 20, 500 |" in md and "| 20 |" in md and "Sorted by J per output token" in md
    assert "not shown, n/a in every row:" in md and "J/token (no GPU)" in md


def test_the_target_gives_at_least_and_is_checked(
        dbs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = _rows(capsys, dbs["a"], "--attainment", "0.25")
    assert row["verdict"] == "at least 500 (the highest tried)" and row["capacity"] == 500
    rc, _, err = _cli(capsys, dbs["a"], "export", "--table", "slo", "--attainment", "1.5")
    assert rc == 2 and "--attainment 1.5" in err
    rc, _, err = _cli(capsys, dbs["a"], "export", "--table", "slo", "--attainment", "0")
    assert rc == 2 and "--attainment 0" in err  # refused, not taken for the default
    rc, _, err = _cli(capsys, dbs["a"], "export", "--attainment", "0.9")
    assert rc == 2 and "not of --table pivot" in err


def test_a_passing_inf_says_the_rate_it_reached(
        dbs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    # "at least inf" told a reader nothing: the rate the burst reached is the answer
    (row,) = _rows(capsys, dbs["e"])
    summary = json.loads(_cli(capsys, dbs["e"], "export", "--table", "summary", "--format",
                              "json")[1])["rows"]
    reached = next(r for r in summary if r["identity"]["request_rate"] == "inf")["req-rate"]
    assert row["capacity"] == reached == row["req_rate"] and 20 < reached < 10_000, row
    assert row["verdict"] == f"{reached:.2f} reached (asked inf, the highest tried)", row
    assert [p["rate"] for p in row["per_rate"]] == [20.0, "inf"]
    text = _cli(capsys, dbs["e"], "export", "--table", "slo", "--format", "csv")[1]
    assert "at least" not in text and f"{reached},reached," in text  # CSV: value, status


def test_a_pass_on_a_host_nobody_could_check_says_so(
        dbs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # llama-server at 80 req/s and inf: windows of 0.1-0.75 s, one host reading each, so
    # no foreign process could be seen, while the slower rates were judged contaminated
    db = tmp_path / "unjudged.db"
    shutil.copy(dbs["a"], db)
    with sqlite3.connect(db) as conn:  # the counts as the engine stores them
        conn.execute("update runs set host_readings = 4, window_s = 2.0")
        conn.execute("update runs set host_readings = 1, window_s = 0.5 where id = ?",
                     [_run_at(db, 20)])
    (row,) = _rows(capsys, db)
    assert row["verdict"] == "20"  # said, not judged: the answer stands
    assert row["note"] == "20: contamination not judged (n/a: window 0.5 s, 1 reading " \
        "(raise iterations or lower request_rate))", row
    (plain,) = _rows(capsys, dbs["a"])  # without telemetry nothing was counted: no claim
    assert "not judged" not in plain["note"]


@pytest.mark.parametrize("flag", ["client-bound", "contaminated"])
def test_a_flagged_run_never_passes(dbs: dict[str, Path], tmp_path: Path, flag: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "flagged.db"
    shutil.copy(dbs["a"], db)
    # the flag as the engine sets it (a client behind its schedule, a foreign process)
    sets = "client_bound = 1" if flag == "client-bound" else \
        "contaminated = 1, contamination = 'cpu: 97% of CPU 0 used by other processes'"
    with sqlite3.connect(db) as conn:
        conn.execute(f"update runs set {sets} where id = ?", [_run_at(db, 10)])
    (row,) = _rows(capsys, db)
    assert row["verdict"] == f"none: 10 fails ({flag}, attainment 1.00)", row
    assert row["capacity"] is None and row["reasons"]["capacity"] == row["verdict"]
    assert row["note"] == f"10 {flag}: not a pass; 20 passes above the failure at 10: " \
        "not capacity"
    assert row["per_rate"][0]["why_not"] == flag
    md = _cli(capsys, db, "export", "--table", "slo")[1]
    assert f"10: {flag} 1.00 (8/8)" in md and "none: 10 fails" in md


def test_every_format(dbs: dict[str, Path], tmp_path: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    text = _cli(capsys, dbs["a"], "export", "--table", "slo", "--format", "csv")[1]
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert text.startswith("# Campaign 1 `tight`") and "slo ttft ms 150" in text
    (row,) = list(csv.DictReader(io.StringIO("\n".join(lines))))
    assert row["capacity (req/s)"] == "20.0" and row["capacity (req/s) status"] == "ok"
    assert row["TTFT p99 s status"] == "n/a: n=8" and row["J/token status"] == "n/a: no GPU"
    tex = tmp_path / "slo.tex"
    assert _cli(capsys, dbs["a"], "export", "--table", "slo", "-o", str(tex))[0] == 0
    body = tex.read_text()
    assert "\\begin{tabular}" in body and "at SLO attainment ≥ 0.9" in body
    picked = _cli(capsys, dbs["a"], "export", "--table", "slo", "--columns",
                  "model,capacity,req/s", "--where", "model=steady")[1]
    assert "| model | capacity (req/s) | req/s |" in picked


def test_bad_input_exits_2_and_writes_nothing(dbs: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    before = hashlib.sha256(dbs["c"].read_bytes()).hexdigest()
    out = tmp_path / "out.md"
    cases = [(dbs["d"], "1", "no serve runs in campaign 1"),
             (dbs["c"], "noslo", "give no SLO: set slo_ttft_ms, slo_tpot_ms, slo_e2e_ms"),
             (dbs["c"], "onerate", "no request_rate sweep in campaign 2")]
    for db, ref, said in cases:
        rc, _, err = _cli(capsys, db, "export", "--table", "slo", "--campaign", ref,
                          "-o", str(out))
        assert rc == 2 and said in err, err
        assert len(err.strip().splitlines()) == 1 and not out.exists()
    assert hashlib.sha256(dbs["c"].read_bytes()).hexdigest() == before


def test_a_study_of_two_databases(dbs: dict[str, Path],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(capsys, [dbs["a"], dbs["b"]], "--campaign", "all")
    by_slo = {r["identity"]["slo_ttft_ms"]: r for r in rows}
    assert set(by_slo) == {150.0, 1000.0}  # another SLO is another row, never merged
    assert by_slo[150.0]["verdict"] == "20"
    assert by_slo[1000.0]["verdict"] == "at least 500 (the highest tried)"
    assert [p["rate"] for p in by_slo[1000.0]["per_rate"]] == [20.0, 500.0]
    md = _cli(capsys, [dbs["a"], dbs["b"]], "export", "--table", "slo", "--campaign",
              "a:1,b:1")[1]
    assert "Campaigns a:1 `tight`, b:1 `loose`" in md and "| slo ttft ms |" in md


def test_the_report_answers_in_its_serving_section(
        dbs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "r.html"
    assert _cli(capsys, dbs["a"], "report", "-o", str(page))[0] == 0
    html = page.read_text()
    section = html.index("<h2>Serving: latency, throughput, goodput")
    table = html.index('<table class="summary" id="slo">')
    assert section < table < html.index('<figure id="serve-latency"')
    row = html[table:html.index("</table>", table)]
    assert "<td>10, 20, 500<td>10: 1.00 (8/8), 20: 1.00 (8/8)" in row and "<td>20<td>" in row
    assert "serving capacity at SLO attainment ≥ 0.9" in html
    assert "<p>constant: " in html[table:] and "slo ttft ms 150" in html[table:]
    # campaigns that cannot answer (no rate sweep) leave the table out, not the report
    assert _cli(capsys, dbs["c"], "report", "--campaign", "onerate", "-o", str(page))[0] == 0
    assert 'id="slo"' not in page.read_text()


def test_repeats_of_a_rate_count_together_and_no_slo_is_said(
        dbs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    # c.db's one-rate campaign is a.db's 20 req/s configuration again: its repeat
    (row,) = _rows(capsys, [dbs["a"], dbs["c"]], "--campaign", "all")
    at20 = next(p for p in row["per_rate"] if p["rate"] == 20.0)
    assert (at20["runs"], at20["n"]) == (2, 16) and row["verdict"] == "20"
    assert (row["runs"], row["n"]) == (2, 16)
    md = _cli(capsys, [dbs["a"], dbs["c"]], "export", "--table", "slo", "--campaign",
              "all")[1]
    assert "Left out: 1 serve configuration without an SLO (slo_ttft_ms" in md
