"""The campaign's owner as people see it (issue 38, item 1): its host and heartbeat age in
``dltop status`` and the viewer's title, whichever host looks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from dltop.live.campaign import read_campaign
from dltop.store import Store, connect
from dltop.tui.screens import owner_text


def test_status_and_the_title_name_the_owner_host_and_its_heartbeat(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLTOP_HOST", "login1")
    db = tmp_path / "d.db"
    store = Store(connect(db))
    me = os.getppid()  # alive, not this process: the engine, as login1 sees it
    cid = store.create_campaign("owned", ["p.toml"], ["dltop", "run"], "login1", me, None)
    store.set_campaign_status(cid, "running")
    store.db.execute("update campaigns set engine_heartbeat_s = ?", [time.time() - 12])
    store.db.conn.commit()

    for host in ("login1", "login2"):  # its own host (the pid) and another (the heartbeat)
        res = subprocess.run([sys.executable, "-m", "dltop", "status"], capture_output=True,
                             text=True, timeout=120,
                             env={**os.environ, "DLTOP_DB": str(db), "DLTOP_HOST": host})
        assert res.returncode == 0, res.stderr
        assert f"engine pid {me} on host login1, heartbeat 1" in res.stdout, res.stdout

    view = read_campaign(store.db, cid)
    assert view is not None and view.engine_alive
    assert view.engine_host == "login1"
    assert 12 <= time.time() - (view.engine_heartbeat_s or 0) < 15
    # here the pid says the engine lives: the title adds its beat only once it is late
    assert owner_text(view) == ""
    late = replace(view, engine_heartbeat_s=time.time() - 42)
    assert owner_text(late) == ", beat 40 s ago"
    # from another host: its host and heartbeat, the age in whole beats (5 s), so that
    # the title is not laid out again at every read
    monkeypatch.setenv("DLTOP_HOST", "login2")
    assert owner_text(view) == " on login1, beat 10 s ago"
