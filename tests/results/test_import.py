"""``dltop import --db TARGET SOURCE...`` (issue 40 item 2): campaigns copied with every
row they own under new ids, from sources opened read-only, in one transaction; the
same campaign twice adds nothing; bad sources leave TARGET as it was."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.results.importutil import body, export_json, file_hash, owned
from tests.results.test_study import make_db
from tests.store.olddb import migrated_to

from dltop import cli
from dltop.store import connect
from dltop.store.archive import pack_measured
from dltop.store.importer import FAULT_ENV


def add_rich_rows(path: Path) -> None:
    """Rows of every run-owned table for run 1 (evaluations, a profile, generations, serve
    requests, telemetry windows, environment, archive), so that a copy that forgets one
    shows."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("insert into evals (run_id, idx, epoch, accuracy) values (1, 0, 1, 0.5)")
        conn.execute("insert into profile_ops (run_id, rank, name, calls) "
                     "values (1, 0, 'aten::mm', 3)")
        conn.execute("insert into generations (run_id, idx, ttft_s, itl_s) "
                     "values (1, 0, 0.01, x'00')")
        conn.execute("insert into serve_requests (run_id, idx, request, status, chunk_s) "
                     "values (1, 0, 0, 200, x'00')")
        for t in (0.0, 0.5, 1.0):
            conn.execute("insert into gpu_samples (run_id, t_start_mono_s, gpu_index, n, "
                         "power_mean_w) values (1, ?, 0, 5, 100)", [t])
            conn.execute("insert into host_samples (run_id, t_start_mono_s, n, "
                         "cpu_mean_pct) values (2, ?, 5, 50)", [t])
        conn.execute("insert into environment (run_id, host, python_executable) "
                     "values (1, 'hostA', '/usr/bin/python3')")
        secs, samples = pack_measured([(0.2, 8), (0.202, 8), (0.204, 8)])
        conn.execute("insert into run_archive (run_id, pruned_at, n_measured, "
                     "measured_seconds, measured_samples) values (2, '2026-11-27', 3, ?, ?)",
                     [secs, samples])
        conn.execute("update runs set log_path = 'a-runs/run-1/runner.log' where id = 1")
    conn.close()


@pytest.fixture
def source(tmp_path: Path, campaigns: Any) -> Path:
    path = make_db(tmp_path / "a.db", campaigns, "hostA", "one", 0.2)
    add_rich_rows(path)
    return path


@pytest.fixture
def target(tmp_path: Path, campaigns: Any) -> Path:
    """A target that already holds a campaign of its own (its ids are taken)."""
    return make_db(tmp_path / "t.db", campaigns, "hostT", "mine", 0.3, batches=(4, 8, 32))


def test_import_copies_every_owned_row_under_new_ids(
        source: Path, target: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert not any(Path(f"{source}{x}").exists() for x in ("-wal", "-shm"))
    src_hash = file_hash(source)
    assert cli.main(["import", "--db", str(target), str(source)]) == 0
    assert "campaign 1 `one`: imported as campaign 2" in capsys.readouterr().out
    assert file_hash(source) == src_hash  # read-only: not even a WAL
    assert not any(Path(f"{source}{x}").exists() for x in ("-wal", "-shm"))
    before = export_json(capsys, "--db", str(source), "--table", "summary")
    mine, theirs = owned(source, 1), owned(target, 2)
    assert all(theirs[t] for t in theirs)  # every table has rows: none was left out
    assert mine == theirs
    conn = sqlite3.connect(target)
    origin, oid, log = conn.execute(
        "select origin_db, origin_id, (select log_path from runs where campaign_id = 2 "
        "order by id limit 1) from campaigns where id = 2").fetchone()
    uuids = [r[0] for r in conn.execute("select uuid from campaigns order by id")]
    conn.close()
    assert (origin, oid) == (str(source), 1)
    assert log == f"{source.parent}/a-runs/run-1/runner.log"  # relative: made absolute
    assert len(set(uuids)) == 2
    # the imported campaign exports as it did in its source (rows are the raw rows above)
    after = export_json(capsys, "--db", str(target), "--table", "summary", "--campaign", "2")
    assert body(after) == body(before)
    assert after["environment"] == before["environment"]


def test_importing_twice_adds_nothing(source: Path, target: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["import", "--db", str(target), str(source)]) == 0
    once = owned(target, 2)
    conn = sqlite3.connect(target)
    count = conn.execute("select count(*) from runs").fetchone()[0]
    conn.close()
    capsys.readouterr()
    assert cli.main(["import", "--db", str(target), str(source)]) == 0
    assert "not imported (already there as campaign 2)" in capsys.readouterr().out
    conn = sqlite3.connect(target)
    assert conn.execute("select count(*) from runs").fetchone()[0] == count
    assert conn.execute("select count(*) from campaigns").fetchone()[0] == 2
    conn.close()
    assert owned(target, 2) == once
    # a copy of the file is the same campaigns (their UUIDs), not new ones
    copy = source.parent / "copy.db"
    shutil.copy(source, copy)
    assert cli.main(["import", "--db", str(target), str(copy)]) == 0
    assert "0 campaigns imported" in capsys.readouterr().out


def test_old_schema_source_imports_and_twice_adds_nothing(
        tmp_path: Path, target: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.db"
    db = migrated_to(old, 22)  # before job templates and UUIDs
    db.execute("insert into campaigns (id, name, status, created_at, host) "
               "values (1, 'old', 'finished', '2026-01-01T00:00:00Z', 'hostO')")
    db.conn.commit()
    db.close()
    old_hash = file_hash(old)
    for _ in range(2):
        assert cli.main(["import", "--db", str(target), str(old)]) == 0
    out = capsys.readouterr().out
    assert "imported as campaign 2" in out and "already there as campaign 2" in out
    assert file_hash(old) == old_hash  # migrated in a copy, never in place


@pytest.mark.parametrize("case", ["not-dltop", "newer", "itself", "truncated", "missing"])
def test_bad_source_exits_2_and_leaves_target_unchanged(
        case: str, source: Path, target: Path, tmp_path: Path,
        foreign_sqlite: Any, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / f"{case}.db"
    if case == "not-dltop":
        foreign_sqlite(bad, "create table notes (t text)")
        why = "not a dltop database"
    elif case == "newer":
        shutil.copy(source, bad)
        conn = sqlite3.connect(bad)
        conn.execute("insert into schema_migrations values (999, 'future', '2030')")
        conn.commit()
        conn.close()
        why = "written by a newer dltop (schema version 999"
    elif case == "itself":
        bad = target
        why = "is the target database itself"
    elif case == "truncated":
        data = source.read_bytes()
        bad.write_bytes(data[: len(data) * 2 // 3])
        why = "damaged database (truncated or corrupt"
    else:
        why = "no such database"
    before = file_hash(target)
    capsys.readouterr()
    # a good source first: nothing of it lands either
    assert cli.main(["import", "--db", str(target), str(source), str(bad)]) == 2
    err = capsys.readouterr().err
    assert why in err and str(bad) in err and "Traceback" not in err
    assert file_hash(target) == before


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_interrupted_import_leaves_target_as_it_was(
        how: str, source: Path, target: Path, tmp_path: Path, campaigns: Any) -> None:
    second = make_db(tmp_path / "b.db", campaigns, "hostB", "two", 0.1)
    before = file_hash(target)
    rows_before = owned(target, 1)
    env = {**os.environ, FAULT_ENV: how}
    res = subprocess.run([sys.executable, "-m", "dltop", "import", "--db", str(target),
                          str(source), str(second)], capture_output=True, text=True, env=env,
                         timeout=120)
    if how == "kill":
        assert res.returncode == -9
    else:
        assert res.returncode != 0 and "import interrupted" in res.stderr
    # the killed transaction's pages, if any, are in the WAL, never committed
    db = connect(target, create=False)
    assert [r["id"] for r in db.query("select id from campaigns")] == [1]
    assert db.execute("select count(*) from runs").fetchone()[0] == 6
    db.close()
    assert owned(target, 1) == rows_before
    if how == "raise":
        assert file_hash(target) == before
    # and a later import succeeds whole
    assert subprocess.run([sys.executable, "-m", "dltop", "import", "--db", str(target),
                           str(source), str(second)], capture_output=True,
                          timeout=120).returncode == 0
    assert owned(target, 2) == owned(source, 1)
    assert owned(target, 3) == owned(second, 1)


STEPS = Path(__file__).resolve().parents[1] / "programs" / "steps.py"


@pytest.mark.slow
def test_a_real_campaign_imports_whole(tmp_path: Path, profile_text: Any,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A real ``dltop run`` (the command framework's sleeping steps, 1.2 s a run so that every
    telemetry table gets windows even on a quiet machine; simulated GPU
    telemetry): its samples, environment and runs copied; its exports the same."""
    prof = tmp_path / "p.toml"
    prof.write_text(profile_text({
        "frameworks": ["command"], "models": ["steps"], "batch_sizes": [8],
        "devices": ["cpu:1"], "iterations": 8, "warmup": 1, "repeats": 2,
        "command": [sys.executable, str(STEPS), "{total}", "0.15"]}, name="real"))
    src = tmp_path / "run.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(src),
                          "--headless", "--fake-gpus", "1"], capture_output=True, text=True,
                         timeout=240)
    assert res.returncode == 0, res.stderr
    conn = sqlite3.connect(src)
    (made,) = conn.execute("select uuid from campaigns").fetchone()
    conn.close()
    assert uuid.UUID(made).version == 4  # dltop run gave the campaign its UUID
    target = tmp_path / "t.db"
    assert cli.main(["import", "--db", str(target), str(src)]) == 0
    mine, theirs = owned(src, 1), owned(target, 1)
    for table in ("runs", "environment", "host_samples", "gpu_samples", "iterations"):
        assert theirs[table], table  # the run filled them, and they came across
    assert mine == theirs
    for args in (("--table", "summary"), ("--metric", "power"), ("--metric", "throughput")):
        assert export_json(capsys, "--db", str(target), *args) == \
            export_json(capsys, "--db", str(src), *args)
    # dltop log finds the run's log where the source's run folder has it
    capsys.readouterr()
    assert cli.main(["log", "--db", str(target), "1"]) == 0


def test_unfinished_and_failed_campaigns_are_left_out(
        source: Path, target: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # an engine may still write a running campaign; a failed one's queue would be taken
    # up by 'dltop run --resume' in the target: both are read with several --db instead
    for status in ("running", "failed"):
        conn = sqlite3.connect(source)
        with conn:
            conn.execute("update campaigns set status = ?", [status])
        conn.close()
        capsys.readouterr()
        assert cli.main(["import", "--db", str(target), str(source)]) == 0
        assert f"not imported ({status}: its queue can still be resumed" in \
            capsys.readouterr().out
        assert [c["ref"] for c in export_json(capsys, "--db", str(source), "--db",
                                              str(target), "--campaign", "all")
                ["campaigns"]] == ["a:1", "t:1"]
    conn = sqlite3.connect(target)
    assert conn.execute("select count(*) from campaigns").fetchone()[0] == 1
    conn.close()
