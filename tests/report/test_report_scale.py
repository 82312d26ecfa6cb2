"""The report at scale (issue 32 item 4): long series downsampled with their spikes,
figures capped to a readable number of lines, a compact summary table, runs picked
with ``--run``. Real databases; the 10 000-configuration measurement is
benchmarks/report_scale.py."""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dltop.errors import UserError
from dltop.report import data, html
from dltop.report.captions import MAX_LINES, cap_lines, spread_pick
from dltop.results import queries
from dltop.results.display import without_unavailable
from dltop.store import connect
from dltop.store.read import series
from dltop.store.reader import open_reader

from .reportdb import CPU_PROFILE, add_campaign

LONG = 5000
SPIKES = (1234, 4321)


def _long_run_db(path: Path) -> tuple[Path, int]:
    """The CPU campaign, its first run made long: LONG iterations, two of them 10× slow,
    and LONG telemetry windows with one power spike."""
    db = connect(path)
    add_campaign(db, CPU_PROFILE, "cpu-demo", gpu=False)
    run_id = int(db.execute("select min(id) from runs").fetchone()[0])
    (t_ns,) = db.execute("select max(t_mono_ns) from iterations where run_id = ?",
                         [run_id]).fetchone()
    (top,) = db.execute("select max(idx) from iterations where run_id = ?", [run_id]).fetchone()
    with db.conn:
        db.conn.executemany(
            "insert into iterations (run_id, idx, seconds, samples, warmup, loss, t_mono_ns) "
            "values (?, ?, ?, 8, 0, 1.0, ?)",
            ((run_id, top + 1 + i, 0.5 if i in SPIKES else 0.05,
              t_ns + int((i + 1) * 0.05e9)) for i in range(LONG)))
        db.conn.executemany(
            "insert into host_samples (run_id, t_start_mono_s, t_wall_s, n, cpu_mean_pct, "
            "tree_cpu_pct) values (?, ?, ?, 1, ?, 95)",
            ((run_id, t_ns / 1e9 + 0.05 * i, 1.7e9 + i, 99.0 if i == 777 else 40.0)
             for i in range(LONG)))
    db.close()
    return path, run_id


def test_long_series_are_downsampled_and_keep_their_spikes(tmp_path: Path) -> None:
    path, run_id = _long_run_db(tmp_path / "long.db")
    db = open_reader(path)
    secs = series.iteration_series(db, run_id, "seconds", 200)
    measured = [r for r in secs.rows if not r["warmup"]]
    assert secs.n_raw > LONG and secs.downsampled and len(measured) <= 200
    assert sum(r["v"] == 0.5 for r in measured) == len(SPIKES)  # every-k-th would lose them
    assert [r["x"] for r in measured] == sorted(r["x"] for r in measured)
    host = series.host_series(db, run_id, "cpu_mean_pct", 200)
    assert len(host.rows) <= 200 and max(r["v"] for r in host.rows) == 99.0
    rep = data.build(db, queries.resolve_campaigns(db, "1"), max_runs=1)
    fig = rep.runs[0]
    rows = [r for r in fig.rows if r["panel"] == "s/iter"]
    assert len(rows) <= 600 and max(r["value"] for r in rows) == 0.5
    assert "downsampled for display" in fig.caption
    assert f"s/iter {secs.n_raw:,} → " in fig.caption and "spikes stay" in fig.caption
    assert "Showing 1 of 16 runs" in rep.runs_note and f"run {run_id};" in rep.runs_note
    assert "dltop report --run N" in rep.runs_note


def test_a_short_run_is_drawn_whole_and_says_nothing(report_db: Path) -> None:
    db = open_reader(report_db)
    rep = data.build(db, queries.resolve_campaigns(db, "2"), max_runs=1)
    assert rep.runs and "downsampled" not in rep.runs[0].caption
    assert {r["panel"] for r in rep.runs[0].rows} >= {"s/iter", "GPU power W", "CPU %"}


def test_a_few_rows_are_drawn_whole_however_they_fall_in_time(tmp_path: Path) -> None:
    # a step, 4 s of nothing, then four quick ones 2 ms apart: those four shared one of
    # the 150 spans, which kept its min and max only ("s/iter 5 → 4" for a 5-step run)
    db = connect(tmp_path / "few.db")
    add_campaign(db, CPU_PROFILE, "cpu-demo", gpu=False)
    run_id = int(db.execute("select min(id) from runs").fetchone()[0])
    ends = (1.0, 5.0, 5.002, 5.004, 5.006)
    with db.conn:
        db.conn.execute("delete from iterations where run_id = ?", [run_id])
        db.conn.executemany(
            "insert into iterations (run_id, idx, seconds, samples, warmup, loss, t_mono_ns) "
            "values (?, ?, ?, 8, 0, 1.0, ?)",
            ((run_id, i, 1.0 if i == 0 else 0.002 + 0.0001 * i, int((100 + end) * 1e9))
             for i, end in enumerate(ends)))
    db.close()
    got = series.iteration_series(open_reader(tmp_path / "few.db"), run_id, "seconds", 300)
    assert len(got.rows) == 5 and not got.downsampled
    assert [r["idx"] for r in got.rows] == [0, 1, 2, 3, 4]


def test_only_runs_draws_those_and_refuses_a_foreign_one(report_db: Path) -> None:
    db = open_reader(report_db)
    camps = queries.resolve_campaigns(db, "1")
    ids = [int(r[0]) for r in db.execute("select id from runs where campaign_id = 1 and "
                                          "status = 'ok' order by id desc limit 2")]
    rep = data.build(db, camps, only_runs=ids)
    assert sorted(f.extra["run_id"] for f in rep.runs) == sorted(ids)
    assert "the runs --run names" in rep.runs_note
    other = int(db.execute("select max(id) from runs where campaign_id = 2").fetchone()[0])
    with pytest.raises(UserError, match=f"--run: no run {other} with iterations in campaign 1"):
        data.build(db, camps, only_runs=[other])


def test_run_option_on_the_command_line(report_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    bad = subprocess.run([sys.executable, "-m", "dltop", "report", "--db", str(report_db),
                          "--run", "x1", "-o", str(out)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert bad.returncode == 2 and "--run: expected run ids" in bad.stderr
    assert "Traceback" not in bad.stderr and not out.exists()


def test_lines_are_capped_evenly_among_frameworks() -> None:
    rows = [{"framework": fw, "series": f"{fw} b{b}", "x": x}
            for fw in ("torch", "tensorflow") for b in range(40) for x in (1, 2)]
    rows.append({"framework": "jax", "series": "jax b8", "x": 1})
    kept, note = cap_lines(rows)
    lines = {r["series"] for r in kept}
    assert len(lines) == MAX_LINES and "jax b8" in lines
    assert {"torch b0", "torch b39", "tensorflow b0", "tensorflow b39"} <= lines
    assert all(r["x"] in (1, 2) for r in kept) and len(kept) == 2 * (MAX_LINES - 1) + 1
    assert note.startswith(f"{MAX_LINES} of 81 lines drawn")
    assert "summary table and `dltop export`" in note
    assert cap_lines(rows[:10]) == (rows[:10], "")
    assert spread_pick(list("abcdefghij"), 4) == ["a", "d", "g", "j"]


class _Rows(HTMLParser):
    """Rows and cells of the summary table as a browser parses them."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.data_v: list[str] = []
        self.on = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tbody":
            self.on = True
        elif self.on and tag == "tr":
            self.rows.append([])
        elif self.on and tag == "td":
            self.rows[-1].append("")
            self.data_v += [v or "" for k, v in attrs if k == "data-v"]

    def handle_endtag(self, tag: str) -> None:
        self.on = self.on and tag != "tbody"

    def handle_data(self, text: str) -> None:
        if self.on and self.rows and self.rows[-1]:
            self.rows[-1][-1] += text


def test_summary_table_is_compact_and_keeps_every_cell(report_db: Path) -> None:
    db = open_reader(report_db)
    rep = data.build(db, queries.resolve_campaigns(db, "1"), max_runs=0)
    text = html.summary_html(rep)
    parsed = _Rows()
    parsed.feed(text)
    table = without_unavailable(rep.summary)  # as Markdown: no column n/a in every row
    assert len(parsed.rows) == len(table.rows)
    for got, row in zip(parsed.rows, table.rows, strict=True):
        assert got[:-1] == [c.text if c else "" for c in row.cells]
    assert "</td>" not in text and 'class="r"' not in text
    # a number shown as text sorts by that text; one that is not (n/a) carries data-v
    numeric = [c for row in table.rows for c in row.cells if c is not None
               and isinstance(c.value, int | float) and not isinstance(c.value, bool)]
    assert numeric and len(parsed.data_v) < len(numeric)
    assert all(html.NUMBER.match(c.text) or f'data-v="{c.value:.9g}"' in text
               for c in numeric)
    assert re.search(r"\.summary td:nth-child\(\d+\)", text)
