"""Writing a results table to a file: one core function behind ``dltop export -o`` and the TUI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dltop import cli
from dltop.errors import UserError
from dltop.results import export
from dltop.store import connect


@pytest.fixture
def db_path(tmp_path: Path, campaigns: Any) -> Path:
    path = tmp_path / "d.db"
    db = connect(path)
    cid, jobs = campaigns.create(db, campaigns.profile("files", ["cpu:1", "cpu:2"]), "files")
    for (_, job_id), seconds in zip(jobs, (0.4, 0.25), strict=True):
        campaigns.add_run(db, cid, job_id, [seconds] * 3, iterations=False)
    return path


def test_the_suffix_picks_the_format(db_path: Path, tmp_path: Path) -> None:
    db = connect(db_path, create=False)
    for suffix, marker in ((".md", "| model |"), (".csv", "model,framework"),
                           (".tex", "\\toprule"), (".JSON", '"campaigns"')):
        out = tmp_path / f"t{suffix}"
        assert export.export_to_file(db, 1, str(out)) == f"wrote {out}"
        assert marker in out.read_text()
    with pytest.raises(UserError, match=r"unknown format \(use one of .md, .csv, .json, .tex"):
        export.export_to_file(db, 1, str(tmp_path / "t.txt"))
    with pytest.raises(UserError, match="cannot write"):
        export.export_to_file(db, 1, str(tmp_path / "missing-dir" / "t.md"))


def test_scaling_and_throughput_to_file(db_path: Path, tmp_path: Path) -> None:
    db = connect(db_path, create=False)
    out = tmp_path / "s.json"
    export.export_to_file(db, 1, str(out), table="scaling")
    rows = json.loads(out.read_text())["rows"]
    assert [round(r["speedup"], 2) for r in rows] == [1.0, 1.6]
    export.export_to_file(db, 1, str(out), metric="throughput")
    assert json.loads(out.read_text())["unit"].startswith("samples per second")


def test_cli_export_takes_the_format_from_the_output_suffix(db_path: Path,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "t.tex"
    assert cli.main(["export", "--db", str(db_path), "-o", str(out)]) == 0
    assert out.read_text().startswith("% dltop campaign 1 (files)")
    assert cli.main(["export", "--db", str(db_path), "--format", "csv", "-o", str(out)]) == 0
    assert out.read_text().startswith("# Campaign 1 `files`")
    assert "\nmodel,framework,batch,cpu:1,cpu:1 status,cpu:2,cpu:2 status\n" in out.read_text()
    txt = tmp_path / "t.txt"  # an unknown suffix keeps the default, Markdown
    assert cli.main(["export", "--db", str(db_path), "--table", "scaling", "-o", str(txt)]) == 0
    assert txt.read_text().startswith("Campaign 1 `files` (queued): scaling")
    # another suffix is no format dltop writes: refused, nothing written, unless --format
    xlsx = tmp_path / "t.xlsx"
    assert cli.main(["export", "--db", str(db_path), "-o", str(xlsx)]) == 2
    assert not xlsx.exists()
    assert cli.main(["export", "--db", str(db_path), "--format", "csv", "-o", str(xlsx)]) == 0
    assert xlsx.read_text().startswith("# Campaign 1 `files`")
