"""``dltop runs`` as a real command: fitted to 80 columns, plain when piped, JSON, CSV,
and its ``--campaign`` / ``--status`` filters."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dltop.catalog import RunStatus
from dltop.store import connect

BOX = re.compile("[┏┳┓┃┡╇┩│└┴┘━─]")
ANSI = re.compile("\x1b\\[[0-9;]*m")
CAUSE = "RuntimeError: CUDA error: an illegal memory access was encountered " + "x" * 30


@pytest.fixture
def runs_db(tmp_path: Path, campaigns: Any) -> Path:
    """Two campaigns: ok, crashed (a long cause) and oom runs in the first, one ok in the
    second."""
    path = tmp_path / "r.db"
    db = connect(path)
    cid, jobs = campaigns.create(db, campaigns.profile(
        "listing", ["cpu:1", "cpu:2", "cpu:4"], models=["resnet-50"]), name="first")
    campaigns.add_run(db, cid, jobs[0][1], [0.1, 0.11, 0.12])
    campaigns.add_run(db, cid, jobs[1][1], [0.1], status=RunStatus.CRASHED,
                      fields={"error_message": CAUSE})
    campaigns.add_run(db, cid, jobs[2][1], [0.1], status=RunStatus.OOM)
    cid2, jobs2 = campaigns.create(db, campaigns.profile("other", ["cpu:1"]), name="second")
    campaigns.add_run(db, cid2, jobs2[0][1], [0.2, 0.2])
    db.close()
    return path


def dltop(db: Path, *args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "dltop", "runs", "--db", str(db), *args],
                          capture_output=True, text=True, env=env, timeout=120)


def on_a_terminal(db: Path, columns: int) -> str:
    """``dltop runs`` with stdout on a pseudo-terminal ``columns`` wide."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "24", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "runs", "--db", str(db)],
                            stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the command closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=120) == 0
    os.close(leader)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_piped_at_80_columns_fits_keeps_the_key_columns_and_the_cause(runs_db: Path) -> None:
    res = dltop(runs_db, columns=80)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    header = lines[0].split()
    for key in ("run", "status", "model", "device", "median", "note"):
        assert key in header
    # torch in every row: a setting of the whole listing, said once under it
    assert "framework" not in header and "constant: framework torch," in res.stdout
    assert "started" not in header  # dropped whole rather than every column cut
    crashed = next(line for line in lines if "crashed" in line)
    assert "RuntimeError" in crashed and crashed.endswith("...")  # the cause gets the rest
    assert "resnet-50" in res.stdout and "torch" in res.stdout  # no key cell cut


def test_piped_output_is_plain_text_every_column_whole(runs_db: Path) -> None:
    res = dltop(runs_db)
    assert res.returncode == 0, res.stderr
    assert not BOX.search(res.stdout) and not ANSI.search(res.stdout)
    header = res.stdout.splitlines()[0].split()
    assert {"started", "campaign", "cv", "samples/s"} <= set(header)
    first = res.stdout.splitlines()[0]
    assert "rep  n iters  median s" in first, first
    assert CAUSE in res.stdout  # not cut: a pipe keeps whole lines


def test_on_an_80_column_terminal_the_box_table_fits(runs_db: Path) -> None:
    out = on_a_terminal(runs_db, 80)
    assert BOX.search(out)
    visible = [ANSI.sub("", line) for line in out.splitlines()]
    assert visible and all(len(line) <= 80 for line in visible), visible
    assert any("resnet-50" in line and "ok" in line for line in visible)
    assert any("RuntimeError" in line for line in visible)  # the cause kept, cut


def test_json_is_one_array_of_objects_with_units_in_the_keys(runs_db: Path) -> None:
    res = dltop(runs_db, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert isinstance(data, list) and len(data) == 4
    keys = {"run_id", "campaign_id", "status", "framework", "model", "batch_size", "device",
            "repeat", "median_s", "samples_per_s", "cv", "message", "identity"}
    assert all(keys <= set(rec) for rec in data)
    crashed = next(r for r in data if r["status"] == "crashed")
    assert crashed["message"].startswith("RuntimeError") and crashed["median_s"] is None
    ok = next(r for r in data if r["status"] == "ok" and r["device"] == "cpu:1"
              and r["model"] == "resnet-50")
    assert ok["median_s"] == pytest.approx(0.11) and ok["identity"]["precision"] == "fp32"
    # the n behind the median: a time window measures more than `iterations` asks
    assert ok["n_iterations"] == 3


def test_csv_parses_with_the_csv_module(runs_db: Path) -> None:
    res = dltop(runs_db, "--csv")
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert len(rows) == 4
    assert {r["status"] for r in rows} == {"ok", "crashed", "oom"}
    assert all(float(r["median_s"]) > 0 for r in rows if r["status"] == "ok")
    assert json.loads(rows[0]["identity"])["framework"] == "torch"


def test_campaign_and_status_filters(runs_db: Path) -> None:
    by_campaign = json.loads(dltop(runs_db, "--json", "--campaign", "2").stdout)
    assert [r["campaign_id"] for r in by_campaign] == [2]
    failed = json.loads(dltop(runs_db, "--json", "--status", "crashed,oom").stdout)
    assert sorted(r["status"] for r in failed) == ["crashed", "oom"]
    repeated = json.loads(dltop(runs_db, "--json", "--status", "oom", "--status", "ok",
                                "--campaign", "1").stdout)
    assert sorted(r["status"] for r in repeated) == ["ok", "oom"]


def test_a_bad_status_exits_2_naming_the_allowed_ones(runs_db: Path) -> None:
    res = dltop(runs_db, "--status", "ok,failed")
    assert res.returncode == 2
    assert "'failed'" in res.stderr and "crashed" in res.stderr and "oom" in res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
