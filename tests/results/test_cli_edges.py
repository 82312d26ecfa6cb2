"""The CLI's small edges (issue 31 item 8): ``--format tex``, subcommand usage lines,
``status`` of an ended campaign, ``runs --csv`` flags, ``compare``'s errors."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest

from dltop import cli
from dltop.cli.parser import build_parser
from dltop.store import connect


@pytest.fixture
def db_path(tmp_path: Path, campaigns: Any) -> Path:
    """One ended campaign: a noisy ok run and a quiet one."""
    path = tmp_path / "e.db"
    db = connect(path)
    cid, jobs = campaigns.create(db, campaigns.profile("edges", ["cpu:1", "cpu:2"]),
                                 name="edges")
    campaigns.add_run(db, cid, jobs[0][1], [0.1, 0.1, 0.1], fields={"noisy": 1})
    campaigns.add_run(db, cid, jobs[1][1], [0.2, 0.2, 0.2])
    db["campaigns"].update(cid, {"status": "finished", "finished_at": "2026-11-26T10:00:00"})
    db.close()
    return path


def test_export_format_tex_is_latex(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["export", "--db", str(db_path), "--format", "tex"]) == 0
    tex = capsys.readouterr().out
    assert "\\toprule" in tex and "|" not in tex.split("\\toprule")[1]
    # the noisy cell's `*` is explained in the comment lines above the tabular
    head, body = tex.split("\\begin{tabular}")
    assert "*" in body and "`*` noisy" in head, tex
    assert cli.main(["export", "--db", str(db_path), "--format", "latex"]) == 0
    assert capsys.readouterr().out == tex
    # (a campaign against itself is refused since issue 40: its devices against each other)
    assert cli.main(["compare", "--db", str(db_path), "1", "--by", "device", "--format",
                     "tex"]) == 0
    assert "\\toprule" in capsys.readouterr().out


@pytest.mark.parametrize("argv, usage", [
    (["run"], "usage: dltop run [-h]"),
    (["export"], "usage: dltop export [-h]"),
    (["env", "setup"], "usage: dltop env setup [-h]"),
])
def test_subcommand_usage_names_the_command(argv: list[str], usage: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    out = capsys.readouterr().out
    assert out.startswith(usage) and "[COMMAND ...]" not in out


def test_status_of_an_ended_campaign_says_finished_once(
        db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["status", "--db", str(db_path)]) == 0
    out = capsys.readouterr().out
    assert "Last campaign 1 `edges`: finished 2026-11-26T10:00:00" in out
    assert "finished, finished" not in out
    db = connect(db_path, create=False)
    db["campaigns"].update(1, {"status": "cancelled"})
    db.close()
    assert cli.main(["status", "--db", str(db_path)]) == 0
    assert "`edges`: cancelled, ended 2026-11-26T10:00:00" in capsys.readouterr().out


def test_runs_csv_writes_flags_as_1_and_0(db_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["runs", "--db", str(db_path), "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert sorted(r["noisy"] for r in rows) == ["0", "1"]
    assert "True" not in str(rows) and "False" not in str(rows)


DOCS = Path(__file__).resolve().parents[2]


def test_docs_describe_the_quick_profile_and_every_model() -> None:
    """docs/profiles.md's `quick` row and models key, and the README's quick start, say
    what the built-in profile and the catalogue hold."""
    from dltop import catalog
    from dltop.profiles.loader import load

    jobs = load("quick").jobs
    names = {"torch": "PyTorch", "tensorflow": "TensorFlow", "cntk": "CNTK", "jax": "JAX"}
    profiles_md = (DOCS / "docs" / "profiles.md").read_text()
    row = next(line for line in profiles_md.splitlines() if line.startswith("| `quick` |"))
    for fw in {j.framework for j in jobs}:
        assert names[fw] in row, f"docs/profiles.md quick row lacks {names[fw]}"
    assert all(m in row for m in {j.model for j in jobs})
    assert f"({len(jobs)} jobs)" in row
    key = next(line for line in profiles_md.splitlines() if line.startswith("| `models` |"))
    assert all(f"`{m}`" in key for m in catalog.MODELS)
    readme = (DOCS / "README.md").read_text()
    assert f"{len({j.framework for j in jobs})} frameworks x 2 models" in readme


def test_runs_and_exports_give_one_samples_per_s(tmp_path: Path, campaigns: Any,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Skewed iterations (median 0.1 s, mean 0.2 s, batch 8): total samples / total
    seconds is 40/s in `dltop runs` and in the export alike, not batch / median's 80."""
    import json

    path = tmp_path / "s.db"
    db = connect(path)
    cid, jobs = campaigns.create(db, campaigns.profile("rate", ["cpu:1"]), name="rate")
    campaigns.add_run(db, cid, jobs[0][1], [0.1, 0.1, 0.4], 8)
    db.close()
    assert cli.main(["runs", "--db", str(path), "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)
    assert run["samples_per_s"] == pytest.approx(40.0)
    assert cli.main(["export", "--db", str(path), "--metric", "throughput",
                     "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    (cell,) = row["cells"].values()
    assert cell["value"] == pytest.approx(40.0)


def test_a_foreign_runner_is_shared_not_packed(tmp_path: Path, campaigns: Any,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """concurrent_runs in a campaign without --pack came from another engine's runner:
    flagged `shared`; `packed` is kept for --pack campaigns."""
    import json

    from dltop.results.aggregate import config_results
    from dltop.results.summary import flags

    path = tmp_path / "f.db"
    db = connect(path)
    cid, jobs = campaigns.create(db, campaigns.profile("solo", ["cpu:1"]), name="solo")
    campaigns.add_run(db, cid, jobs[0][1], [0.1, 0.1], fields={"concurrent_runs": 1})
    cid2, jobs2 = campaigns.create(db, campaigns.profile("pk", ["cpu:1"]), name="pk")
    db["campaigns"].update(cid2, {"pack": 1})
    campaigns.add_run(db, cid2, jobs2[0][1], [0.1, 0.1], fields={"concurrent_runs": 1})
    assert flags(config_results(db, cid)[0]) == ["shared"]
    assert flags(config_results(db, cid2)[0]) == ["packed"]
    db.close()
    assert cli.main(["export", "--db", str(path), "--campaign", "1", "--table", "summary",
                     "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["flags"] == "shared"
    assert cli.main(["compare", "--db", str(path), "1", "2", "--format", "json"]) == 0
    (pair,) = json.loads(capsys.readouterr().out)["rows"]
    assert pair["flags"] == {"a": ["shared"], "b": ["packed"]}
    assert pair["verdict"].startswith("inconclusive")


def test_report_flag_lists_say_shared_or_packed() -> None:
    from dltop.report.runs import _flags

    row = {"noisy": 0, "concurrent_runs": 2, "contaminated": 0}
    assert _flags({**row, "pack": False}) == ["shared"]
    assert _flags({**row, "pack": True}) == ["packed"]
    assert _flags({**row, "concurrent_runs": 0, "pack": True}) == []


def test_the_pivot_explains_every_cell_without_a_number(
        tmp_path: Path, campaigns: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # 'short 4/10', '-' (queued) and an empty cell were printed with no legend: the note
    # named OOM, n/a and failed only
    db = connect(tmp_path / "s.db")
    cid, jobs = campaigns.create(db, campaigns.profile("edges", ["cpu:1", "cpu:2"])
                                 + '[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\n'
                                 'batch_sizes = [32]\ndevices = ["cpu:1"]\n', name="edges")
    campaigns.add_run(db, cid, jobs[0][1], [], status="short",
                      fields={"n_iterations": 4})
    db.close()
    assert cli.main(["export", "--db", str(tmp_path / "s.db")]) == 0
    out = capsys.readouterr().out
    assert "| short 4/" in out and "| - |" in out and "|  |" in out, out
    assert "short n/m: the program ended after n of the m measured iterations" in out
    assert "`-` no result yet: its runs are queued or running." in out
    assert "An empty cell: no such configuration in these campaigns." in out


def test_where_a_value_no_row_shows_is_refused_naming_the_values(
        tmp_path: Path, campaigns: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`--where model=resnet50` (for resnet-50) printed an empty table and exit 0; a
    list with one value present still filters, and a lone absent value in a list is
    no error (it may not have run yet)."""
    path = tmp_path / "w.db"
    db = connect(path)
    cid, jobs = campaigns.create(db, campaigns.profile("w", ["cpu:1"],
                                                       models=("fcn-r", "lenet")), name="w")
    for _, job_id in jobs:
        campaigns.add_run(db, cid, job_id, [0.1, 0.1])
    db.close()
    assert cli.main(["export", "--db", str(path), "--where", "model=resnet50"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == ("dltop: error: --where 'model=resnet50': no row's model "
                                 "is 'resnet50'; this table's: fcn-r, lenet\n")
    assert cli.main(["export", "--db", str(path), "--where", "model=LENET,vgg16"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows[1:]] == ["| lenet"]  # under the header
