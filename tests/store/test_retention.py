"""Retention: `dltop prune`, `dltop vacuum`, the storage line, and migration 12."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlite_utils

from dltop.catalog import CampaignStatus, RunStatus
from dltop.cli import main
from dltop.procs import process_start_time
from dltop.store import Store, connect
from dltop.store import migrations as migs
from dltop.store.archive import pack_measured, unpack_measured
from dltop.store.retention import CampaignNotEnded
from dltop.store.tx import transaction

from .conftest import campaign


def _filled(store: Store, status: CampaignStatus = CampaignStatus.FINISHED,
            runs: int = 2, its: int = 20) -> tuple[int, list[int]]:
    """A campaign with ``runs`` ok runs, each with iterations and GPU/host samples."""
    cid, jobs = campaign(store, runs)
    run_ids = []
    for job_id in jobs:
        rid = store.start_run(job_id, cid, 1, "", 8)
        store.add_iterations(rid, [{"idx": i, "seconds": 0.01 + i * 1e-4, "samples": 8,
                                    "warmup": int(i < 2), "loss": 1.0} for i in range(its)])
        with transaction(store.db):
            store.db["gpu_samples"].insert_all(
                [{"run_id": rid, "t_start_mono_s": k, "gpu_index": 0, "n": 1, "simulated": 1,
                  "t_wall_s": 1.0} for k in range(5)])
            store.db["host_samples"].insert_all(
                [{"run_id": rid, "t_start_mono_s": k, "n": 1, "tree_cpu_pct": 50.0 + k,
                  "t_wall_s": 1.0} for k in range(5)])
        store.finish_run(rid, job_id, RunStatus.OK, {"median_s": 0.011})
        run_ids.append(rid)
    store.set_campaign_status(cid, status)
    return cid, run_ids


def _count(db: sqlite_utils.Database, table: str, cid: int) -> int:
    return int(next(db.query(f"select count(*) as n from {table} t join runs r on "
                             "r.id = t.run_id where r.campaign_id = ?", [cid]))["n"])


@pytest.fixture
def db_file(tmp_path: Path) -> tuple[Path, Store]:
    path = tmp_path / "d.db"
    return path, Store(connect(path))


def test_prune_keeps_summaries_and_never_touches_an_unfinished_campaign(
        db_file: tuple[Path, Store], capsys: pytest.CaptureFixture[str]) -> None:
    path, store = db_file
    done, done_runs = _filled(store)
    live, _ = _filled(store, CampaignStatus.RUNNING)
    runs_dir = path.parent / "d-runs"
    for rid in done_runs:
        (runs_dir / f"run-{rid}").mkdir(parents=True)
        (runs_dir / f"run-{rid}" / "runner.log").write_bytes(b"x" * 5000)
    assert main(["prune", "--db", str(path), "--campaign", "all", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "keeps run summaries, deletes raw rows of 1 campaign (1): 2 runs, 40 iterations, " \
           "10 GPU and 10 host samples" in out
    assert "pruned 1 campaign (1)" in out and "run folders freed 10 kB" in out
    for table in ("iterations", "gpu_samples", "host_samples"):
        assert _count(store.db, table, done) == 0 and _count(store.db, table, live) > 0
    assert not runs_dir.joinpath("run-1").exists()
    arch = list(store.db.query("select * from run_archive order by run_id"))
    assert [a["run_id"] for a in arch] == done_runs
    assert arch[0]["n_measured"] == 18 and arch[0]["gpu_simulated"] == 1
    assert arch[0]["tree_cpu_all_pct"] == pytest.approx(52.0)
    assert (arch[0]["iterations"], arch[0]["gpu_samples"], arch[0]["host_samples"]) == (20, 5, 5)
    assert [r["median_s"] for r in store.db.query(
        "select median_s from runs where campaign_id = ?", [done])] == [0.011, 0.011]
    # a second prune has nothing left to delete, and says so by its counts
    assert main(["prune", "--db", str(path), "--campaign", "1", "--yes"]) == 0
    assert "0 iterations" in capsys.readouterr().out


def test_naming_an_unfinished_campaign_or_bad_input_deletes_nothing(
        db_file: tuple[Path, Store], capsys: pytest.CaptureFixture[str]) -> None:
    path, store = db_file
    _filled(store)
    live, _ = _filled(store, CampaignStatus.PAUSED)
    before = store.db["iterations"].count
    for argv, said in ((["--campaign", str(live)], "is paused; prune never touches"),
                       (["--campaign", "7"], "no campaign 7"),
                       (["--campaign", "nope"], "no campaign named 'nope'"),
                       (["--older-than", "30 days"], "--older-than: expected a duration"),
                       (["--older-than=-3d"], "--older-than: expected a duration"),
                       ([], "pass --yes to confirm")):  # stdin is not a terminal here
        assert main(["prune", "--db", str(path), "--older-than", "0s", *argv]) == 2, argv
        assert said in capsys.readouterr().err, argv
    assert store.db["iterations"].count == before
    assert main(["prune", "--db", str(path / "missing.db")]) == 2


def test_dry_run_and_interactive_confirmation(db_file: tuple[Path, Store],
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path, store = db_file
    _filled(store)
    n = store.db["iterations"].count
    assert main(["prune", "--db", str(path), "--older-than", "0s", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "40 iterations" in out and "frees about" in out and "dry run, nothing deleted" in out
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    assert main(["prune", "--db", str(path), "--older-than", "0s"]) == 0
    assert store.db["iterations"].count == n
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    assert main(["prune", "--db", str(path), "--older-than", "0s"]) == 0
    assert store.db["iterations"].count == 0


def test_older_than_selects_by_end_time_and_takes_idle_samples(
        db_file: tuple[Path, Store], capsys: pytest.CaptureFixture[str]) -> None:
    path, store = db_file
    old, _ = _filled(store)
    recent, _ = _filled(store)
    with transaction(store.db):
        store.db["campaigns"].update(old, {"finished_at": "2020-01-01T00:00:00.000Z"})
        store.db["host_samples"].insert_all([{"run_id": None, "t_start_mono_s": 0, "n": 1,
                                              "t_wall_s": t} for t in (1.0, 4e9)])
    assert main(["prune", "--db", str(path), "--yes"]) == 0  # default: older than 30 days
    assert "1 idle samples deleted" in capsys.readouterr().out
    assert _count(store.db, "iterations", old) == 0 and _count(store.db, "iterations", recent)
    assert [r["t_wall_s"] for r in store.db.query(
        "select t_wall_s from host_samples where run_id is null")] == [4e9]


def test_no_keep_summaries_deletes_campaigns_entirely(
        db_file: tuple[Path, Store], capsys: pytest.CaptureFixture[str]) -> None:
    path, store = db_file
    gone, _ = _filled(store)
    kept, _ = _filled(store)
    store.record_environment(1, {"host": "h"})
    assert main(["prune", "--db", str(path), "--campaign", str(gone), "--no-keep-summaries",
                 "--yes"]) == 0
    assert "deletes entirely" in capsys.readouterr().out
    assert [c["id"] for c in store.db.query("select id from campaigns")] == [kept]
    for table in ("jobs", "runs"):
        assert {r["campaign_id"] for r in store.db.query(f"select campaign_id from {table}")} \
            == {kept}
    assert store.db["environment"].count == 0 and store.db["run_archive"].count == 0
    assert _count(store.db, "iterations", kept) == 40


def test_a_reopened_campaign_is_left_alone(db_file: tuple[Path, Store]) -> None:
    _, store = db_file
    cid, runs = _filled(store)
    store.set_campaign_status(cid, CampaignStatus.RUNNING)  # an append reopened it
    with pytest.raises(CampaignNotEnded, match="is running"):
        store.retention.prune_run(runs[0])
    with pytest.raises(CampaignNotEnded):
        store.retention.delete_campaign(cid)
    assert _count(store.db, "iterations", cid) == 40 and store.db["run_archive"].count == 0


def test_measured_iterations_pack_exactly() -> None:
    rows = [(0.1, 8), (1e-300, 2**70), (float("inf"), 0), (3.141592653589793, 8)]
    assert unpack_measured(*pack_measured(rows)) == rows
    assert unpack_measured(*pack_measured([])) == []


def test_vacuum_and_the_storage_line(db_file: tuple[Path, Store],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    path, store = db_file
    _filled(store, runs=3, its=3000)
    assert main(["prune", "--db", str(path), "--older-than", "0s", "--yes"]) == 0
    capsys.readouterr()
    def size() -> int:
        return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())

    before = size()
    assert main(["vacuum", "--db", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"vacuum: {path}: ") and "freed" in out
    assert size() < before / 2 and Path(f"{path}-wal").stat().st_size == 0
    assert main(["status", "--db", str(path)]) == 0
    assert "storage: database " in capsys.readouterr().out
    # an engine alive on the database: vacuum would stall it, so it refuses
    live, _ = _filled(store, CampaignStatus.RUNNING, runs=1)
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        with transaction(store.db):
            store.db["campaigns"].update(live, {
                "engine_pid": engine.pid, "engine_start_time": process_start_time(engine.pid)})
        assert main(["vacuum", "--db", str(path)]) == 2
        assert "has a running engine" in capsys.readouterr().err
    finally:
        engine.kill()
        engine.wait()
    assert main(["status", "--db", str(path)]) == 0
    assert "storage: database " in capsys.readouterr().out


def _v10_db(path: Path) -> sqlite_utils.Database:
    db = sqlite_utils.Database(path)
    migs.apply(db, upto=10)
    return db


def test_migration_12_makes_iterations_without_rowid_keeping_every_row(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = _v10_db(path)
    store = Store(db)
    cid, jobs = campaign(store, 1)
    # a run row as dltop wrote it then (today's start_run stores runs.executor, of 29)
    rid = db["runs"].insert({"job_id": jobs[0], "campaign_id": cid, "attempt": 1,
                             "status": "running", "samples_per_iter": 8}).last_pk
    rows = [{"idx": i, "seconds": 0.5 + i, "samples": 8, "warmup": 0, "loss": 0.1 * i,
             "t_mono_ns": 10**12 + i, "t_wall_s": 1.7e9 + i} for i in range(50)]
    store.add_iterations(rid, rows)
    with transaction(db):
        db["iterations"].create_index(["seconds"], index_name="idx_it_seconds")
    before = list(db.query("select * from iterations order by run_id, idx"))
    cols = [c.name for c in db["iterations"].columns]
    db.conn.close()

    db = connect(path)
    sql = next(db.query("select sql from sqlite_master where name = 'iterations'"))["sql"]
    assert "WITHOUT ROWID" in sql.upper()
    assert [c.name for c in db["iterations"].columns] == cols
    assert list(db.query("select * from iterations order by run_id, idx")) == before
    indexes = {r["name"] for r in db.query(
        "select name from sqlite_master where type = 'index' and tbl_name = 'iterations'")}
    assert indexes == {"idx_it_seconds"}  # no sqlite_autoindex: the key is the table
    with pytest.raises(sqlite3.OperationalError):
        db.execute("select rowid from iterations")
    # the store's writes go on: a re-sent index replaces its row, the key is enforced
    Store(db).add_iterations(rid, [{**rows[0], "seconds": 9.0}])
    assert db["iterations"].count == 50
    assert next(db.query("select seconds from iterations where idx = 0"))["seconds"] == 9.0
    with pytest.raises(sqlite3.IntegrityError):
        db.execute("insert into iterations (run_id, idx) values (?, 0)", [rid])


def test_prune_and_vacuum_show_a_database_path_s_controls_never_send_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file name can hold ESC and BEL: printed raw, it would retitle the terminal."""
    path = tmp_path / "a\x1b]0;pwned\x07\u202eb.db"
    _filled(Store(connect(path)), runs=1, its=10)
    assert main(["prune", "--db", str(path), "--older-than", "900d", "--yes"]) == 0
    assert main(["vacuum", "--db", str(path)]) == 0
    out = capsys.readouterr().out
    assert "nothing to prune" in out and "vacuum: " in out, out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out, out
    assert out.count("a\\x1b]0;pwned\\x07\\u202eb.db") == 2, out
