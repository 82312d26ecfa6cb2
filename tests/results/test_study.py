"""Several databases, one study (issue 40 item 1): ``--db A --db B`` on the reading
commands reads both as one set, campaigns addressed as FILE:ID, hosts as column keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.results.importutil import body, export_json

from dltop import cli
from dltop.store import connect


def make_db(path: Path, campaigns: Any, host: str, name: str, seconds: float,
            batches: tuple[int, ...] = (8, 16)) -> Path:
    """A finished campaign (2 repeats per configuration) run on ``host``."""
    db = connect(path)
    cid, jobs = campaigns.create(db, campaigns.profile(name, ["cpu:1"], batch_sizes=batches,
                                                       repeats=2), name=name)
    for k, (_, jid) in enumerate(jobs):
        campaigns.add_run(db, cid, jid, [seconds + 0.01 * k, seconds + 0.01 * k + 0.002,
                                         seconds + 0.01 * k + 0.004])
    db["campaigns"].update(cid, {"status": "finished", "host": host,
                                 "finished_at": "2026-11-26T10:00:00"})
    db.close()
    return path


@pytest.fixture
def two(tmp_path: Path, campaigns: Any) -> tuple[Path, Path]:
    """h100.db and h200.db, each with campaign 1 (the ids collide), on two hosts."""
    return (make_db(tmp_path / "h100.db", campaigns, "hostA", "check", 0.2),
            make_db(tmp_path / "h200.db", campaigns, "hostB", "check", 0.1))


def test_export_over_two_databases_is_the_union_of_each(
        two: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two
    both = export_json(capsys, "--db", str(a), "--db", str(b), "--campaign", "all")
    assert [c["ref"] for c in both["campaigns"]] == ["h100:1", "h200:1"]
    assert [c["id"] for c in both["campaigns"]] == [1, 1]  # as each database has them
    headers = [c["header"] for c in both["columns"]]
    assert headers[-2:] == ["hostA cpu:1", "hostB cpu:1"]  # hosts become column keys
    for path, host in ((a, "hostA"), (b, "hostB")):
        one = export_json(capsys, "--db", str(path), "--campaign", "1")
        assert len(one["rows"]) == len(both["rows"]) == 2
        for mine, theirs in zip(one["rows"], both["rows"], strict=True):
            assert {k: v for k, v in mine.items() if k != "cells"} == \
                {k: v for k, v in theirs.items() if k != "cells"}
            assert mine["cells"]["cpu:1"] == theirs["cells"][f"{host} cpu:1"]
    # the same as the two campaigns imported into one database and exported together
    target = a.parent / "t.db"
    assert cli.main(["import", "--db", str(target), str(a), str(b)]) == 0
    joined = export_json(capsys, "--db", str(target), "--campaign", "all")
    assert body(joined) == body(both)
    for kind in ("summary", "scaling"):
        assert body(export_json(capsys, "--db", str(a), "--db", str(b), "--campaign", "all",
                                "--table", kind)) == \
            body(export_json(capsys, "--db", str(target), "--campaign", "all", "--table", kind))


def test_campaign_refs_in_a_study(two: tuple[Path, Path],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two
    dbs = ["--db", str(a), "--db", str(b)]
    # FILE:ID by stem or by the path as given; the title names each as FILE:ID
    capsys.readouterr()
    assert cli.main(["export", *dbs, "--campaign", f"{b}:1"]) == 0
    assert capsys.readouterr().out.startswith("Campaign h200:1 `check`")
    assert cli.main(["export", *dbs, "--campaign", "h100:1,h200:1"]) == 0
    assert capsys.readouterr().out.startswith("Campaigns h100:1 `check`, h200:1 `check`")
    # an ID both databases have is ambiguous: exit 2, listing both
    assert cli.main(["export", *dbs, "--campaign", "1"]) == 2
    err = capsys.readouterr().err
    assert "campaign 1 is in several databases: h100:1, h200:1; give FILE:ID" in err
    assert cli.main(["export", *dbs, "--campaign", "h300:1"]) == 2
    assert "no campaign 'h300:1'" in capsys.readouterr().err
    # latest is the newest by creation, a name the newest of that name
    assert cli.main(["export", *dbs]) == 0
    assert capsys.readouterr().out.startswith("Campaign h200:1")


def test_compare_across_databases(two: tuple[Path, Path],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two
    capsys.readouterr()
    assert cli.main(["compare", "--db", str(a), "--db", str(b), "h100:1", "h200:1",
                     "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ratios = [r["ratio"] for r in out["rows"]]
    assert len(ratios) == 2 and all(0.4 < x < 0.6 for x in ratios)  # H200 about 2x
    assert [c["ref"] for c in out["campaigns"]] == ["h100:1", "h200:1"]
    # A and B themselves, not {"id": 1} twice
    assert (out["a"]["ref"], out["b"]["ref"]) == ("h100:1", "h200:1")


def test_same_file_twice_is_read_once(two: tuple[Path, Path],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    a, _ = two
    alias = a.parent / "alias.db"
    alias.symlink_to(a)
    single = export_json(capsys, "--db", str(a))
    capsys.readouterr()
    assert cli.main(["export", "--format", "json", "--db", str(a), "--db", str(alias)]) == 0
    res = capsys.readouterr()
    assert f"--db {alias} is {a} again: read once" in res.err
    assert json.loads(res.out) == single


def test_a_campaign_in_two_files_is_read_once(two: tuple[Path, Path],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two
    assert cli.main(["import", "--db", str(b), str(a)]) == 0  # b now holds a's campaign too
    capsys.readouterr()
    assert cli.main(["export", "--format", "json", "--db", str(a), "--db", str(b),
                     "--campaign", "all"]) == 0
    res = capsys.readouterr()
    assert "campaign h200:2 `check` is h100:1 (the same UUID): read once" in res.err
    assert [c["ref"] for c in json.loads(res.out)["campaigns"]] == ["h100:1", "h200:1"]


def test_runs_and_status_over_two_databases(two: tuple[Path, Path],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two
    capsys.readouterr()
    assert cli.main(["runs", "--db", str(a), "--db", str(b), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert sorted((r["database"], r["campaign_id"], r["run_id"], r["job_id"])
                  for r in runs) == \
        [(db, 1, n, n) for db in ("h100", "h200") for n in (1, 2, 3, 4)]
    assert cli.main(["runs", "--db", str(a), "--db", str(b), "--campaign", "h100:1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert {ln.split()[0] for ln in lines[1:5]} == {"h100:1", "h100:2", "h100:3", "h100:4"}
    assert cli.main(["status", "--db", str(a), "--db", str(b)]) == 0
    out = capsys.readouterr().out
    assert f"{a}:" in out and f"{b}:" in out and out.count("Last campaign 1 `check`") == 2


@pytest.mark.slow  # spawns dltop or runner processes: over 1 s idle
def test_check_and_report_read_a_study(two: tuple[Path, Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two
    assert cli.main(["check", "--db", str(a), "--db", str(b), "h200:1"]) == 0
    out = tmp_path / "r.html"
    assert cli.main(["report", "--db", str(a), "--db", str(b), "--campaign", "all",
                     "-o", str(out)]) == 0
    html = out.read_text()
    assert "h100:1" in html and "h200:1" in html and "hostB" in html


def test_a_run_id_needs_one_database(two: tuple[Path, Path], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two
    for args in (["export", "--table", "profile", "--run", "1"],
                 ["report", "--run", "1", "-o", str(tmp_path / "r.html")]):
        assert cli.main([*args, "--db", str(a), "--db", str(b)]) == 2
        assert "--run names a run of one database: give one --db" in capsys.readouterr().err


def test_a_studys_refs_read_in_that_database_alone(two: tuple[Path, Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # what a study prints (campaign h200:1, run h200:3) is taken by a command given that
    # file alone; it said "no campaign named 'h200:1'" and "invalid int value: 'h200:3'"
    _a, b = two
    capsys.readouterr()
    assert cli.main(["export", "--db", str(b), "--campaign", "h200:1"]) == 0
    assert capsys.readouterr().out.startswith("Campaign 1 `check`")
    assert cli.main(["runs", "--db", str(b), "--campaign", f"{b}:1", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 4
    assert cli.main(["compare", "--db", str(b), "h200:1", "--by", "batch"]) == 0
    capsys.readouterr()
    assert cli.main(["log", "--db", str(b), "h200:3"]) == 2
    assert "run 3 has no log" in capsys.readouterr().err
    assert cli.main(["export", "--db", str(b), "--table", "profile", "--run", "h200:3"]) == 2
    assert "--run 3: the run has no operator profile" in capsys.readouterr().err
    # another file's ref stays refused, naming what was given
    assert cli.main(["export", "--db", str(b), "--campaign", "h100:1"]) == 2
    assert "no campaign named 'h100:1'" in capsys.readouterr().err
    assert cli.main(["log", "--db", str(b), "h100:3"]) == 2
    assert "got 'h100:3'" in capsys.readouterr().err


def test_report_captions_name_the_host_of_a_flagged_configuration(
        tmp_path: Path, campaigns: Any) -> None:
    # the figure's lines said @hostA / @hostB, its caption "noisy: torch fcn-r b8 cpu:1
    # (runs 1, 2), torch fcn-r b8 cpu:1 (runs 3, 4)": two configurations, one name
    from dltop.report.captions import flagged_text
    from dltop.report.data import spread_text
    from dltop.results.aggregate import config_results
    from dltop.store.study import open_study

    for host in ("hostA", "hostB"):
        db = connect(tmp_path / f"{host}.db")
        cid, jobs = campaigns.create(db, campaigns.profile("n", ["cpu:1"], batch_sizes=(8,),
                                                           repeats=2), name="n")
        for k, (_, jid) in enumerate(jobs):
            campaigns.add_run(db, cid, jid, [0.1 + 0.05 * k, 0.1, 0.12],
                              fields={"noisy": 1})
        db["campaigns"].update(cid, {"status": "finished", "host": host})
        db.close()
    study = open_study([str(tmp_path / "hostA.db"), str(tmp_path / "hostB.db")])
    results = config_results(study, [1, 2])
    text = flagged_text(results)
    assert "cpu:1 @hostA (runs 1, 2)" in text and "cpu:1 @hostB (runs 3, 4)" in text, text
    assert "@host" in spread_text(results)


def test_a_bad_file_in_a_study_is_refused_before_anything_is_printed(
        two: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # status printed the first database's state, then failed on the second; a directory
    # read "no such database" in a study and "is a directory" alone
    a, _ = two
    capsys.readouterr()
    assert cli.main(["status", "--db", str(a), "--db", str(tmp_path / "nope.db")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "nope.db: no such database" in err
    folder = tmp_path / "folder.db"
    folder.mkdir()
    for cmd in (["export"], ["import", "--db", str(tmp_path / "t.db")]):
        args = [*cmd, str(folder)] if cmd[0] == "import" else \
            [*cmd, "--db", str(a), "--db", str(folder)]
        assert cli.main(args) == 2
        assert f"{folder} is a directory, not a database file" in capsys.readouterr().err
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize("command", [["log", "1"], ["import", "x.db"],
                                     ["prune", "--dry-run"]])
def test_one_database_commands_refuse_a_second_db(
        command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # argparse kept the last --db silently; these commands read or write one database
    with pytest.raises(SystemExit) as exc:
        cli.main([command[0], "--db", "a.db", "--db", "b.db", *command[1:]])
    assert exc.value.code == 2
    assert "--db given twice: this command uses one database" in capsys.readouterr().err


@pytest.mark.slow  # spawns dltop or runner processes: over 1 s idle
def test_the_read_only_viewer_shows_a_study_of_several_databases(
        two: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``dltop tui --read-only --db A --db B``: one study, staged as a snapshot; without
    --read-only it is refused (the viewer steers one database)."""
    import asyncio

    from dltop.cli.viewer import viewer_db
    from dltop.errors import UserError
    from dltop.tui.app import DltopApp
    from dltop.tui.screens import TitleBar

    a, b = two
    assert cli.main(["tui", "--db", str(a), "--db", str(b)]) == 2
    assert "add --read-only" in capsys.readouterr().err
    with pytest.raises(UserError):
        viewer_db([str(a), str(b)], False, tmp_path)
    assert viewer_db([str(a), str(a)], False, tmp_path) == (a, None)  # one file, read once
    study, note = viewer_db([str(a), str(b)], True, tmp_path)
    assert note == "a snapshot of 2 databases" and study.parent == tmp_path
    db = connect(study, create=False)
    assert [(r["origin_db"], r["origin_id"]) for r in
            db.query("select origin_db, origin_id from campaigns order by id")] == \
        [(str(a), 1), (str(b), 1)]
    db.close()

    async def look() -> str:
        app = DltopApp(study, tmp_path / "logs", None, read_only=True,
                       resume_orphans=False)
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            return str(app.screen.query_one(TitleBar).render())

    title = asyncio.run(look())
    assert "read-only" in title and "check" in title


def test_a_study_title_says_a_campaign_is_still_running(
        two: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """A single database's title says its campaign's status; a study's said only names,
    so a campaign still running read as a result: each one not finished says its status.
    A campaign without any job exports no header-only table: "no runs yet", exit 2 (as
    a database without campaigns), nothing written."""
    from dltop.store import Store

    a, b = two
    db = connect(b)
    db["campaigns"].update(1, {"status": "running", "finished_at": None})
    Store(db).create_campaign("empty", [], [], "hostB", 1, None)
    db.close()
    dbs = ["--db", str(a), "--db", str(b)]
    for table in ("pivot", "summary", "scaling"):
        assert cli.main(["export", *dbs, "--campaign", "h100:1,h200:1",
                         "--table", table]) == 0
        assert capsys.readouterr().out.startswith(
            "Campaigns h100:1 `check`, h200:1 `check` (running): ")
    assert cli.main(["export", "--db", str(b), "--campaign", "1"]) == 0
    assert capsys.readouterr().out.startswith("Campaign 1 `check` (running, ")
    out = b.parent / "empty.csv"
    for table in ("pivot", "summary", "scaling"):
        assert cli.main(["export", *dbs, "--campaign", "h200:2", "--table", table,
                         "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert "Campaign h200:2 `empty` (queued" in err and "no runs yet" in err, err
        assert not out.exists()
