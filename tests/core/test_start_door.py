"""One door to a campaign: ``dltop run`` (here and ``--detach``) and the viewer's add-profile
start the same campaign from the same profile, and refuse the same bad one alike."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.dltop_env import campaign_status

from dltop.errors import UserError
from dltop.jobs.rundir import runs_dir_of
from dltop.jobs.start import StartOptions, check, start_campaign
from dltop.store import Store, connect
from dltop.tui import ops

STEPS = Path(__file__).resolve().parents[1] / "programs" / "steps.py"


def dltop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, env={**os.environ, "DLTOP_DB": "/nonexistent/unused.db"},
                          timeout=240)


def campaign_rows(db: Path) -> dict[str, Any]:
    """What the campaign holds, less what differs by nature (ids, times, pids, paths)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        camp = conn.execute("select name, profiles, pack, status, argv from campaigns"
                            ).fetchall()
        jobs = conn.execute("select j.position, s.config_key, s.spec_json from jobs j "
                            "join job_specs s on s.job_id = j.id order by j.position"
                            ).fetchall()
        runs = conn.execute("select j.position, r.status from runs r join jobs j "
                            "on j.id = r.job_id order by j.position").fetchall()
    finally:
        conn.close()
    assert len(camp) == 1, camp
    name, profiles, pack, status, argv = camp[0]
    return {"campaign": (name, profiles, pack, status), "argv": argv, "jobs": jobs,
            "runs": runs}


def finished(db: Path) -> bool:
    return campaign_status(db) == "finished"


@pytest.mark.slow
def test_the_cli_and_the_viewer_start_the_same_campaign(tmp_path: Path, profile_text: Any,
                                                        wait_until: Any) -> None:
    prof = tmp_path / "door.toml"
    prof.write_text(profile_text({"frameworks": ["command"], "models": ["a", "b"],
                                  "batch_sizes": [8], "devices": ["cpu:1"], "iterations": 4,
                                  "warmup": 1,
                                  "command": [sys.executable, str(STEPS), "{total}", "0.01"]},
                                 name="door"))
    here, detached, viewer = (tmp_path / n / "d.db" for n in ("here", "detached", "viewer"))
    for db in (here, detached, viewer):
        db.parent.mkdir()
    res = dltop("run", str(prof), "--headless", "--no-telemetry", "--db", str(here))
    assert res.returncode == 0, res.stderr
    res = dltop("run", str(prof), "--detach", "--db", str(detached))
    # in the background; or, on a quiet machine, already finished within the start-up
    # check, its log's tail shown instead
    assert res.returncode == 0 and ("engine started in the background" in res.stdout
                                    or "campaign 1 finished: 2 ok" in res.stderr), res.stderr
    connect(viewer, create=True).close()  # the viewer makes it before it adds (ensure_database)
    text = ops.add_profile(viewer, runs_dir_of(viewer), str(prof), None)
    assert text.startswith(f"{prof}: new campaign, engine pid "), text
    for db in (detached, viewer):
        wait_until(lambda db=db: finished(db), 120, f"the engine of {db} to finish")
    rows = {db: campaign_rows(db) for db in (here, detached, viewer)}
    argvs = {db: rows[db].pop("argv") for db in rows}
    assert rows[here] == rows[detached] == rows[viewer], rows
    assert rows[here]["campaign"][0] == "door" and rows[here]["campaign"][3] == "finished"
    assert [status for _, status in rows[here]["runs"]] == ["ok", "ok"]
    # the command line stored: the user's own, or the one the door gave a detached engine
    assert '"--detach"' not in argvs[detached] and f'"{detached}"' in argvs[detached]
    assert f'"{viewer}"' in argvs[viewer] and f'"{prof}"' in argvs[viewer]


def test_a_profile_refused_by_the_cli_is_refused_by_the_viewer(tmp_path: Path,
                                                               profile_text: Any) -> None:
    prof = tmp_path / "big.toml"
    prof.write_text(profile_text({"frameworks": ["command"], "models": ["a"],
                                  "batch_sizes": [8], "devices": ["gpu:64"],
                                  "command": ["true"]}))
    db = tmp_path / "d.db"
    res = dltop("run", str(prof), "--detach", "--db", str(db))
    assert res.returncode == 2, res.stderr
    message = res.stderr.removeprefix("dltop: error: ").strip()
    assert "64" in message and "\n" not in message, res.stderr
    with pytest.raises(UserError) as in_dialog:  # the add dialog's check
        check([str(prof)], StartOptions(("dltop", "run", str(prof))))
    assert not db.exists() and not runs_dir_of(db).exists()  # nothing made
    connect(db, create=True).close()  # as the viewer's, made before it adds
    with pytest.raises(UserError) as on_add:
        ops.add_profile(db, runs_dir_of(db), str(prof), None)
    assert str(in_dialog.value) == str(on_add.value) == message
    assert Store(connect(db)).queue.open_campaigns() == [] and not runs_dir_of(db).exists()


@pytest.mark.parametrize("options, message", [
    (StartOptions(("dltop", "run", "--resume"), resume=True, pack=True),
     "--resume takes no profiles, no --pack and no --system"),
    (StartOptions(("dltop", "run")), "dltop run needs at least one PROFILE (or --resume)"),
])
def test_the_door_refuses_options_that_do_not_go_together(tmp_path: Path,
                                                          options: StartOptions,
                                                          message: str) -> None:
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        start_campaign([], tmp_path / "d.db", options)
    assert list(tmp_path.iterdir()) == []
