"""``dltop report`` as a real subprocess: files written, offline page, exit statuses."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.store import connect

from .reportdb import CPU_PROFILE, add_campaign


def dltop(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=240, check=False)


@pytest.mark.slow
def test_report_is_one_offline_html_file(report_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = dltop("report", "--db", str(report_db), "--campaign", "1", "-o", str(out),
                cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"wrote {out}"
    page = out.read_text()
    # nothing is fetched: no script, style, image or link from elsewhere
    assert not re.search(r"""<(script|link|img|iframe)[^>]+(src|href)=["']?(https?:)?//""",
                         page, re.I)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page, re.I)
    assert "@import" not in page and "cdn" not in page.lower()
    assert page.count("<script>") == 1
    assert page.count('<figure id="') == 3 + 14  # time, scaling, batch; 14 runs
    assert "omitted: no GPU run" in page
    assert "CUDA out of memory. Tried to allocate 2.00 GiB &lt;b&gt;bold&lt;/b&gt;" in page
    assert '<tr class=fail>' in page


def test_default_output_is_report_html(report_db: Path, tmp_path: Path) -> None:
    res = dltop("report", "--db", str(report_db), "--max-runs", "0", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "report.html").stat().st_size > 10_000


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
@pytest.mark.parametrize("fmt", ["svg", "png", "pdf"])
def test_figures_for_a_paper(report_db: Path, tmp_path: Path, fmt: str) -> None:
    figdir = tmp_path / "figs"
    res = dltop("report", "--db", str(report_db), "--campaign", "2", "--figures",
                str(figdir), "--format", fmt, "--max-runs", "1", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    names = sorted(p.name for p in figdir.iterdir())
    assert names == sorted(["figures.md", f"time-fcn-r-gpu.{fmt}",
                            f"scaling-fcn-r-gpu.{fmt}", f"power-energy.{fmt}",
                            f"run-{_first_run(report_db, 2)}.{fmt}"])
    assert not (tmp_path / "report.html").exists()  # --figures alone writes no page
    magic = {"svg": b"<svg", "png": b"\x89PNG", "pdf": b"%PDF"}[fmt]
    for name in names:
        if name != "figures.md":
            assert (figdir / name).read_bytes().startswith(magic)
    md = (figdir / "figures.md").read_text()
    assert f"![fcn-r: time per mini-batch vs GPUs](time-fcn-r-gpu.{fmt})" in md
    assert "*Figure 3.* GPU power and energy per sample per framework (SIMULATED GPUs)" in md
    assert "single column, 3.3 in wide" in md and "double column, 7 in wide" in md
    # one line per reason, naming the figures' models (no stub per figure)
    assert "- throughput and GPU memory vs batch size: one batch size only (8) (fcn-r)." \
        in md
    if fmt == "png":  # 3.3 in at 300 ppi
        width = int.from_bytes((figdir / "time-fcn-r-gpu.png").read_bytes()[16:20], "big")
        assert 600 <= width <= 3.3 * 300


def _first_run(path: Path, campaign: int) -> int:
    db = connect(path, create=False)
    (rid,) = db.execute("select min(id) from runs where campaign_id = ?", [campaign]).fetchone()
    return int(rid)


def test_a_campaign_without_a_finished_run_exits_0_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    db = connect(path)
    add_campaign(db, CPU_PROFILE, "only-queued", gpu=False, finish=False)
    db.execute("delete from iterations")
    db.execute("delete from runs")
    db.execute("update jobs set status = 'queued'")
    db.conn.commit()
    db.close()
    res = dltop("report", "--db", str(path), "-o", "r.html", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "No finished run in campaign 1 `only-queued`" in res.stderr
    assert "No finished run in campaign 1 `only-queued`" in (tmp_path / "r.html").read_text()


def test_unknown_campaign_exits_2_writing_nothing(report_db: Path, tmp_path: Path) -> None:
    res = dltop("report", "--db", str(report_db), "--campaign", "9", "-o", "r.html",
                cwd=tmp_path)
    assert res.returncode == 2
    assert "no campaign 9" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "r.html").exists()


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_unwritable_file_exits_2_naming_it(report_db: Path, tmp_path: Path) -> None:
    # /proc refuses new files even to root (a 0o500 directory would not stop root)
    res = dltop("report", "--db", str(report_db), "-o", "/proc/dltop-report.html",
                cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.startswith("dltop: error: /proc/dltop-report.html: cannot write")
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("args", [["-o", "missing/dir/r.html"], ["-o", "."],
                                  ["--figures", "a-file"], ["--figures", "no/such/dir"]])
def test_unwritable_paths_exit_2_naming_them(report_db: Path, tmp_path: Path,
                                             args: list[str]) -> None:
    (tmp_path / "a-file").write_text("x")
    before = sorted(p.name for p in tmp_path.iterdir())
    res = dltop("report", "--db", str(report_db), *args, cwd=tmp_path)
    assert res.returncode == 2, res.stdout
    assert res.stderr.startswith(f"dltop: error: {args[1]}")
    assert "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_format_without_figures_is_refused(report_db: Path, tmp_path: Path) -> None:
    res = dltop("report", "--db", str(report_db), "--format", "png", cwd=tmp_path)
    assert res.returncode == 2 and "--figures" in res.stderr
    assert not (tmp_path / "report.html").exists()
